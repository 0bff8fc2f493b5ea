package engine

import (
	"container/heap"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Approximate mode (kv_events: false): with no KV events to learn from, the
// index learns from the router's own placements, and forgets a block
// approx_ttl_ms after it was last routed to a rank.

type approxKey struct {
	slot uint32
	hash protocol.SequenceHash
}

type approxEntry struct {
	deadline float64
	key      approxKey
}

// approxIndex tracks the deadline of every block learned from a placement.
// The heap may hold stale entries for refreshed blocks; an entry counts only
// when its deadline is still the block's current one.
type approxIndex struct {
	deadline map[approxKey]float64
	queue    approxHeap
}

func newApproxIndex() *approxIndex {
	return &approxIndex{deadline: map[approxKey]float64{}}
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
		k := approxKey{r.slot, d.seq[i]}
		if !e.index.HasBlock(id, d.seq[i]) {
			e.out.ev.ApproxBlocksAdded++
		}
		e.approx.deadline[k] = deadline
		heap.Push(&e.approx.queue, approxEntry{deadline, k})
	}
	e.index.Store(id, nil, e.blocks)
}

// approxExpire drops every block whose deadline is at or before now.
func (e *Engine) approxExpire() int {
	q := &e.approx.queue
	n := 0
	for q.Len() > 0 && (*q)[0].deadline <= e.now {
		x := heap.Pop(q).(approxEntry)
		if d, ok := e.approx.deadline[x.key]; ok && d == x.deadline {
			delete(e.approx.deadline, x.key)
			n += e.index.Remove(kvindex.RankID(x.key.slot), []protocol.SequenceHash{x.key.hash})
		}
	}
	return n
}

// forget drops the deadlines of a slot whose rank is gone, so that a rank
// reusing the slot does not inherit them.
func (a *approxIndex) forget(slot uint32) {
	for k := range a.deadline {
		if k.slot == slot {
			delete(a.deadline, k)
		}
	}
}

type approxHeap []approxEntry

func (h approxHeap) Len() int { return len(h) }
func (h approxHeap) Less(i, j int) bool {
	if h[i].deadline != h[j].deadline {
		return h[i].deadline < h[j].deadline
	}
	if h[i].key.slot != h[j].key.slot {
		return h[i].key.slot < h[j].key.slot
	}
	return h[i].key.hash < h[j].key.hash
}
func (h approxHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *approxHeap) Push(x any)   { *h = append(*h, x.(approxEntry)) }
func (h *approxHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
