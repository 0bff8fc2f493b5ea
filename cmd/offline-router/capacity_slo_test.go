package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCapacityRefusals: --capacity without --goodput, its own flags
// without it, a closed loop and a trace of one timestamp are each refused
// up front, exit 2 naming the flag, no file made. Catches each check
// dropped, and a check made after the runs (a report left behind).
func TestCapacityRefusals(t *testing.T) {
	dir := t.TempDir()
	flat := filepath.Join(dir, "flat.jsonl")
	line := `{"timestamp":5,"input_length":10,"output_length":2,"hash_ids":[1]}` + "\n"
	os.WriteFile(flat, []byte(line+line), 0o644)
	for _, c := range []struct {
		args []string
		name string
	}{
		{[]string{"--sessions", "3", "--capacity"}, "--goodput"},
		{[]string{"--sessions", "3", "--attainment", "0.5", "--goodput", "ttft:100"}, "--attainment"},
		{[]string{"--sessions", "3", "--capacity-tolerance", "0.1", "--goodput", "ttft:100"}, "--capacity"},
		{[]string{"--sessions", "3", "--capacity", "--goodput", "ttft:100", "--replay-concurrency", "2"}, "--replay-concurrency"},
		{[]string{"--capacity", "--goodput", "ttft:100", "--input-tokens", "8", "--output-tokens", "2", "--request-count", "3"}, "--arrival-interval-ms"},
		{[]string{flat, "--capacity", "--goodput", "ttft:100"}, "--capacity: the trace's arrivals span no time"},
	} {
		out := t.TempDir()
		args := append(append([]string{"replay", "-q"}, c.args...), "--report", filepath.Join(out, "r.json"), "--plot", filepath.Join(out, "p.png"))
		_, stderr, code := run(t, "", args...)
		if code != 2 || !strings.Contains(stderr, c.name) {
			t.Errorf("%q: exit %d, want 2 naming %s: %s", c.args, code, c.name, stderr)
		}
		if entries, _ := os.ReadDir(out); len(entries) != 0 {
			t.Errorf("%q made %d files", c.args, len(entries))
		}
	}
}

// TestCapacityRun: --capacity with no contender named searches --compare's
// four against round_robin, writes the capacity part (the same bytes on a
// second run), its table and its figure; without --capacity the report
// has no capacity part. Catches the default contenders, the part or the
// table left out, a report that depends on --jobs, and a capacity part in
// a plain report.
func TestCapacityRun(t *testing.T) {
	dir := t.TempDir()
	var parts [2][]byte
	for i, jobs := range []string{"1", "3"} {
		report, plot := filepath.Join(dir, "r"+jobs+".json"), filepath.Join(dir, "p"+jobs+".png")
		stdout, stderr, code := run(t, "", "replay", "-q", "--sessions", "20", "--workers", "2", "--capacity", "--goodput", "ttft:300",
			"--capacity-tolerance", "0.1", "--jobs", jobs, "--report", report, "--plot", plot)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var rep struct {
			Deterministic struct {
				Capacity json.RawMessage `json:"capacity"`
			} `json:"deterministic"`
		}
		data, _ := os.ReadFile(report)
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatal(err)
		}
		parts[i] = rep.Deterministic.Capacity
		for _, want := range []string{"sustainable req/s", "x round_robin", "kv", "least_loaded", "1 (baseline)"} {
			if !strings.Contains(stdout[strings.Index(stdout, "capacity at SLO"):], want) {
				t.Errorf("the capacity table lacks %q:\n%s", want, stdout)
			}
		}
		if png, _ := os.ReadFile(plot); !bytes.HasPrefix(png, []byte("\x89PNG")) {
			t.Errorf("no PNG at %s", plot)
		}
	}
	if !bytes.Equal(parts[0], parts[1]) || !bytes.Contains(parts[0], []byte(`"baseline": "round_robin"`)) ||
		bytes.Count(parts[0], []byte(`"sustainable_rate"`)) != 4 {
		t.Fatalf("capacity parts:\n%s\n%s", parts[0], parts[1])
	}
	plain := filepath.Join(dir, "plain.json")
	if _, stderr, code := run(t, "", "replay", "-q", "--sessions", "20", "--goodput", "ttft:300", "--report", plain); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if data, _ := os.ReadFile(plain); bytes.Contains(data, []byte(`"capacity"`)) {
		t.Error("a report without --capacity has a capacity part")
	}
}
