package cluster

import (
	"fmt"

	"github.com/offline-router/offline-router/internal/protocol"
)

// TierConfig is a lower tier of each rank's KV cache, below its GPU: host
// memory (Dynamo's host_pinned, KVBM's G2) or local disk (disk, G3). Its
// capacity is given in tokens, or in bytes (KVBytes, which SizeKV turns
// into tokens by the profile's model shape), and held in whole blocks;
// ReadGBps is the bandwidth a block is restored to the GPU at, WriteGBps
// the one it is written into the tier at (decimal GB/s, as Dynamo's
// mocker and AISimulate give them).
type TierConfig struct {
	KVTokens  uint64  `json:"kv_tokens"`
	KVBytes   uint64  `json:"kv_bytes,omitempty"`
	KVBlocks  int     `json:"kv_blocks"`
	ReadGBps  float64 `json:"read_gbps"`
	WriteGBps float64 `json:"write_gbps"`
}

// The default bandwidths: Dynamo's mocker's KVBM offload (G1↔G2 14 GB/s,
// PCIe Gen4 x16; G2↔G3 7 GB/s, one local NVMe), lib/mocker/src/
// kvbm_offload/config.rs.
const (
	DefaultHostGBps = 14
	DefaultDiskGBps = 7
)

// tierNames are the lower tiers a rank has, in the order a restore walks
// them (Dynamo's lower_tier_query_order), by their StorageTier names.
var tierNames = [2]string{protocol.TierHostPinned, protocol.TierDisk}

// Tiers are the lower tiers configured, in walk order (host, disk), each
// with its names; nil for none.
func (c *Config) Tiers() []NamedTier {
	var out []NamedTier
	for i, t := range []*TierConfig{c.HostTier, c.DiskTier} {
		if t != nil {
			out = append(out, NamedTier{tierNames[i], [2]string{"host_tier", "disk_tier"}[i], t})
		}
	}
	return out
}

// NamedTier is a configured lower tier, its StorageTier name and its key
// in Config's JSON.
type NamedTier struct {
	Name, Key string
	*TierConfig
}

// checkTiers says what is wrong with the lower tiers, once sized: they
// need the iteration engine and a profile with the model shape (a block's
// bytes), and each a block at least and finite bandwidths above 0.
func (c *Config) checkTiers() error {
	tiers := c.Tiers()
	if len(tiers) == 0 {
		return nil
	}
	field := func(t NamedTier, key string) string { return t.Key + "." + key }
	if err := c.Profile.CheckModel(); err != nil {
		return &FieldError{field(tiers[0], "kv_tokens"), tiers[0].KVTokens, fmt.Sprintf("an engine profile with the model shape, which sizes a block's bytes: its %v", err)}
	}
	for _, t := range tiers {
		switch {
		case t.KVBlocks < 1 && t.KVBytes > 0:
			return &FieldError{field(t, "kv_bytes"), t.KVBytes, fmt.Sprintf("at least one block (%d bytes)", c.BlockSize*c.Profile.Model.KVBytesPerToken())}
		case t.KVBlocks < 1:
			return &FieldError{field(t, "kv_tokens"), t.KVTokens, fmt.Sprintf("at least one block (%d tokens)", c.BlockSize)}
		case !(t.ReadGBps >= 1e-6 && t.ReadGBps <= 1e6):
			return &FieldError{field(t, "read_gbps"), t.ReadGBps, "1e-6 to 1e6 GB/s"}
		case !(t.WriteGBps >= 1e-6 && t.WriteGBps <= 1e6):
			return &FieldError{field(t, "write_gbps"), t.WriteGBps, "1e-6 to 1e6 GB/s"}
		}
	}
	return nil
}

// sizeTiers makes each tier's blocks from its tokens, or from its bytes
// by the profile's KV bytes a token.
func (c *Config) sizeTiers() error {
	tiers := c.Tiers()
	if len(tiers) > 0 && c.Engine != EngineIteration {
		t := tiers[0]
		field, value := t.Key+".kv_tokens", any(t.KVTokens)
		if t.KVBytes > 0 {
			field, value = t.Key+".kv_bytes", t.KVBytes
		}
		return &FieldError{field, value, "the iteration engine, which runs the lower tiers (the simple engine has none)"}
	}
	for _, t := range tiers {
		if t.KVBytes > 0 {
			if c.Profile == nil || c.Profile.CheckModel() != nil {
				return &FieldError{t.Key + ".kv_bytes", t.KVBytes, "an engine profile with the model shape, which says a token's bytes: give tokens instead"}
			}
			t.KVTokens = t.KVBytes / c.Profile.Model.KVBytesPerToken()
		}
		if t.KVTokens > protocol.MaxNumber {
			return &FieldError{t.Key + ".kv_tokens", t.KVTokens, "at most 2^53 tokens"}
		}
		t.KVBlocks = int(t.KVTokens / c.BlockSize)
	}
	return nil
}

// TierCounts are what a rank's lower tier did over a run.
type TierCounts struct {
	Name string
	// Offloaded are the blocks written into it, Evicted those it dropped
	// for room (to the tier below, if any).
	Offloaded, Evicted int
	// Hits are the blocks restored from it to the GPU, RestoreMS the time
	// the steps that ran them waited on the loads.
	Hits      int
	RestoreMS float64
	// StallMS is the time steps waited past their compute and loads for
	// their writes to end (a link's bandwidth exceeded), on the first tier
	// only: a write into it waits on those below.
	StallMS float64
}

// offload is a rank's lower tiers, the first of which takes the blocks
// its GPU evicts (write on evict, as Dynamo's mocker offloads with KVBM),
// each passing its own evictions to the next: host, then disk.
//
// A write starts when the tier's write link is free and the slot it takes
// has been written down (its old block's write to the tier below ended),
// and takes the block's bytes over WriteGBps. A GPU block cannot be reused
// before its write ends, so a step that evicts lasts at least until its
// writes end: writes cost no step time while the link keeps up with the
// evictions, and stall the step by the excess when it does not. A restore
// reads a prompt's blocks found in a tier, past those found on the GPU and
// in the tiers above, at ReadGBps, before the step that runs its first
// chunk, which lasts that much longer; the tier keeps its copy (vLLM's
// offloading connector and KVBM keep the host copy after a load).
type offload struct {
	tiers []*tier // in walk order
	// events are the tier events of the step under way, in order.
	events    []tierEvent
	writeEnd  float64 // when the step's latest write ends
	restoreMS float64 // the step's loads
}

// tierEvent is a lower tier's event, published at the step's end.
type tierEvent struct {
	tier string
	data protocol.EventData
}

// tier is one lower tier of a rank: its blocks (a slot each, found by
// hash, in least recently used order), its write link, and its counts.
type tier struct {
	name            string
	capacity        int
	readMS, writeMS float64 // a block's load and write
	blocks          []tierBlock
	table           hashTable
	head, tail      int32 // least and most recently used; noBlock when empty
	writeFreeAt     float64
	below           *tier // where its evicted blocks are written; nil: dropped
	counts          TierCounts
}

// tierBlock is a block a tier holds: its hash, and its parent and id for
// the events that tell the router of it.
type tierBlock struct {
	hash, parent protocol.SequenceHash
	local        protocol.LocalBlockHash
	rooted       bool // the prompt's first block: no parent
	prev, next   int32
}

// newOffload is cfg's lower tiers, nil for none.
func newOffload(cfg *Config) *offload {
	named := cfg.Tiers()
	if len(named) == 0 {
		return nil
	}
	o := &offload{}
	bytes := float64(cfg.Profile.Model.KVBytesPerToken() * cfg.BlockSize)
	for _, t := range named {
		o.tiers = append(o.tiers, &tier{name: t.Name, capacity: t.KVBlocks, head: noBlock, tail: noBlock,
			readMS: bytes / float64(t.ReadGBps*1e6), writeMS: bytes / float64(t.WriteGBps*1e6), counts: TierCounts{Name: t.Name}})
	}
	for i := 1; i < len(o.tiers); i++ {
		o.tiers[i-1].below = o.tiers[i]
	}
	return o
}

// begin starts a step at t: no writes nor loads yet.
func (o *offload) begin(t float64) { o.writeEnd, o.restoreMS = t, 0 }

// busy reports whether the step under way moved blocks between tiers.
func (o *offload) busy() bool { return len(o.events) > 0 || o.restoreMS > 0 }

// evicted writes a block the GPU evicts at t into the first tier.
func (o *offload) evicted(t float64, b tierBlock) {
	o.writeEnd = max(o.writeEnd, o.tiers[0].write(o, t, b))
}

// find returns the slot holding h, or noBlock.
func (t *tier) find(h protocol.SequenceHash) int32 { return t.table.find(h) }

// write puts b into the tier at t, evicting its least recently used block
// for room, and returns when the write ends (t for a block it holds
// already, which it only marks as used).
func (t *tier) write(o *offload, at float64, b tierBlock) float64 {
	if i := t.find(b.hash); i != noBlock {
		t.touch(i)
		return at
	}
	start := max(at, t.writeFreeAt)
	var slot int32
	if len(t.blocks) < t.capacity {
		t.blocks = append(t.blocks, tierBlock{})
		slot = int32(len(t.blocks) - 1)
	} else {
		slot = t.head
		old := t.blocks[slot]
		t.unlink(slot)
		t.table.remove(old.hash)
		t.counts.Evicted++
		o.events = append(o.events, tierEvent{t.name, protocol.Removed{BlockHashes: []protocol.SequenceHash{old.hash}}})
		if t.below != nil {
			start = max(start, t.below.write(o, at, old))
		}
	}
	b.prev, b.next = noBlock, noBlock
	t.blocks[slot] = b
	t.table.insert(b.hash, slot)
	t.link(slot)
	t.counts.Offloaded++
	st := protocol.Stored{Blocks: []protocol.StoredBlock{{BlockHash: b.hash, TokensHash: b.local}}}
	if !b.rooted {
		st.ParentHash = &b.parent
	}
	o.events = append(o.events, tierEvent{t.name, st})
	t.writeFreeAt = start + t.writeMS
	return t.writeFreeAt
}

// match counts the blocks of seq from from on (before upto) the tier
// holds, one after another.
func (t *tier) match(seq []protocol.SequenceHash, from, upto int) int {
	n := 0
	for from+n < upto && t.find(seq[from+n]) != noBlock {
		n++
	}
	return n
}

// restore loads n blocks of seq from from on, found by match, to the GPU
// and returns the time it takes.
func (t *tier) restore(seq []protocol.SequenceHash, from, n int) float64 {
	for _, h := range seq[from : from+n] {
		t.touch(t.find(h))
	}
	t.counts.Hits += n
	ms := float64(float64(n) * t.readMS)
	t.counts.RestoreMS += ms
	return ms
}

// touch makes slot i the most recently used.
func (t *tier) touch(i int32) {
	if t.tail != i {
		t.unlink(i)
		t.link(i)
	}
}

// link puts slot i at the most recently used end.
func (t *tier) link(i int32) {
	b := &t.blocks[i]
	b.prev, b.next = t.tail, noBlock
	if t.tail != noBlock {
		t.blocks[t.tail].next = i
	} else {
		t.head = i
	}
	t.tail = i
}

// unlink takes slot i out of the order.
func (t *tier) unlink(i int32) {
	b := &t.blocks[i]
	if b.prev != noBlock {
		t.blocks[b.prev].next = b.next
	} else {
		t.head = b.next
	}
	if b.next != noBlock {
		t.blocks[b.next].prev = b.prev
	} else {
		t.tail = b.prev
	}
	b.prev, b.next = noBlock, noBlock
}
