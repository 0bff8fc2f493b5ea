package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClusterFileReads: a two-pool file, YAML or the same as JSON, reads
// into its pools with the defaults filled in; sized at 512-token blocks,
// each pool's cache comes from its profile's memory (auto) or its tokens,
// its tiers from tokens or GB, and the slower GPU's relative speed is the
// ratio of the two profiles' full prefill steps.
func TestClusterFileReads(t *testing.T) {
	yaml := `description: H100s and A100s
pools:
  - name: h100
    workers: 3
    profile: llama-3.1-8b-instruct-h100-tp1-vllm-0.8.4
    host_tier: {kv_gb: 100}
  - name: a100
    workers: 2
    profile: llama-3.1-8b-instruct-a100-80-tp1-vllm-0.8.4
    kv_tokens: 102400
    max_num_seqs: 32
`
	json := `{"pools": [{"name": "h100", "workers": 3, "profile": "llama-3.1-8b-instruct-h100-tp1-vllm-0.8.4", "host_tier": {"kv_gb": 100}},
  {"name": "a100", "workers": 2, "profile": "llama-3.1-8b-instruct-a100-80-tp1-vllm-0.8.4", "kv_tokens": 102400, "max_num_seqs": 32}]}`
	for name, data := range map[string]string{"yaml": yaml, "json": json} {
		pools, description, err := ReadClusterFile("c."+name, []byte(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := map[string]string{"yaml": "H100s and A100s"}[name]; description != want {
			t.Errorf("%s: description %q", name, description)
		}
		c := Default(0)
		c.Hardware = pools
		if err := c.SizeKV(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		h, a := c.Hardware[0], c.Hardware[1]
		h100, _ := ShippedProfile("llama-3.1-8b-instruct-h100-tp1-vllm-0.8.4")
		auto, _ := h100.KVTokens(0.9)
		if h.Workers != 3 || h.KVSizing != KVSizingProfile || h.KVTokens != auto || h.TotalKVBlocks != int(auto/512) || h.MaxNumSeqs != 64 || h.MaxNumBatchedTokens != 8192 {
			t.Errorf("%s: h100 %+v", name, h)
		}
		if want := uint64(100e9) / 131072; h.HostTier == nil || h.HostTier.KVTokens != want || h.HostTier.KVBlocks != int(want/512) || h.HostTier.ReadGBps != 14 {
			t.Errorf("%s: h100's host tier %+v, want %d tokens at 14 GB/s", name, h.HostTier, want)
		}
		if a.KVSizing != KVSizingTokens || a.TotalKVBlocks != 200 || a.MaxNumSeqs != 32 || a.HostTier != nil {
			t.Errorf("%s: a100 %+v", name, a)
		}
		fast, slow := 5.7527+8192*0.017251, 16.442+8192*0.047837
		if h.RelativeSpeed != 1 || !same(a.RelativeSpeed, fast/slow) {
			t.Errorf("%s: speeds %v and %v, want 1 and %v", name, h.RelativeSpeed, a.RelativeSpeed, fast/slow)
		}
		pools2 := c.WorkerPools()
		if len(pools2) != 2 || pools2[1].Name != "a100" || pools2[1].Config.TotalKVBlocks != 200 || pools2[0].Config.HostTier == nil || pools2[1].Config.Profile.Name != a.Profile.Name {
			t.Errorf("%s: worker pools %+v", name, pools2)
		}
	}
}

// TestClusterFileIsReadStrictly: what is wrong is named by its line and
// key, and nothing is guessed.
func TestClusterFileIsReadStrictly(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"name": "x"}`), 0o644)
	pool := "pools:\n  - name: a\n    workers: 1\n    profile: llama-3.1-8b-instruct-h100-tp1-vllm-0.8.4\n"
	for data, want := range map[string]string{
		"":                               "no pools",
		"description: x\n":               `field "pools": required`,
		"pools: []\n":                    `line 1: field "pools": expected at least one pool`,
		"pool: []\n":                     `line 1: field "pool": is not a cluster file key (description, pools)`,
		pool + "    worker: 2\n":         `line 5: field "pools[0].worker": is not a pool key`,
		pool + "    workers: 2\n":        `line 5: not YAML: mapping key "workers" already defined`,
		pool + "    kv_tokens: lots\n":   `line 5: field "pools[0].kv_tokens": expected a number of tokens or auto`,
		pool + "    max_num_seqs: 1.5\n": `line 5: field "pools[0].max_num_seqs": expected an unsigned 64-bit integer, got number 1.5`,
		pool + "    kv_blocks: 0\n":      `line 5: field "pools[0].kv_blocks": expected 1 to 2^40 blocks, got 0`,
		pool + "    kv_tokens: 9\n    kv_blocks: 9\n":                                                             `line 6: field "pools[0].kv_blocks": kv_tokens and kv_blocks both size the KV cache`,
		pool + "    host_tier: {read_gbps: 3}\n":                                                                  `line 5: field "pools[0].host_tier": expected its capacity: kv_tokens or kv_gb`,
		pool + "    host_tier: {kv_gb: 1, kv_tokens: 512}\n":                                                      `line 5: field "pools[0].host_tier": kv_tokens and kv_gb both size the tier`,
		pool + "    kv_tokens: 512\n    gpu_memory_utilization: 0.5\n":                                            `line 6: field "pools[0].gpu_memory_utilization": sizes the KV cache from the profile's memory`,
		pool + "    host_tier: {kv_gb: -1}\n":                                                                     `line 5: field "pools[0].host_tier.kv_gb": expected above 0`,
		pool + "  - name: a\n    workers: 1\n    profile: llama-3.1-8b-instruct-h100-tp1-vllm-0.8.4\n":            `line 5: field "pools[1].name": "a" names an earlier pool too`,
		"pools:\n  - name: a b\n    workers: 1\n":                                                                 `line 2: field "pools[0].name": "a b": expected 1 to 64 letters`,
		"pools:\n  - name: a\n    workers: 0\n":                                                                   `line 3: field "pools[0].workers": expected 1 to 65536 workers, got 0`,
		"pools:\n  - name: a\n    workers: 1\n":                                                                   `line 2: field "pools[0]": required: profile`,
		"pools:\n  - name: a\n    workers: 1\n    profile: nope\n":                                                `line 4: field "pools[0].profile": "nope" is neither a shipped profile`,
		"pools:\n  - name: a\n    workers: 1\n    profile: bad.json\n":                                            `line 4: field "pools[0].profile": profile bad.json: field "step": required`,
		"pools:\n  - name: a\n    workers: 1\n    profile: /dev/zero\n":                                           `larger than 1048576 bytes, which no profile needs`,
		"pools:\n  - {name: a, workers: 1, profile: llama-3.1-8b-instruct-h100-tp1-vllm-0.8.4}\n---\npools: []\n": "a second YAML document",
	} {
		_, _, err := ReadClusterFile(filepath.Join(dir, "c.yaml"), []byte(data))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", data, err, want)
		}
	}
	// Sizing names the pool: a cache that is less than a block.
	pools, _, err := ReadClusterFile("c.yaml", []byte(pool+"    kv_tokens: 100\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := Default(0)
	c.Hardware = pools
	if err := c.SizeKV(); err == nil || err.Error() != `line 2: pool "a": worker_kv_tokens 100: expected one block (512 tokens at a block size of 512) to 2^53 tokens, or auto` {
		t.Errorf("a pool's cache under a block: %v", err)
	}
}

// TestRelativeSpeedIsTheProfiles: a pool's speed compares its profile's
// prefill step of 8,192 tokens with the fastest pool's, whatever each
// pool's batch limit: a small max_num_batched_tokens does not make a slow
// GPU the fastest.
func TestRelativeSpeedIsTheProfiles(t *testing.T) {
	pools, _, err := ReadClusterFile("c.yaml", []byte(`pools:
  - {name: h100, workers: 1, profile: llama-3.1-8b-instruct-h100-tp1-vllm-0.8.4}
  - {name: a100, workers: 1, profile: llama-3.1-8b-instruct-a100-80-tp1-vllm-0.8.4, max_num_batched_tokens: 512}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := Default(0)
	c.Hardware = pools
	if err := c.SizeKV(); err != nil {
		t.Fatal(err)
	}
	fast, slow := 5.7527+8192*0.017251, 16.442+8192*0.047837
	if c.Hardware[0].RelativeSpeed != 1 || !same(c.Hardware[1].RelativeSpeed, fast/slow) {
		t.Errorf("speeds %v and %v, want 1 and %v", c.Hardware[0].RelativeSpeed, c.Hardware[1].RelativeSpeed, fast/slow)
	}
}
