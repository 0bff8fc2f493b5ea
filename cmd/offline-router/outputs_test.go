package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccy/go-json"
	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/outfile"
	"github.com/offline-router/offline-router/internal/sweep"
)

// noTemporaries fails the test if dir (or its points folder) holds a
// temporary file: a run that ended, however, must leave none.
func noTemporaries(t *testing.T, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if outfile.IsTemp(e.Name()) || strings.Contains(e.Name(), "partial") {
				t.Errorf("%s was left in %s", e.Name(), dir)
			}
		}
	}
}

// waitForTemporary waits until a temporary file of target exists in its
// folder, holding at least min bytes: the run is under way.
func waitForTemporary(t *testing.T, target string, min int64) {
	t.Helper()
	dir := filepath.Dir(target)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if info, err := e.Info(); err == nil && outfile.IsTemp(e.Name()) &&
				strings.HasPrefix(e.Name(), "."+filepath.Base(target)) && info.Size() >= min {
				return
			}
		}
	}
	t.Fatalf("no temporary file of %s appeared", target)
}

// TestReplayStoppedBySignalLeavesWholeStreams: SIGINT, SIGTERM or SIGHUP
// mid-run ends replay with 128+n; its streams hold whole lines closed by
// one "# incomplete" comment, and replay as they are through serve; the
// report and the rows are not written; no temporary file is left.
func TestReplayStoppedBySignalLeavesWholeStreams(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			cmds, resps, report := filepath.Join(dir, "c.jsonl"), filepath.Join(dir, "r.jsonl"), filepath.Join(dir, "rep.json")
			rows := filepath.Join(dir, "rows.csv")
			cmd := exec.Command(binary, "replay", "--sessions", "20000", "--engine", "simple", "-q",
				"--emit-commands", cmds, "--emit-responses", resps, "--report", report, "--requests-out", rows)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitForTemporary(t, resps, 1<<20) // past a few flushes of the stream's buffer
			cmd.Process.Signal(sig)
			if code := waitExit(t, cmd); code != 128+int(sig) {
				t.Fatalf("exit %d, want %d: %s", code, 128+int(sig), stderr.String())
			}
			if _, err := os.Stat(report); err == nil {
				t.Error("a stopped replay wrote its report")
			}
			if _, err := os.Stat(rows); err == nil {
				t.Error("a stopped replay wrote its rows")
			}
			noTemporaries(t, dir)
			name := strings.TrimPrefix(fmt.Sprint(sig), "")
			var answered []byte
			for _, path := range []string{cmds, resps} {
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				body, last := splitLastLine(data)
				n := bytes.Count(body, []byte("\n"))
				want := fmt.Sprintf("# incomplete: stopped by %s after %d commands\n", signalName(sig), n)
				if string(last) != want {
					t.Fatalf("%s ends %q, want %q (%s)", path, last, want, name)
				}
				for i, line := range bytes.Split(bytes.TrimSuffix(body, []byte("\n")), []byte("\n")) {
					if !json.Valid(line) {
						t.Fatalf("%s line %d is not JSON: %.80s", path, i+1, line)
					}
				}
				if path == resps {
					answered = body
				}
			}
			serve := exec.Command(binary)
			in, _ := os.Open(cmds)
			defer in.Close()
			serve.Stdin = in
			got, err := serve.Output()
			if err != nil {
				t.Fatalf("serve of the stopped stream: %v", err)
			}
			if !bytes.Equal(got, answered) {
				t.Fatal("serve does not answer the stopped stream as the replay did")
			}
		})
	}
}

// splitLastLine splits data before its last line.
func splitLastLine(data []byte) (body, last []byte) {
	i := bytes.LastIndexByte(bytes.TrimSuffix(data, []byte("\n")), '\n')
	return data[:i+1], data[i+1:]
}

func signalName(sig syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM", syscall.SIGHUP: "SIGHUP"}[sig]
}

// TestServeEndsOnSignalWhileStdoutStalls: with stdout a full pipe nobody
// reads, a stop signal still ends serve within about a second, status
// 128+n, and stderr says the last response line may be cut.
func TestServeEndsOnSignalWhileStdoutStalls(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, stdin, stdout, stderr := started(t)
			defer stdout.Close()
			go func() {
				line := []byte(`{"op":"inspect"}` + "\n")
				for range 1_000_000 {
					if _, err := stdin.Write(line); err != nil {
						return
					}
				}
			}()
			time.Sleep(500 * time.Millisecond) // stdout's pipe fills, and serve blocks on it
			start := time.Now()
			cmd.Process.Signal(sig)
			code := waitExit(t, cmd)
			if code != 128+int(sig) || !strings.Contains(stderr.String(), "may be cut") {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %v to end", took)
			}
		})
	}
}

// TestSighupWhileIdleExits: SIGHUP is a stop, as SIGTERM: 129, not Go's
// default death.
func TestSighupWhileIdleExits(t *testing.T) {
	cmd, stdin, stdout, stderr := started(t)
	defer stdin.Close()
	io.WriteString(stdin, `{"op":"inspect"}`+"\n")
	buf := make([]byte, 1)
	stdout.Read(buf) // the first answer began: serve is up
	cmd.Process.Signal(syscall.SIGHUP)
	io.Copy(io.Discard, stdout)
	if code := waitExit(t, cmd); code != 129 || !strings.Contains(stderr.String(), "stopped after 1 commands, all answered") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestFullDiskKeepsTheOldFile: every file replay, sweep and merge write
// fails whole on a full disk (a file size limit of 4 KiB): exit 1, the path
// and the OS's reason named, the file there before intact, no temporary
// file left.
func TestFullDiskKeepsTheOldFile(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash for ulimit -f")
	}
	sweepDir := filepath.Join(t.TempDir(), "out")
	spec := writeSpec(t, smallSpec)
	if _, stderr, code := run(t, "", "sweep", spec, "--out", sweepDir, "-q"); code != 0 {
		t.Fatalf("sweep: %s", stderr)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name, file string
		args       []string
	}{
		{"report", "rep.json", []string{"replay", "--sessions", "30", "--report", "@"}},
		{"plot", "fig.png", []string{"replay", "--sessions", "30", "--plot", "@"}},
		{"emit-commands", "c.jsonl", []string{"replay", "--sessions", "30", "--emit-commands", "@"}},
		{"emit-responses", "r.jsonl", []string{"replay", "--sessions", "30", "--emit-responses", "@"}},
		{"merge report", "merged.json", []string{"sweep", "merge", sweepDir, "--report", "@"}},
		{"sweep table", filepath.Join(sweepDir, sweep.TableFile), []string{"sweep", spec, "--out", sweepDir, "-q"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := c.file
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, c.file)
			}
			old := []byte("the file that was there\n")
			if err := os.WriteFile(path, old, 0o644); err != nil {
				t.Fatal(err)
			}
			args := make([]string, len(c.args))
			for i, a := range c.args {
				args[i] = strings.ReplaceAll(a, "@", path)
			}
			sh := exec.Command("bash", append([]string{"-c", `ulimit -f 4; exec "$@"`, "bash", binary}, args...)...)
			var stderr bytes.Buffer
			sh.Stderr = &stderr
			err := sh.Run()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 1 {
				t.Fatalf("%v, want exit 1: %s", err, stderr.String())
			}
			if want := "writing " + path + ": file too large"; !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr %q does not say %q", stderr.String(), want)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, old) {
				t.Errorf("the old file now reads %.60q", got)
			}
			noTemporaries(t, dir, sweepDir, filepath.Join(sweepDir, sweep.PointsDir))
		})
	}
}

// TestBrokenStdoutExitsOne: a table nobody reads (| head) or that cannot be
// written (/dev/full) is a failure of the run's output, exit 1 with the
// reason; the files asked for are still written whole.
func TestBrokenStdoutExitsOne(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "rep.json")
	cmd := exec.Command(binary, "replay", "--sessions", "30", "--report", report)
	r, w, _ := os.Pipe()
	cmd.Stdout = w
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	bufio.NewReader(r).ReadString('\n') // as head -n 1 reads, then goes
	r.Close()
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "broken pipe") {
		t.Fatalf("closed stdout: %v: %s", err, stderr.String())
	}
	if _, err := readReportFile(report); err != nil {
		t.Errorf("the report: %v", err)
	}
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full")
	}
	defer full.Close()
	cmd = exec.Command(binary, "replay", "--sessions", "30")
	cmd.Stdout = full
	stderr.Reset()
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "no space left") {
		t.Fatalf("stdout /dev/full: %v: %s", err, stderr.String())
	}
}

func readReportFile(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	return v, json.Unmarshal(data, &v)
}

// TestMergeRefusesToWriteOverItsInputs: merge's --report or --plot naming
// the sweep's plan or a point's report, however spelt, is refused before
// anything is read or written (exit 2), and the input is untouched.
func TestMergeRefusesToWriteOverItsInputs(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	spec := writeSpec(t, smallSpec)
	if _, stderr, code := run(t, "", "sweep", spec, "--out", out, "-q"); code != 0 {
		t.Fatalf("sweep: %s", stderr)
	}
	plan := filepath.Join(out, sweep.PlanFile)
	reports, _ := filepath.Glob(filepath.Join(out, sweep.PointsDir, "*.json"))
	before, _ := os.ReadFile(plan)
	for _, args := range [][]string{
		{"--report", plan},
		{"--report", filepath.Join(out, sweep.PointsDir, "..", sweep.PlanFile)},
		{"--report", linkTo(t, plan, "plan-link.json")},
		{"--report", reports[0]},
		{"--report", filepath.Join(out, sweep.PointsDir, "."+string(os.PathSeparator)+filepath.Base(reports[1]))},
	} {
		_, stderr, code := run(t, "", append([]string{"sweep", "merge", out}, args...)...)
		if code != 2 || !strings.Contains(stderr, "is also the") {
			t.Errorf("merge %q: exit %d: %s", args, code, stderr)
		}
	}
	if after, _ := os.ReadFile(plan); !bytes.Equal(before, after) {
		t.Fatal("the plan was written over")
	}
	if _, stderr, code := run(t, "", "sweep", "merge", out, "--report", filepath.Join(t.TempDir(), "t.json")); code != 0 {
		t.Fatalf("a merge after the refusals: %s", stderr)
	}
}

// TestResumedSweepReplaysACutReport: a point file cut short counts as not
// done: the sweep names it, replays the point, and the table is whole.
func TestResumedSweepReplaysACutReport(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	spec := writeSpec(t, smallSpec)
	if _, stderr, code := run(t, "", "sweep", spec, "--out", out, "-q", "--shard", "1/2"); code != 0 {
		t.Fatalf("sweep: %s", stderr)
	}
	reports, _ := filepath.Glob(filepath.Join(out, sweep.PointsDir, "*.json"))
	data, _ := os.ReadFile(reports[0])
	os.WriteFile(reports[0], data[:len(data)/3], 0o644)
	_, stderr, code := run(t, "", "sweep", spec, "--out", out, "--shard", "1/2")
	if code != 0 || !strings.Contains(stderr, reports[0]+" is not a whole report") || !strings.Contains(stderr, "1 points replayed, 2 found done") {
		t.Fatalf("resume: exit %d: %s", code, stderr)
	}
	if _, err := readReportFile(reports[0]); err != nil {
		t.Fatalf("the replayed report: %v", err)
	}
}

// TestOutputsThatCannotBeWrittenWholeAreRefused: an output that is a
// device, a path through a missing folder, a disaggregated stream that is
// an input, a sweep folder whose table would be its spec or is a folder,
// an empty --out, a merge of no folder: each exit 2 before anything runs,
// the input and the device untouched.
func TestOutputsThatCannotBeWrittenWholeAreRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(dir, "tr.prefill")
	line := `{"timestamp":0,"input_length":10,"output_length":1,"hash_ids":[1]}` + "\n"
	os.WriteFile(trace, []byte(line), 0o644)
	specDir := filepath.Join(dir, "s")
	os.Mkdir(specDir, 0o755)
	spec := filepath.Join(specDir, sweep.TableFile)
	os.WriteFile(spec, []byte(smallSpec), 0o644)
	os.MkdirAll(filepath.Join(dir, "y", sweep.FigureFile), 0o755)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--sessions", "3", "--emit-commands", fifo}, "not a regular file (a named pipe)"},
		{[]string{"replay", "--sessions", "3", "--report", dir + "/nosub/../r.json"}, "no such file or directory"},
		{[]string{"replay", trace, "--prefill-workers", "2", "--decode-workers", "2", "--emit-commands", filepath.Join(dir, "tr")}, "is also the trace"},
		{[]string{"sweep", spec, "--out", specDir}, "which is the spec"},
		{[]string{"sweep", spec, "--out", filepath.Join(dir, "y")}, "is not a regular file"},
		{[]string{"sweep", spec, "--out", ""}, "--out '': give the sweep's folder"},
		{[]string{"sweep", "merge", filepath.Join(dir, "none"), "--report", filepath.Join(dir, "m.json")}, "not a sweep's folder"},
	} {
		_, stderr, code := run(t, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d: %s", c.args, code, stderr)
		}
	}
	if st, _ := os.Lstat(fifo); st.Mode()&os.ModeNamedPipe == 0 {
		t.Error("the named pipe was replaced")
	}
	if got, _ := os.ReadFile(trace); string(got) != line {
		t.Error("the trace was written over")
	}
	if got, _ := os.ReadFile(spec); string(got) != smallSpec {
		t.Error("the spec was written over")
	}
	if _, err := os.Stat(filepath.Join(specDir, sweep.PointsDir)); err == nil {
		t.Error("a refused sweep made its points folder")
	}
}

// TestResumedSweepReplaysAnotherPointsReport: a point's file that is
// another point's whole report (same policy, another setup) is not taken
// for done: the sweep names it and replays the point, and the table is
// that of a sweep never tampered with.
func TestResumedSweepReplaysAnotherPointsReport(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	spec := writeSpec(t, smallSpec)
	if _, stderr, code := run(t, "", "sweep", spec, "--out", out, "-q"); code != 0 {
		t.Fatalf("sweep: %s", stderr)
	}
	var plan sweep.Plan
	data, _ := os.ReadFile(filepath.Join(out, sweep.PlanFile))
	json.Unmarshal(data, &plan)
	a, b := plan.Points[0], plan.Points[1]
	if a.Policy != b.Policy {
		t.Fatalf("points 1 and 2 run %s and %s: the test wants one policy", a.Policy, b.Policy)
	}
	report := func(p sweep.Point) string { return filepath.Join(out, sweep.PointsDir, p.ID+".json") }
	whole, _ := os.ReadFile(filepath.Join(out, sweep.TableFile))
	copied, _ := os.ReadFile(report(a))
	os.WriteFile(report(b), copied, 0o644)
	_, stderr, code := run(t, "", "sweep", spec, "--out", out)
	if code != 0 || !strings.Contains(stderr, report(b)+" is the report of another setup") {
		t.Fatalf("resume: exit %d: %s", code, stderr)
	}
	if _, stderr, code := run(t, "", "sweep", "merge", out, "--report", filepath.Join(out, "again.json")); code != 0 {
		t.Fatalf("merge: %s", stderr)
	}
	a1, a2 := readTable(t, filepath.Join(out, sweep.TableFile)), readTable(t, filepath.Join(out, "again.json"))
	var w sweep.Table
	json.Unmarshal(whole, &w)
	if d := cmp.Diff(w.Deterministic, a1.Deterministic, samePoints); d != "" {
		t.Errorf("the resumed table differs from the whole one:\n%s", d)
	}
	if d := cmp.Diff(a1.Deterministic, a2.Deterministic, samePoints); d != "" {
		t.Errorf("merge differs:\n%s", d)
	}
}
