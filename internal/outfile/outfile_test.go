package outfile

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestWriteReplacesWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "new" {
		t.Fatalf("read %q", got)
	}
	if st, _ := os.Stat(path); st.Mode().Perm()&0o444 != 0o444 {
		t.Errorf("mode %v: a report is for everyone to read", st.Mode())
	}
	assertOnly(t, filepath.Dir(path), "report.json")
}

// Nothing is at the target until Commit; Discard leaves the old file.
func TestNothingAppearsBeforeCommit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("half"))
	if _, err := os.Stat(path); err == nil {
		t.Fatal("the target exists before Commit")
	}
	f.Discard()
	assertOnly(t, dir)

	os.WriteFile(path, []byte("old"), 0o644)
	f, _ = Create(path)
	f.Write([]byte("new"))
	f.Discard()
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Fatalf("after Discard the target reads %q", got)
	}
	assertOnly(t, dir, "table.json")
}

// Two writers of one target, as two pods of a sweep on one volume with
// the same PID, never share a temporary file.
func TestTemporaryNamesAreUnique(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	a, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Create(path)
	if err != nil {
		t.Fatalf("a second writer of the same target: %v", err)
	}
	if a.tmp.Name() == b.tmp.Name() {
		t.Fatalf("both write %s", a.tmp.Name())
	}
	for _, f := range []*File{a, b} {
		if !IsTemp(f.tmp.Name()) {
			t.Errorf("IsTemp(%s) = false", f.tmp.Name())
		}
		f.Discard()
	}
}

func TestIsTemp(t *testing.T) {
	for name, want := range map[string]bool{
		".plan.json.tmp-1-0a1b2c3d":     true,
		"out/.p.json.tmp-4242-deadbeef": true,
		"plan.json":                     false,
		".plan.json.tmp-1-0a1b2c3":      false, // 7 hex digits
		".plan.json.tmp-x-0a1b2c3d":     false,
		".plan.json.tmp-1-0a1b2c3g":     false,
		"plan.json.tmp-1-0a1b2c3d":      false, // not hidden
		"abc.json.partial-12.json":      false,
		".tmp-1-0a1b2c3d":               false, // no target name
		"points/.x.json.tmp-7-00000000": true,
	} {
		if got := IsTemp(name); got != want {
			t.Errorf("IsTemp(%q) = %v, want %v", name, got, want)
		}
	}
}

// A write past the file size limit (a full disk, as ulimit -f makes one)
// fails naming the target and the OS's reason, and leaves the old file
// whole and no temporary file. It runs in a child process, which alone
// takes the limit.
func TestFullDiskLeavesTheOldFile(t *testing.T) {
	if dir := os.Getenv("OUTFILE_FULL_DISK_DIR"); dir != "" {
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 4096, Max: 4096}); err != nil {
			t.Fatal(err)
		}
		err := Write(filepath.Join(dir, "report.json"), bytes.Repeat([]byte("x"), 64<<10))
		if err == nil {
			t.Fatal("a write past the file size limit succeeded")
		}
		os.Stdout.WriteString("ERR " + err.Error() + "\n")
		return
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	os.WriteFile(path, []byte(`{"old":true}`), 0o644)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFullDiskLeavesTheOldFile$", "-test.v")
	cmd.Env = append(os.Environ(), "OUTFILE_FULL_DISK_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if want := "ERR writing " + path + ": file too large"; !strings.Contains(string(out), want) {
		t.Errorf("child said:\n%s\nwant a line %q", out, want)
	}
	if got, _ := os.ReadFile(path); string(got) != `{"old":true}` {
		t.Errorf("the old file now reads %q", got)
	}
	assertOnly(t, dir, "report.json")
}

// assertOnly checks that dir holds exactly the names given.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}

// A link is written through to its file; a named pipe (as a device) is
// refused, not replaced by a regular file.
func TestLinksAreFollowedAndDevicesRefused(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.json")
	os.WriteFile(real, []byte("old"), 0o644)
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink("real.json", link); err != nil {
		t.Skip(err)
	}
	if err := Write(link, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Lstat(link); st.Mode()&os.ModeSymlink == 0 {
		t.Error("the link was replaced by a file")
	}
	if got, _ := os.ReadFile(real); string(got) != "new" {
		t.Errorf("the link's file reads %q", got)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	err := Write(fifo, []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "not a regular file (a named pipe)") {
		t.Fatalf("writing a named pipe: %v", err)
	}
	if st, _ := os.Lstat(fifo); st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatal("the named pipe was replaced")
	}
}
