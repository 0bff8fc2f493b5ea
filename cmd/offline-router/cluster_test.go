package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayClusterFile: --cluster runs a mixed fleet from a file: the
// report states each pool (its profile, sized cache and relative speed)
// and each pool's figures, and the table has each pool's rows. The one-pool
// flags it replaces are refused beside it, and a mistake in the file is
// named by its line.
func TestReplayClusterFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mixed.yaml")
	os.WriteFile(file, []byte(`description: H100s with an A100
pools:
  - name: fast
    workers: 2
    profile: llama-3.1-8b-instruct-h100-tp1-vllm-0.8.4
  - name: slow
    workers: 1
    profile: llama-3.1-8b-instruct-a100-80-tp1-vllm-0.8.4
    kv_tokens: 51200
    host_tier: {kv_tokens: 512000}
`), 0o644)
	report := filepath.Join(dir, "r.json")
	stdout, stderr, code := run(t, "", "replay", "--sessions", "30", "--cluster", file, "--report", report)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"on 3 workers (2 fast, 1 slow) (H100s with an A100)", "fast (2 workers, speed 1.00): request share", "slow (1 worker, speed 0.36): request share", "slow: mean TTFT (ms)",
		"slow host_pinned: hit rate", "prefix hit rate across tiers"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
	r := readReport(t, report)
	c, m := r.Deterministic.Cluster, r.Deterministic.Policies[0]
	if c.Workers != 3 || c.Description != "H100s with an A100" || len(c.Hardware) != 2 || c.Hardware[1].TotalKVBlocks != 100 || c.Hardware[1].HostTier.KVBlocks != 1000 || c.Profile != nil {
		t.Errorf("cluster %+v", c)
	}
	if len(m.Hardware) != 2 || m.Hardware[0].Completed+m.Hardware[1].Completed != m.Completed || len(m.Tiers) != 1 || m.Tiers[0].Pool != "slow" {
		t.Errorf("hardware %+v, tiers %+v", m.Hardware, m.Tiers)
	}
	for _, args := range [][]string{{"--workers", "4"}, {"--engine-profile", "llama-3.1-8b-instruct-h100-tp1-vllm-0.8.4"}, {"--host-kv-tokens", "5120"}} {
		_, stderr, code := run(t, "", append([]string{"replay", "--sessions", "3", "--cluster", file}, args...)...)
		if code != 2 || !strings.Contains(stderr, "drop "+args[0]) {
			t.Errorf("--cluster with %v: exit %d: %s", args, code, stderr)
		}
	}
	os.WriteFile(file, []byte("pools:\n  - name: a\n    workers: two\n"), 0o644)
	_, stderr, code = run(t, "", "replay", "--sessions", "3", "--cluster", file)
	if want := `--cluster ` + file + `: line 3: field "pools[0].workers": expected an unsigned 64-bit integer, got "two"`; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("a bad file: exit %d: %s, want %s", code, stderr, want)
	}
}
