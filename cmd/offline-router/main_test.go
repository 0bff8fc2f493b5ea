package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"

	"github.com/goccy/go-json"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "offline-router-test")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "offline-router")
	build := []string{"build", "-o", binary}
	if raceBuild {
		build = append(build, "-race")
	}
	if out, err := exec.Command("go", append(build, ".")...).CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs the binary with stdin and returns stdout, stderr and exit status.
func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

func TestExitStatus(t *testing.T) {
	good := `{"op":"worker_ready","worker_id":1}` + "\n"
	bad := "not json\n"
	cases := []struct {
		name, stdin string
		args        []string
		code        int
		stderr      string
	}{
		{"end of input", good + bad + good, nil, 0, ""},
		{"serve alias", good, []string{"serve"}, 0, ""},
		{"fail fast", good + bad + good, []string{"--fail-fast"}, 1, "fail-fast"},
		{"bad flag", good, []string{"--no-such-flag"}, 2, "unknown flag"},
		{"bad flag value", good, []string{"--evidence", "loud"}, 2, "evidence"},
		{"missing config file", good, []string{"--config", "/nonexistent.json"}, 2, "nonexistent"},
		{"stray argument", good, []string{"trace.jsonl"}, 2, "unknown command"},
		{"no line limit", good, []string{"--max-line-bytes", "0"}, 2, "--max-line-bytes 0: expected at least 1 byte"},
		{"negative line limit", good, []string{"--max-line-bytes", "-5"}, 2, "--max-line-bytes -5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := run(t, c.stdin, c.args...)
			if code != c.code || !strings.Contains(stderr, c.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d mentioning %q", code, stderr, c.code, c.stderr)
			}
			if code == 2 && stdout != "" {
				t.Fatalf("a refused start must write nothing on stdout: %q", stdout)
			}
		})
	}
}

func TestFailFastAnswersUpToTheError(t *testing.T) {
	stdout, _, _ := run(t, `{"op":"inspect"}`+"\nbad\n"+`{"op":"inspect"}`+"\n", "--fail-fast")
	if n := strings.Count(stdout, "\n"); n != 2 {
		t.Fatalf("want the good line and the error answered, got %d lines:\n%s", n, stdout)
	}
}

// TestStdoutHasOnlyResponses: with logging on, stdout is still one JSON
// response per command line and nothing else.
func TestStdoutHasOnlyResponses(t *testing.T) {
	stdout, stderr, code := run(t, "# c\n"+`{"op":"inspect"}`+"\n\n"+`{"op":"inspect"}`+"\n", "-v")
	if code != 0 || !strings.Contains(stderr, "served") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", stdout)
	}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Fatalf("not a JSON line: %q", l)
		}
	}
}

func TestConfigFileAndFlagOverride(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cfg.json")
	if err := os.WriteFile(path, []byte(`{"evidence":"none","block_size":32}`), 0o644); err != nil {
		t.Fatal(err)
	}
	in := `{"op":"worker_ready","worker_id":1}` + "\n" + `{"op":"place","request_id":"r","input_tokens":64}` + "\n"
	stdout, _, _ := run(t, in, "--config", path)
	if !strings.Contains(stdout, `"isl_blocks":2`) || strings.Contains(stdout, `"evidence"`) {
		t.Fatalf("the file's block_size and evidence were not applied:\n%s", stdout)
	}
	stdout, _, _ = run(t, in, "--config", path, "--block-size", "16", "--evidence", "summary")
	if !strings.Contains(stdout, `"isl_blocks":4`) || !strings.Contains(stdout, `"evidence"`) {
		t.Fatalf("flags must override the file:\n%s", stdout)
	}
	if err := os.WriteFile(path, []byte(`{"blocksize":32}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := run(t, in, "--config", path); code != 2 || !strings.Contains(stderr, "blocksize") {
		t.Fatalf("an unknown config key must be refused naming it: exit %d, %q", code, stderr)
	}
}

func TestVersionAndExample(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		stdout, _, code := run(t, "", args...)
		if code != 0 || !strings.HasPrefix(stdout, "offline-router ") || !strings.Contains(stdout, "(wire protocol v1, report schema v1)") ||
			!strings.Contains(stdout, "follows "+protocol.Followed.Dynamo+"\n") || !strings.Contains(stdout, protocol.Followed.AISimulate) {
			t.Fatalf("%v: %d %q", args, code, stdout)
		}
	}
	stdout, _, code := run(t, "", "version")
	stdout, _, code = run(t, "", "example")
	if code != 0 || !strings.Contains(stdout, `"worker_id":2,"dp_rank":0,"role":"aggregated","overlap_blocks":2`) {
		t.Fatalf("the example must show the cache-aware placement: %d\n%s", code, stdout)
	}
	raw, _, _ := run(t, "", "example", "--raw")
	served, _, code := run(t, raw)
	if code != 0 || strings.Count(served, "\n") != strings.Count(stdout, "\n< ") {
		t.Fatalf("example --raw piped into the router must answer every command:\n%s", served)
	}
}
