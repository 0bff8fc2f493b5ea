package cluster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// tierCluster is a one-rank cluster of 5 GPU blocks of 16 tokens, one
// request at a time, steps of 1 ms + 0.1 ms a prefill token, and a model
// of 1,000 bytes a token: 16,000 bytes a block, so that 0.016 GB/s moves
// a block in 1 ms, 0.008 in 2 and 0.004 in 4.
func tierCluster(host, disk *TierConfig) Config {
	c := Default(1)
	c.BlockSize, c.TotalKVBlocks, c.MaxNumSeqs, c.MaxNumBatchedTokens = 16, 5, 1, 4096
	c.Profile = &Profile{Name: "test", Step: StepModel{BaseMS: 1, PerPrefillTokenMS: 0.1},
		Model: ModelShape{Layers: 1, KVHeads: 1, HeadDim: 500, DTypeBytes: 1}}
	c.HostTier, c.DiskTier = host, disk
	return c
}

// tierBlocks sizes a tier's blocks, as SizeKV does.
func tierBlocks(t *testing.T, c *Config) {
	t.Helper()
	c.KVTokens, c.KVSizing = uint64(c.TotalKVBlocks)*c.BlockSize, KVSizingTokens
	if err := c.SizeKV(); err != nil {
		t.Fatal(err)
	}
}

// seqOf names a prompt's blocks by their ids, for the events' checks.
func seqOf(ids ...protocol.LocalBlockHash) map[protocol.SequenceHash]string {
	out := map[protocol.SequenceHash]string{}
	for i, h := range kvindex.SequenceHashes(ids) {
		out[h] = fmt.Sprint(ids[i])
	}
	return out
}

// describe writes the events as "tier op ids", ids by name.
func describe(events []protocol.KVEvent, names map[protocol.SequenceHash]string) string {
	var b strings.Builder
	for _, ev := range events {
		switch d := ev.Data.(type) {
		case protocol.Stored:
			fmt.Fprintf(&b, "%s stored", ev.StorageTier)
			for _, x := range d.Blocks {
				fmt.Fprintf(&b, " %s", names[x.BlockHash])
			}
		case protocol.Removed:
			fmt.Fprintf(&b, "%s removed", ev.StorageTier)
			for _, h := range d.BlockHashes {
				fmt.Fprintf(&b, " %s", names[h])
			}
		}
		b.WriteString("; ")
	}
	return b.String()
}

// TestHostTierWritesOnEvictAndRestores works one host tier of 8 blocks,
// written at 0.004 GB/s (4 ms a block) and read at 0.016 (1 ms), by hand:
//
//   - a (ids 1-4, 64 tokens, 1 out) prefills alone at 0: 1 + 6.4 = 7.4 ms.
//   - b (ids 11-14) at 7.4 takes 4 blocks: the fresh one, then a's given
//     back last first, evicting a4, a3, a2 (a1 stays on the GPU). Their
//     writes run back to back from 7.4 to 19.4, past b's compute (7.4 + 7.4
//     = 14.8): the step ends at 19.4, stalled 4.6 ms.
//   - c (a's prompt again) at 19.4 finds a1 on the GPU, a2-a4 in the host
//     tier; a whole prompt computes its last block again (vLLM), so it
//     restores a2 and a3 (2 ms), computes 16 tokens (2.6 ms) and evicts
//     three of b's blocks, whose writes end at 31.4: a 12 ms step, stalled
//     7.4 ms, its first token at 31.4.
func TestHostTierWritesOnEvictAndRestores(t *testing.T) {
	cfg := tierCluster(&TierConfig{KVTokens: 8 * 16, ReadGBps: 0.016, WriteGBps: 0.004}, nil)
	tierBlocks(t, &cfg)
	a, b, c := req("a", 64, 1, 1, 2, 3, 4), req("b", 64, 1, 11, 12, 13, 14), req("c", 64, 1, 1, 2, 3, 4)
	d := run(t, cfg, []*job{a, b, c})
	for name, v := range map[string][2]float64{"a": {d.first["a"], 7.4}, "b": {d.first["b"], 19.4}, "c": {d.first["c"], 31.4}} {
		if !same(v[0], v[1]) {
			t.Errorf("%s's first token at %v, want %v", name, v[0], v[1])
		}
	}
	if c.HitBlocks != 1 || c.LowerHits != [2]int{2, 0} || c.Uncached != 16 {
		t.Errorf("c hit %d GPU blocks and %v lower ones, computed %d tokens; want 1, [2 0], 16", c.HitBlocks, c.LowerHits, c.Uncached)
	}
	n := d.e.Counts().Tiers
	want := TierCounts{Name: protocol.TierHostPinned, Offloaded: 6, Hits: 2, RestoreMS: 2, StallMS: 12}
	if len(n) != 1 || n[0].Name != want.Name || n[0].Offloaded != want.Offloaded || n[0].Evicted != 0 || n[0].Hits != want.Hits ||
		!same(n[0].RestoreMS, want.RestoreMS) || !same(n[0].StallMS, want.StallMS) {
		t.Errorf("tier counts %+v, want %+v", n, want)
	}
	names := seqOf(1, 2, 3, 4)
	for h, s := range seqOf(11, 12, 13, 14) {
		names[h] = s
	}
	// At each step's end: the GPU's evictions, the host's writes, the GPU's
	// stores (c's restored run, then the block it computed).
	got := describe(d.events, names)
	wantEvents := "device stored 1 2 3 4; " +
		"device removed 4 3 2; host_pinned stored 4; host_pinned stored 3; host_pinned stored 2; device stored 11 12 13 14; " +
		"device removed 14 13 12; host_pinned stored 14; host_pinned stored 13; host_pinned stored 12; device stored 2 3; device stored 4; "
	if got != wantEvents {
		t.Errorf("events\n got %s\nwant %s", got, wantEvents)
	}
	// A block's stored event on the host names its parent: the router
	// chains it onto the prompt.
	for _, ev := range d.events {
		if st, ok := ev.Data.(protocol.Stored); ok && ev.StorageTier == protocol.TierHostPinned && st.ParentHash == nil {
			t.Errorf("a host block stored without its parent: %s", names[st.Blocks[0].BlockHash])
		}
	}
}

// TestTiersCascadeHostToDisk: a host tier of 2 blocks over a disk tier of
// 8, both written at 4 ms a block, read at 1 ms (host) and 2 ms (disk):
//
//   - b's step evicts a4, a3, a2 to the host as before; a2's write finds
//     the host full, so a4 goes down to disk first (7.4-11.4), and a2's
//     write waits for the host link (15.4-19.4): b's first token at 19.4.
//   - c (ids 1-5, 79 tokens: 4 whole blocks) finds a1 on the GPU, a2 and a3
//     on the host, a4 on disk: restores 2 + 2 = 4 ms, computes 15 tokens
//     (2.5 ms), and evicts four of b's blocks into the host, each of which
//     first sends a host block down (the host link waiting on the disk's):
//     writes end at 39.4, c's first token then.
func TestTiersCascadeHostToDisk(t *testing.T) {
	cfg := tierCluster(&TierConfig{KVTokens: 2 * 16, ReadGBps: 0.016, WriteGBps: 0.004},
		&TierConfig{KVTokens: 8 * 16, ReadGBps: 0.008, WriteGBps: 0.004})
	tierBlocks(t, &cfg)
	a, b, c := req("a", 64, 1, 1, 2, 3, 4), req("b", 64, 1, 11, 12, 13, 14), req("c", 79, 1, 1, 2, 3, 4, 5)
	d := run(t, cfg, []*job{a, b, c})
	if !same(d.first["b"], 19.4) || !same(d.first["c"], 39.4) {
		t.Errorf("first tokens: b at %v (want 19.4), c at %v (want 39.4)", d.first["b"], d.first["c"])
	}
	if c.HitBlocks != 1 || c.LowerHits != [2]int{2, 1} || c.Uncached != 15 {
		t.Errorf("c hit %d GPU blocks and %v lower ones, computed %d tokens; want 1, [2 1], 15", c.HitBlocks, c.LowerHits, c.Uncached)
	}
	n := d.e.Counts().Tiers
	host, disk := n[0], n[1]
	if host.Offloaded != 7 || host.Evicted != 5 || host.Hits != 2 || !same(host.RestoreMS, 2) || !same(host.StallMS, 4.6+13.5) {
		t.Errorf("host %+v", host)
	}
	if disk.Name != protocol.TierDisk || disk.Offloaded != 5 || disk.Evicted != 0 || disk.Hits != 1 || !same(disk.RestoreMS, 2) {
		t.Errorf("disk %+v", disk)
	}
}

// TestTierConfigIsChecked: lower tiers need the iteration engine and a
// profile with the model shape, a block at least, and bandwidths; bytes
// are sized by the model's bytes a token.
func TestTierConfigIsChecked(t *testing.T) {
	ok := TierConfig{KVTokens: 64, ReadGBps: 1, WriteGBps: 1}
	for name, c := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"simple engine":  {func(c *Config) { c.Engine = EngineSimple }, "host_tier.kv_tokens 64: expected the iteration engine"},
		"no model":       {func(c *Config) { c.Profile.Model = ModelShape{} }, "expected an engine profile with the model shape"},
		"under a block":  {func(c *Config) { c.HostTier.KVTokens = 15 }, "host_tier.kv_tokens 15: expected at least one block (16 tokens)"},
		"no read":        {func(c *Config) { c.HostTier.ReadGBps = 0 }, "host_tier.read_gbps 0: expected"},
		"disk write NaN": {func(c *Config) { c.DiskTier = &TierConfig{KVTokens: 64, ReadGBps: 1} }, "disk_tier.write_gbps 0: expected"},
		"bytes":          {func(c *Config) { c.HostTier.KVTokens, c.HostTier.KVBytes = 0, 64000 }, ""},
	} {
		host := ok
		cfg := tierCluster(&host, nil)
		c.edit(&cfg)
		cfg.KVTokens, cfg.KVSizing = 80, KVSizingTokens
		err := cfg.SizeKV()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want %q", name, err, c.want)
		}
		if name == "bytes" && cfg.HostTier.KVBlocks != 4 {
			t.Errorf("64,000 bytes at 1,000 a token: %d blocks of 16 tokens, want 4", cfg.HostTier.KVBlocks)
		}
	}
}
