package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// badValue is a flag given a value outside its range, with the flags it
// needs to apply at all.
type badValue struct {
	flag, value string
	with        []string
}

// replayBadValues gives every replay flag with a range a value outside it.
var replayBadValues = []badValue{
	{"active-decode-blocks-threshold", "-1", nil},
	{"active-prefill-tokens-threshold", "-1", nil},
	{"active-prefill-tokens-threshold-frac", "-1", nil},
	{"affinity-key", "bogus", []string{"--affinity-mode", "hard"}},
	{"affinity-mode", "bogus", nil},
	{"affinity-ttl-ms", "-1", []string{"--affinity-mode", "hard"}},
	{"approx-ttl-ms", "-1", []string{"--kv-events=false"}},
	{"arrival-interval-ms", "-1", []string{"--input-tokens", "8", "--output-tokens", "2", "--request-count", "3"}},
	{"arrival-speedup-ratio", "0", nil},
	{"attainment", "0", []string{"--capacity", "--goodput", "ttft:1000"}},
	{"capacity-tolerance", "0", []string{"--capacity", "--goodput", "ttft:1000"}},
	{"baseline", "bogus", []string{"--policies", "kv"}},
	{"block-size", "0", nil},
	{"benchmark-duration", "-1", []string{"--replay-concurrency", "2"}},
	{"builtin-lora-adapters", "1025", nil},
	{"contender", "kv:prefill_load_scale=-1", nil},
	{"config", "/nonexistent/config.json", nil},
	{"decode-active-request-weight", "-1", nil},
	{"decode-workers", "0", []string{"--prefill-workers", "1"}},
	{"dp-size", "1025", nil},
	{"encoder-cuda-to-cpu-ratio", "0", nil},
	{"engine", "bogus", nil},
	{"engine-profile", "/nonexistent/profile.json", nil},
	{"evidence", "bogus", nil},
	{"goodput", "ttft:0", nil},
	{"gpu-memory-utilization", "1.5", []string{"--worker-kv-tokens", "auto"}},
	{"jobs", "0", nil},
	{"input-tokens", "0", []string{"--output-tokens", "2", "--request-count", "3"}},
	{"kv-transfer-gbps", "0", []string{"--prefill-workers", "1", "--decode-workers", "1"}},
	{"llmd-kv-cache-utilization-scorer-weight", "-1", []string{"--policy", "llmd"}},
	{"llmd-prefix-cache-scorer-weight", "-1", []string{"--policy", "llmd"}},
	{"llmd-queue-scorer-weight", "-1", []string{"--policy", "llmd"}},
	{"num-prefix-groups", "-1", []string{"--input-tokens", "8", "--output-tokens", "2", "--request-count", "3"}},
	{"output-tokens", "0", []string{"--input-tokens", "8", "--request-count", "3"}},
	{"overlap-score-credit", "-1", nil},
	{"overlap-score-credit-decay", "-1", nil},
	{"plot", "fig.gif", nil},
	{"policies", "bogus", nil},
	{"policy", "bogus", nil},
	{"predicted-ttl-ms", "-1", nil},
	{"prefill-load-model", "bogus", nil},
	{"prefill-load-scale", "-1", nil},
	{"prefill-tokens-per-ms", "0", []string{"--prefill-load-model", "linear"}},
	{"prefill-workers", "0", []string{"--decode-workers", "1"}},
	{"queue-policy", "bogus", []string{"--queue-threshold", "1"}},
	{"queue-threshold", "-1", nil},
	{"queue-timeout-ms", "-1", []string{"--queue-threshold", "1"}},
	{"repeats", "0", nil},
	{"replay-concurrency", "-1", nil},
	{"replica-assign", "bogus", []string{"--router-replicas", "2"}},
	{"replica-sync-delay-ms", "-1", []string{"--router-replicas", "2"}},
	{"replica-sync-rate", "2", []string{"--router-replicas", "2"}},
	{"report", "report.txt", nil},
	{"requests-out", "rows.txt", nil},
	{"request-count", "0", []string{"--input-tokens", "8", "--output-tokens", "2"}},
	{"router-decode-policy", "missing", nil},
	{"router-policy-config", "/nonexistent/policy.yaml", nil},
	{"router-prefill-policy", "missing", nil},
	{"router-replicas", "65", nil},
	{"seed", "-1", nil},
	{"sessions", "200001", nil},
	{"workload", "bogus", nil},
	{"plays", "0", []string{"--workload", "agentic"}},
	{"subagent-context", "bogus", []string{"--workload", "agentic"}},
	{"sglang-balance-abs-threshold", "-1", []string{"--policy", "sglang_cache_aware"}},
	{"sglang-balance-rel-threshold", "-1", []string{"--policy", "sglang_cache_aware"}},
	{"sglang-cache-threshold", "2", []string{"--policy", "sglang_cache_aware"}},
	{"sglang-eviction-interval-ms", "-1", []string{"--policy", "sglang_cache_aware"}},
	{"sglang-max-tree-size", "-1", []string{"--policy", "sglang_cache_aware"}},
	{"shared-prefix-ratio", "2", []string{"--input-tokens", "8", "--output-tokens", "2", "--request-count", "3"}},
	{"temperature", "-1", nil},
	{"worker-decode-ms-per-token", "-1", []string{"--engine", "simple"}},
	{"worker-kv-blocks", "0", nil},
	{"worker-kv-tokens", "511", nil}, // less than one block of 512
	{"worker-max-num-batched-tokens", "0", nil},
	{"worker-max-num-seqs", "0", nil},
	{"worker-prefill-tokens-per-ms", "0", []string{"--engine", "simple"}},
	{"workers", "65537", nil},
	{"host-cache-hit-weight", "1.5", nil},
	{"disk-cache-hit-weight", "-0.1", nil},
	{"emit-commands", "@dir", nil},
	{"emit-responses", "@dir", nil},
	{"cpuprofile", "@dir/no/such/dir/cpu.prof", nil},
	{"max-line-bytes", "0", nil},
	{"trace-format", "bogus", nil},
	{"weka-nested-basis", "bogus", nil},
	{"max-gpu-lora-count", "-1", nil},
	{"max-gpu-lora-count", "1025", nil},
	{"host-kv-tokens", "-1", nil},
	{"host-kv-gb", "-1", nil},
	{"host-read-gbps", "0", []string{"--host-kv-tokens", "100000"}},
	{"host-write-gbps", "-1", []string{"--host-kv-gb", "10"}},
	{"disk-kv-tokens", "100", nil}, // less than one block of 512
	{"disk-kv-gb", "NaN", nil},
	{"disk-read-gbps", "1e7", []string{"--disk-kv-tokens", "100000"}},
	{"disk-write-gbps", "0", []string{"--disk-kv-tokens", "100000", "--host-kv-tokens", "100000"}},
	{"cluster", "@dir/no-such-cluster.yaml", nil},
	{"event-delay-ms", "-1", nil},
	{"event-reorder-window-ms", "NaN", nil},
	{"event-loss-rate", "1.5", nil},
	{"event-dup-rate", "-0.1", nil},
	{"event-dup-lag-ms", "-1", []string{"--event-dup-rate", "0.1"}},
	{"engine-restart", "1@-5", nil},
}

// noRange are the replay flags that take any value of their type.
var noRange = map[string]string{
	"compare": "a switch", "capacity": "a switch", "robustness": "a switch", "dp-attention": "a switch (refused without --dp-size 2 or more: TestDPAttention)", "dedupe-event-ids": "a switch", "kv-events": "a switch",
	"quiet": "a switch", "help": "a switch",
}

// TestEveryRangeIsCheckedUpFront: each replay flag with a range, given a
// value outside it, is refused before anything runs or any file is made:
// exit 2, the flag named. A flag added without an entry here fails the
// test until it gets one.
func TestEveryRangeIsCheckedUpFront(t *testing.T) {
	cmd, _ := replayCommand()
	listed := map[string]bool{}
	for _, b := range replayBadValues {
		listed[b.flag] = true
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if _, ok := noRange[f.Name]; !ok && !f.Hidden && !listed[f.Name] {
			t.Errorf("--%s has no out-of-range case here (or give it in noRange, saying why)", f.Name)
		}
		delete(listed, f.Name)
	})
	for name := range listed {
		t.Errorf("--%s is listed but is no replay flag", name)
	}
	for _, b := range replayBadValues {
		t.Run(b.flag, func(t *testing.T) {
			dir := t.TempDir()
			value := strings.ReplaceAll(b.value, "@dir", dir)
			args := append([]string{"replay", "--sessions", "3", "--" + b.flag + "=" + value}, b.with...)
			if b.flag == "sessions" || slices.Contains(b.with, "--request-count") || b.flag == "request-count" || slices.Contains(b.with, "--workload") {
				args = append([]string{"replay", "--" + b.flag + "=" + value}, b.with...)
			}
			if b.flag != "report" {
				args = append(args, "--report", filepath.Join(dir, "report.json"))
			}
			if b.flag != "emit-commands" && b.flag != "policies" {
				args = append(args, "--emit-commands", filepath.Join(dir, "c.jsonl"))
			}
			_, stderr, code := run(t, "", args...)
			if code != 2 {
				t.Fatalf("%q: exit %d, want 2: %s", args, code, stderr)
			}
			if !strings.Contains(stderr, "--"+b.flag) {
				t.Errorf("%q: the message does not name --%s: %s", args, b.flag, stderr)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("%q made %d files", args, len(entries))
			}
		})
	}
}

// sweepBadValues gives every sweep flag with a range a value outside it.
var sweepBadValues = []badValue{
	{"jobs", "0", nil},
	{"shard", "3/2", nil},
	{"emit", "bogus", nil},
	{"shards", "-1", []string{"--emit", "slurm"}},
	{"cpus-per-task", "0", []string{"--emit", "slurm"}},
	{"out", "@file", nil},
	{"image", "bad image", []string{"--emit", "kubernetes"}},
	{"job-name", "Bad_Name", []string{"--emit", "kubernetes", "--image", "registry.example.com/offline-router:v1"}},
	{"volume-claim", "Bad Claim", []string{"--emit", "kubernetes", "--image", "registry.example.com/offline-router:v1"}},
	{"shard-index", "3/2", nil},
}

// TestEverySweepRangeIsCheckedUpFront: as for replay, each sweep flag with
// a range, out of it, exits 2 naming it, before the folder is made.
func TestEverySweepRangeIsCheckedUpFront(t *testing.T) {
	cmd := newSweepCommand()
	listed := map[string]bool{}
	for _, b := range sweepBadValues {
		listed[b.flag] = true
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "quiet" && f.Name != "help" && !listed[f.Name] {
			t.Errorf("--%s has no out-of-range case here", f.Name)
		}
	})
	spec := writeSpec(t, smallSpec)
	for _, b := range sweepBadValues {
		t.Run(b.flag, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			value := b.value
			if value == "@file" {
				value = filepath.Join(dir, "a-file")
				os.WriteFile(value, nil, 0o644)
			}
			args := append([]string{"sweep", spec, "--" + b.flag + "=" + value}, b.with...)
			switch {
			case slices.Contains(b.with, "kubernetes"):
				args = append(args, "--out", "out-in-the-volume") // relative, as the pod sees it; never made by --emit
			case b.flag != "out":
				args = append(args, "--out", out)
			}
			_, stderr, code := run(t, "", args...)
			if code != 2 || !strings.Contains(stderr, "--"+b.flag) {
				t.Fatalf("%q: exit %d, want 2 naming --%s: %s", args, code, b.flag, stderr)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%q made the sweep's folder", args)
			}
		})
	}
}

// TestTraceLineLimit: a trace line past --max-line-bytes is refused by its
// number, exit 2, from a file and from stdin alike.
func TestTraceLineLimit(t *testing.T) {
	good := `{"timestamp":0,"input_length":10,"output_length":1,"hash_ids":[1]}` + "\n"
	long := `{"timestamp":1,"input_length":10,"output_length":1,"hash_ids":[1],"note":"` + strings.Repeat("x", 4000) + `"}` + "\n"
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	os.WriteFile(trace, []byte(good+good+long), 0o644)
	for _, c := range []struct{ stdin, arg string }{{"", trace}, {good + good + long, "-"}} {
		_, stderr, code := run(t, c.stdin, "replay", c.arg, "-q", "--max-line-bytes", "1000")
		if code != 2 || !strings.Contains(stderr, "trace line 3: longer than 1000 bytes") {
			t.Errorf("replay %s: exit %d: %s", c.arg, code, stderr)
		}
		if _, stderr, code := run(t, c.stdin, "replay", c.arg, "-q", "--max-line-bytes", "5000"); code != 0 {
			t.Errorf("replay %s under a limit it keeps: exit %d: %s", c.arg, code, stderr)
		}
	}
}

// TestSweepRefusesIgnoredFlags: a job's flags without --emit, and --jobs
// with it, would be ignored: each is refused (exit 2) naming it.
func TestSweepRefusesIgnoredFlags(t *testing.T) {
	spec := writeSpec(t, smallSpec)
	out := filepath.Join(t.TempDir(), "out")
	for _, c := range [][]string{
		{"--shards", "2"}, {"--cpus-per-task", "2"}, {"--image", "r.example/or:v1"}, {"--volume-claim", "c"}, {"--job-name", "j"},
		{"--emit", "slurm", "--jobs", "2"},
	} {
		_, stderr, code := run(t, "", append([]string{"sweep", spec, "--out", out}, c...)...)
		name := c[0]
		if name == "--emit" {
			name = "--jobs"
		}
		if code != 2 || !strings.Contains(stderr, name) {
			t.Errorf("%q: exit %d: %s", c, code, stderr)
		}
	}
}
