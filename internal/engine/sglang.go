package engine

import (
	"cmp"
	"math"
	"slices"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/selector"
)

// routedTree is policy sglang_cache_aware's picture of the caches: SGLang's
// router never hears the engines, so it keeps, for each rank, the prompts it
// routed there, and trims each rank's share to max_tree_size blocks every
// eviction_interval_ms, least recently routed leaves first. It is a second
// index beside the engine's (which KV events keep), sharing its rank slots.
type routedTree struct {
	index     *kvindex.Index
	match     []uint32 // by rank slot: leading blocks of the prompt routed there
	lastTrim  float64  // the last eviction moment passed
	trimOrder []routedBlock
}

// routedBlock is when a block was last routed to a rank, and its depth in
// the prompt: a parent is routed whenever its child is, so (time, deeper
// first) orders a rank's blocks leaves first.
type routedBlock struct {
	hash  protocol.SequenceHash
	at    float64
	depth uint32
}

// newRoutedTree returns the tree when some role's policy needs one.
func newRoutedTree(cfg *protocol.Config) *routedTree {
	for _, role := range roleOrder {
		if p, _, _, _ := cfg.Selection(role); selector.Of(p).Reads&selector.ReadsRouted != 0 {
			return &routedTree{index: kvindex.New()}
		}
	}
	return nil
}

// routedMatches is, by rank slot, the leading blocks of d's prompt routed
// to each rank, after the evictions due by now.
func (e *Engine) routedMatches(d *demand) []uint32 {
	t := e.routed
	e.trimRouted()
	if n := len(e.fleet.slots); len(t.match) < n {
		t.match = slices.Grow(t.match[:0], n)[:n]
	}
	t.index.FindMatches(d.local, t.match)
	return t.match
}

// routedRecord inserts the placed prompt into r's share of the tree.
func (e *Engine) routedRecord(d *demand, r *rank) {
	t := e.routed
	if t == nil || len(d.local) == 0 {
		return
	}
	if r.routed == nil {
		r.routed = map[protocol.SequenceHash]routedBlock{}
	}
	e.blocks = e.blocks[:0]
	for i := range d.local {
		e.blocks = append(e.blocks, kvindex.Block{BlockHash: d.seq[i], TokensHash: d.local[i]})
		r.routed[d.seq[i]] = routedBlock{hash: d.seq[i], at: e.now, depth: uint32(i)}
	}
	t.index.Store(kvindex.RankID(r.slot), nil, e.blocks)
}

// trimRouted runs the evictions due by now. Nothing but a placement reads
// or grows the tree, so trimming once for every interval boundary passed
// since the last placement leaves it as trimming at each would.
func (e *Engine) trimRouted() {
	t, cfg := e.routed, e.cfg.SGLang
	if cfg.EvictionIntervalMS == 0 || e.now < t.lastTrim+cfg.EvictionIntervalMS {
		return
	}
	// The last boundary passed, worked out at once: counting boundaries one
	// by one would take 10^12 steps for a clock at 2^53 ms.
	t.lastTrim = max(t.lastTrim, float64(math.Floor(e.now/cfg.EvictionIntervalMS)*cfg.EvictionIntervalMS))
	for _, r := range e.fleet.slots {
		if r == nil || uint64(len(r.routed)) <= cfg.MaxTreeSize {
			continue
		}
		order := t.trimOrder[:0]
		for _, b := range r.routed {
			order = append(order, b)
		}
		slices.SortFunc(order, func(a, b routedBlock) int {
			return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(b.depth, a.depth), cmp.Compare(a.hash, b.hash))
		})
		drop := order[:uint64(len(order))-cfg.MaxTreeSize]
		hashes := make([]protocol.SequenceHash, len(drop))
		for i, b := range drop {
			hashes[i] = b.hash
			delete(r.routed, b.hash)
		}
		t.index.Remove(kvindex.RankID(r.slot), hashes)
		t.trimOrder = order[:0]
	}
}
