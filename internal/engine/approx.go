package engine

import (
	"container/heap"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Approximate mode (kv_events: false): the index learns from the router's
// own placements, and forgets a block approx_ttl_ms after it was last routed
// to a rank. KV events still apply, as in Dynamo's approximate indexer, and
// a block an event stored is the engine's word: it does not expire, and
// routing to it again does not make it.

// approxKey is a block learned for one rank. The rank, not its slot, names
// it, so a rank that reuses the slot does not inherit it.
type approxKey struct {
	r    *rank
	hash protocol.SequenceHash
}

type approxEntry struct {
	deadline float64
	key      approxKey
}

// approxIndex tracks when each block learned from a placement expires. A
// rank keeps its own blocks' deadlines (rank.approx), so that a rank that
// goes takes them with it in O(1). The heap may hold stale entries (of
// blocks routed to again, or of ranks gone); an entry counts only when its
// deadline is still its block's on a rank that is up.
type approxIndex struct {
	queue approxHeap
	live  int // deadlines held by ranks that are up
}

func newApproxIndex() *approxIndex { return &approxIndex{} }

// approxRecord inserts the placed demand's blocks for its rank.
func (e *Engine) approxRecord(d *demand, r *rank) {
	if e.cfg.KVEvents || len(d.local) == 0 {
		return
	}
	id := kvindex.RankID(r.slot)
	e.blocks = e.blocks[:0]
	deadline := e.now + e.cfg.ApproxTTLMS
	a := e.approx
	if r.approx == nil {
		r.approx = map[protocol.SequenceHash]float64{}
	}
	for i := range d.local {
		e.blocks = append(e.blocks, kvindex.Block{BlockHash: d.seq[i], TokensHash: d.local[i]})
		old, ok := r.approx[d.seq[i]]
		if !e.index.HasBlock(id, d.seq[i]) {
			e.out.ev.ApproxBlocksAdded++
		} else if !ok {
			continue // held by a KV event's word
		}
		if ok && old == deadline {
			continue // routed again at the same moment: its entry stands
		}
		if !ok {
			a.live++
		}
		r.approx[d.seq[i]] = deadline
		heap.Push(&a.queue, approxEntry{deadline, approxKey{r, d.seq[i]}})
	}
	e.index.Store(id, nil, e.blocks)
	e.compactApprox()
}

// disown drops the deadline of a block a KV event stored or removed on r.
func (a *approxIndex) disown(r *rank, h protocol.SequenceHash) {
	if _, ok := r.approx[h]; ok {
		delete(r.approx, h)
		a.live--
	}
}

// forget drops the deadlines of a rank that goes, or was cleared.
func (a *approxIndex) forget(r *rank) {
	a.live -= len(r.approx)
	r.approx = nil
}

// compactApprox rebuilds the heap from the deadlines of the ranks that are
// up once stale entries (of blocks routed to again later, or of ranks gone)
// outnumber them and the rank slots it walks: a prompt routed again and
// again costs one entry, a rank that went costs none, and a rebuild is paid
// for by the pushes since the last one. The heap's order is total on the
// entries of ranks that are up, so the rebuild changes no expiry order.
func (e *Engine) compactApprox() {
	a := e.approx
	if len(a.queue) <= 2*a.live+len(e.fleet.slots)+64 {
		return
	}
	a.queue = a.queue[:0]
	for _, r := range e.fleet.slots {
		if r != nil {
			for h, d := range r.approx {
				a.queue = append(a.queue, approxEntry{d, approxKey{r, h}})
			}
		}
	}
	heap.Init(&a.queue)
}

// approxExpire drops every block whose deadline is at or before now.
func (e *Engine) approxExpire() int {
	a := e.approx
	n := 0
	for a.queue.Len() > 0 && a.queue[0].deadline <= e.now {
		x := heap.Pop(&a.queue).(approxEntry)
		r := x.key.r
		if d, ok := r.approx[x.key.hash]; ok && d == x.deadline {
			delete(r.approx, x.key.hash)
			a.live--
			n += e.index.Remove(kvindex.RankID(r.slot), []protocol.SequenceHash{x.key.hash})
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
