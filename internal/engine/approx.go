package engine

import (
	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Approximate mode (kv_events: false): the index learns from the router's
// own placements, and forgets a block approx_ttl_ms after it was last routed
// to a rank. KV events still apply, as in Dynamo's approximate indexer, and
// a block an event stored is the engine's word: it does not expire, and
// routing to it again does not make it.

func newApproxIndex() *expiring {
	return &expiring{deadlines: func(r *rank) *map[protocol.SequenceHash]float64 { return &r.approx }}
}

// approxRecord inserts the placed demand's blocks for its rank.
func (e *Engine) approxRecord(d *demand, r *rank) {
	if e.cfg.KVEvents || len(d.local) == 0 {
		return
	}
	id := kvindex.RankID(r.slot)
	e.blocks = e.blocks[:0]
	deadline := e.now + e.cfg.ApproxTTLMS
	for i := range d.local {
		e.blocks = append(e.blocks, kvindex.Block{BlockHash: d.seq[i], TokensHash: d.local[i]})
		if !e.index.HasBlock(id, d.seq[i]) {
			e.out.ev.ApproxBlocksAdded++
		} else if !e.approx.has(r, d.seq[i]) {
			continue // held by a KV event's word
		}
		e.approx.set(r, d.seq[i], deadline)
	}
	e.index.Store(id, nil, e.blocks)
	e.approx.compact(e.fleet.slots)
}

// approxExpire drops every block whose deadline is at or before now.
func (e *Engine) approxExpire() int {
	return e.approx.expire(e.now, func(r *rank, h protocol.SequenceHash) int {
		return e.index.Remove(kvindex.RankID(r.slot), []protocol.SequenceHash{h})
	})
}
