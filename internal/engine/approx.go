package engine

import (
	"container/heap"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Approximate mode (kv_events: false): with no KV events to learn from, the
// index learns from the router's own placements, and forgets a block
// approx_ttl_ms after it was last routed to a rank.

// approxKey is a block learned for one rank. The rank, not its slot, names
// it: when a rank goes, its blocks' deadlines are left to run out instead of
// being searched for, and a rank that reuses the slot does not inherit them.
type approxKey struct {
	r    *rank
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
	a := e.approx
	for i := range d.local {
		e.blocks = append(e.blocks, kvindex.Block{BlockHash: d.seq[i], TokensHash: d.local[i]})
		k := approxKey{r, d.seq[i]}
		if !e.index.HasBlock(id, d.seq[i]) {
			e.out.ev.ApproxBlocksAdded++
		}
		if old, ok := a.deadline[k]; ok && old == deadline {
			continue // routed again at the same moment: its entry stands
		}
		a.deadline[k] = deadline
		heap.Push(&a.queue, approxEntry{deadline, k})
	}
	e.index.Store(id, nil, e.blocks)
	a.compact()
}

// compact rebuilds the heap from the live deadlines once stale entries (of
// blocks routed to again later) outnumber them, so a prompt routed again and
// again costs one entry, not one per placement. The heap's order is total
// on the entries of ranks that are up, so the rebuild changes no expiry
// order that matters.
func (a *approxIndex) compact() {
	if len(a.queue) <= 2*len(a.deadline)+64 {
		return
	}
	a.queue = a.queue[:0]
	for k, d := range a.deadline {
		a.queue = append(a.queue, approxEntry{d, k})
	}
	heap.Init(&a.queue)
}

// approxExpire drops every block whose deadline is at or before now.
func (e *Engine) approxExpire() int {
	q := &e.approx.queue
	n := 0
	for q.Len() > 0 && (*q)[0].deadline <= e.now {
		x := heap.Pop(q).(approxEntry)
		if d, ok := e.approx.deadline[x.key]; ok && d == x.deadline {
			delete(e.approx.deadline, x.key)
			if r := x.key.r; e.fleet.slots[r.slot] == r { // the rank is still up
				n += e.index.Remove(kvindex.RankID(r.slot), []protocol.SequenceHash{x.key.hash})
			}
		}
	}
	return n
}

type approxHeap []approxEntry

func (h approxHeap) Len() int { return len(h) }
func (h approxHeap) Less(i, j int) bool {
	if h[i].deadline != h[j].deadline {
		return h[i].deadline < h[j].deadline
	}
	if si, sj := h[i].key.r.slot, h[j].key.r.slot; si != sj {
		return si < sj
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
