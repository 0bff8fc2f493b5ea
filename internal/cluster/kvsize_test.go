package cluster

import (
	"math"
	"strings"
	"testing"
)

// TestSizeKVKeepsTheClusterAcrossBlockSizes: the default capacity is 466,944
// tokens at any block size, in whole blocks (a remainder left unused, as
// vLLM leaves the memory past its last whole block); blocks given override
// it and give the tokens they hold; a capacity under one block is refused
// by its flag.
func TestSizeKVKeepsTheClusterAcrossBlockSizes(t *testing.T) {
	for _, tc := range []struct {
		sizing        string
		blockSize     uint64
		tokens        uint64
		blocks        int
		wantBlocks    int
		wantTokens    uint64
		wantErrNaming string
	}{
		{KVSizingTokens, 512, DefaultKVTokens, 0, 912, DefaultKVTokens, ""},
		{KVSizingTokens, 16, DefaultKVTokens, 0, 29184, DefaultKVTokens, ""},
		{KVSizingTokens, 1000, DefaultKVTokens, 0, 466, DefaultKVTokens, ""}, // 944 tokens unused
		{KVSizingTokens, 1, DefaultKVTokens, 0, DefaultKVTokens, DefaultKVTokens, ""},
		{KVSizingBlocks, 16, 0, 100, 100, 1600, ""},
		{KVSizingTokens, 512, 511, 0, 0, 0, "worker_kv_tokens 511"},
		{KVSizingTokens, 16, 1<<53 + 1, 0, 0, 0, "worker_kv_tokens"},
		{KVSizingBlocks, 512, 0, 0, 0, 0, "worker_kv_blocks 0"},
		{KVSizingBlocks, 1 << 20, 0, 1 << 34, 0, 0, "worker_kv_blocks"}, // 2^54 tokens
	} {
		c := Default(2)
		c.KVSizing, c.BlockSize, c.KVTokens = tc.sizing, tc.blockSize, tc.tokens
		if tc.sizing == KVSizingBlocks {
			c.TotalKVBlocks = tc.blocks
		}
		err := c.SizeKV()
		switch {
		case tc.wantErrNaming != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErrNaming) {
				t.Errorf("%+v: got %v, want an error naming %s", tc, err, tc.wantErrNaming)
			}
		case err != nil:
			t.Errorf("%+v: %v", tc, err)
		case c.TotalKVBlocks != tc.wantBlocks || c.KVTokens != tc.wantTokens:
			t.Errorf("%+v: %d blocks of %d tokens, want %d blocks of %d", tc, c.TotalKVBlocks, c.KVTokens, tc.wantBlocks, tc.wantTokens)
		}
	}
}

// TestShippedProfileSizesTheCacheAsVLLM: worker_kv_tokens auto on the
// shipped profile gives the KV memory vLLM logged for it (51.38 GiB, to the
// log's 0.01 GiB), in tokens of 128 KiB; each part of vLLM's sum counts,
// and the share scales only the GPU's memory.
func TestShippedProfileSizesTheCacheAsVLLM(t *testing.T) {
	p := DefaultProfile()
	if p.Memory == nil {
		t.Fatal("the shipped profile has no memory")
	}
	tokens, err := p.KVTokens(DefaultGPUMemoryUtilization)
	if err != nil {
		t.Fatal(err)
	}
	// (79.18 × 0.9 − 14.99 − 4.76 − 0.13) GiB, over 2 × 32 × 8 × 128 × 2 bytes a token.
	if tokens != 420921 {
		t.Errorf("%d tokens, want 420921", tokens)
	}
	if gib := float64(tokens) * 131072 / (1 << 30); math.Abs(gib-51.38) > 0.01 {
		t.Errorf("%d tokens are %.3f GiB, vLLM logged 51.38", tokens, gib)
	}
	full, err := p.KVTokens(1)
	if err != nil {
		t.Fatal(err)
	}
	// 0.1 of the GPU more: 8,501,887,762 bytes, 64,864 tokens.
	if full-tokens != 64864 {
		t.Errorf("at utilization 1, %d tokens more, want 64864", full-tokens)
	}
	c := Default(1)
	c.KVSizing, c.GPUMemoryUtilization, c.BlockSize = KVSizingProfile, 0.9, 16
	if err := c.SizeKV(); err != nil || c.KVTokens != 420921 || c.TotalKVBlocks != 26307 {
		t.Errorf("auto at 16-token blocks: %d tokens, %d blocks (%v), want 420921 and 26307", c.KVTokens, c.TotalKVBlocks, err)
	}
	for util, want := range map[float64]string{
		0.2:        "leave nothing for the KV cache",
		0:          "gpu_memory_utilization 0: expected",
		1.01:       "gpu_memory_utilization 1.01: expected",
		math.NaN(): "gpu_memory_utilization NaN: expected",
	} {
		c.GPUMemoryUtilization = util
		if err := c.SizeKV(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("utilization %v: got %v, want %q", util, err, want)
		}
	}
	c.GPUMemoryUtilization, c.Profile = 0.9, nil
	if err := c.SizeKV(); err == nil || !strings.Contains(err.Error(), "simple engine") {
		t.Errorf("auto without a profile: %v", err)
	}
	p.Memory = nil
	c.Profile = &p
	if err := c.SizeKV(); err == nil || !strings.Contains(err.Error(), `field "memory": required`) {
		t.Errorf("auto on a profile without memory: %v", err)
	}
}

// TestProfileMemoryIsReadStrictly: memory, when given, is given whole
// (its source optional), each key within its range.
func TestProfileMemoryIsReadStrictly(t *testing.T) {
	const step = `"name": "x", "step": {"base_ms": 1, "per_prefill_token_ms": 0, "per_decode_seq_ms": 0, "per_kv_token_read_ms": 0}`
	for memory, want := range map[string]string{
		`{"gpu_bytes": 100, "weight_bytes": 1, "activation_bytes": 0, "non_torch_bytes": 0}`:                `memory`,
		`{"source": "s", "gpu_bytes": 100, "weight_bytes": 1, "activation_bytes": 0, "non_torch_bytes": 0}`: `memory`,
		`{"gpu_bytes": 100}`: `fields "memory.weight_bytes", "memory.activation_bytes", "memory.non_torch_bytes": required`,
		`{"gpu_bytes": 0, "weight_bytes": 1, "activation_bytes": 0, "non_torch_bytes": 0}`:                `field "memory.gpu_bytes": expected 1 to 2^53 bytes, got 0`,
		`{"gpu_bytes": 9007199254740993, "weight_bytes": 1, "activation_bytes": 0, "non_torch_bytes": 0}`: `field "memory.gpu_bytes": expected 1 to 2^53 bytes`,
		`{"gpu_bytes": 100, "weight_bytes": -1, "activation_bytes": 0, "non_torch_bytes": 0}`:             `field "memory.weight_bytes"`,
		`{"gpu_bytes": 100, "weights": 1}`: `field "memory.weights": is not a memory key`,
	} {
		p, err := ParseProfile([]byte(`{` + step + `, "memory": ` + memory + `}`))
		switch {
		case want == "memory":
			if err != nil || p.Memory == nil || p.Memory.GPUBytes != 100 || p.Memory.WeightBytes != 1 {
				t.Errorf("%s: %+v, %v", memory, p.Memory, err)
			}
		case err == nil || !strings.Contains(err.Error(), want):
			t.Errorf("%s: got %v, want %q", memory, err, want)
		}
	}
}
