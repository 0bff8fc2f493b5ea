package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-json"
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
// the same config, gives the placements the replay made.
func TestReplayEmitThenServe(t *testing.T) {
	dir := t.TempDir()
	cmds := filepath.Join(dir, "cmds.jsonl")
	args := []string{"--affinity-mode", "soft", "--temperature", "0.2", "--seed", "3"}
	if _, stderr, code := run(t, "", append([]string{"replay", "--sessions", "40", "--emit-commands", cmds}, args...)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	stream, err := os.ReadFile(cmds)
	if err != nil {
		t.Fatal(err)
	}
	first, _, code := run(t, string(stream), append([]string{"--block-size", "512"}, args...)...)
	again, _, _ := run(t, string(stream), append([]string{"--block-size", "512"}, args...)...)
	if code != 0 || first != again || strings.Contains(first, `"ok":false`) || !strings.Contains(first, `"reason":"affinity"`) {
		t.Fatalf("serving the emitted stream: exit %d, deterministic %v", code, first == again)
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
}
