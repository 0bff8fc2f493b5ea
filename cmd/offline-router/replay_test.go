package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-json"
	"github.com/google/go-cmp/cmp"
)

func TestReplayCompareAndReport(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	stdout, stderr, code := run(t, "", "replay", "--compare", "--sessions", "60", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"prefix hit rate", "round_robin", "least_loaded", "TTFT p99 (ms)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var reports []map[string]any
	if err := json.Unmarshal(data, &reports); err != nil || len(reports) != 4 {
		t.Fatalf("report: %v, %d entries", err, len(reports))
	}
	for _, key := range []string{"requests", "sim_duration_ms", "wall_ms", "router_commands", "router_commands_per_s",
		"prefix_hit_rate", "router_overlap_rate", "mean_overlap_regret_blocks", "ttft_ms", "queue_wait_ms", "worker_share", "worker_share_cv"} {
		if _, ok := reports[0][key]; !ok {
			t.Errorf("the report lacks %s", key)
		}
	}
}

// TestReplayEmitThenServe: the emitted stream, piped into the binary with
// the same config, gets byte for byte the responses the replay itself got,
// placements included.
func TestReplayEmitThenServe(t *testing.T) {
	dir := t.TempDir()
	cmds, resps := filepath.Join(dir, "cmds.jsonl"), filepath.Join(dir, "resps.jsonl")
	args := []string{"--affinity-mode", "soft", "--temperature", "0.2", "--seed", "3"}
	if _, stderr, code := run(t, "", append([]string{"replay", "--sessions", "40", "--emit-commands", cmds, "--emit-responses", resps}, args...)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	stream, err := os.ReadFile(cmds)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(resps)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(want), `"reason":"affinity"`) || strings.Contains(string(want), `"ok":false`) {
		t.Fatal("the replay's own responses should hold affinity placements and no error")
	}
	got, _, code := run(t, string(stream), append([]string{"--block-size", "512"}, args...)...)
	if code != 0 {
		t.Fatalf("serving the emitted stream: exit %d", code)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Fatalf("serve answers the emitted stream unlike the replay (-replay +serve):\n%s", diff)
	}
}

// TestReplayRefusesClashingOutputs: two streams into one file, a one-run
// output with --compare, or values a run could not go through, are refused
// before anything runs or prints.
func TestReplayRefusesClashingOutputs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "both.jsonl")
	for args, want := range map[string]string{
		"--emit-commands " + path + " --emit-responses " + path: "name the same file",
		"--compare --emit-responses " + path:                    "--emit-responses describes one run",
		// Values the simulated cluster would take past the router's times.
		"--worker-decode-ms-per-token NaN":      "--worker-decode-ms-per-token NaN: expected a finite number",
		"--worker-decode-ms-per-token 1e300":    "--worker-decode-ms-per-token 1e+300",
		"--worker-prefill-tokens-per-ms 1e-300": "--worker-prefill-tokens-per-ms 1e-300: expected 1e-6 to 2^53",
		"--plot " + path + ".jpg":               "must end in .png or .svg",
		"--temperature NaN":                     "config temperature: expected a finite number",
	} {
		stdout, stderr, code := run(t, "", append([]string{"replay", "--sessions", "5"}, strings.Fields(args)...)...)
		if code != 2 || !strings.Contains(stderr, want) || stdout != "" {
			t.Errorf("%s: exit %d, stdout %q: %s", args, code, stdout, stderr)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a refused replay wrote %s", path)
	}
}

func TestReplayBadTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(path, []byte(`{"timestamp":0,"input_length":10,"output_length":1,"hash_ids":[1,2]}`+"\n"), 0o644)
	_, stderr, code := run(t, "", "replay", path)
	if code != 2 || !strings.Contains(stderr, "line 1") || !strings.Contains(stderr, "--block-size") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if _, stderr, code := run(t, "", "replay", "/no/such/trace.jsonl"); code != 2 || !strings.Contains(stderr, "no such file") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for trace, want := range map[string]string{
		`{"timestamp":-5,"input_length":10,"output_length":1}`:    "trace line 1: timestamp -5: expected a time from 0 to",
		`{"timestamp":1e300,"input_length":10,"output_length":1}`: "trace line 1: timestamp 1e+300: expected a time from 0 to",
		`{"timestamp":0,"input_length":10,"output_length":1,"session_id":"s"}` + "\n" +
			`{"delay_ms":-1,"input_length":10,"output_length":1,"session_id":"s"}`: "trace line 2: delay_ms -1: expected a delay >= 0",
	} {
		os.WriteFile(path, []byte(trace+"\n"), 0o644)
		if _, stderr, code := run(t, "", "replay", path); code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("%s: exit %d: %s", trace, code, stderr)
		}
	}
	if _, stderr, code := run(t, "", "replay", "--sessions", "-5"); code != 2 || !strings.Contains(stderr, "--sessions -5") {
		t.Errorf("--sessions -5: exit %d: %s", code, stderr)
	}
}
