package engine

import (
	"container/heap"

	"github.com/offline-router/offline-router/internal/protocol"
)

// expiring is a set of blocks the router wrote for itself, each forgotten
// a TTL after it was last written: approximate mode's blocks in the index
// (approx.go) and predict-on-route's in its side index (predicted.go). A
// rank keeps its own blocks' deadlines (in the map deadlines gives), so
// that a rank that goes takes them with it in O(1). The heap may hold
// stale entries (of blocks written again, or of ranks gone); an entry
// counts only when its deadline is still its block's on a rank that is up.
type expiring struct {
	queue     expiryHeap
	live      int // deadlines held by ranks that are up
	deadlines func(r *rank) *map[protocol.SequenceHash]float64
}

// expiryKey is a block written for one rank. The rank, not its slot, names
// it, so a rank that reuses the slot does not inherit it.
type expiryKey struct {
	r    *rank
	hash protocol.SequenceHash
}

type expiryEntry struct {
	deadline float64
	key      expiryKey
}

// has reports whether h is written for r (and not yet expired).
func (x *expiring) has(r *rank, h protocol.SequenceHash) bool {
	_, ok := (*x.deadlines(r))[h]
	return ok
}

// set gives h on r the deadline, new or refreshed.
func (x *expiring) set(r *rank, h protocol.SequenceHash, deadline float64) {
	m := x.deadlines(r)
	if *m == nil {
		*m = map[protocol.SequenceHash]float64{}
	}
	old, ok := (*m)[h]
	if ok && old == deadline {
		return // written again at the same moment: its entry stands
	}
	if !ok {
		x.live++
	}
	(*m)[h] = deadline
	heap.Push(&x.queue, expiryEntry{deadline, expiryKey{r, h}})
}

// disown drops the deadline of h on r.
func (x *expiring) disown(r *rank, h protocol.SequenceHash) {
	m := x.deadlines(r)
	if _, ok := (*m)[h]; ok {
		delete(*m, h)
		x.live--
	}
}

// forget drops the deadlines of a rank that goes, or was cleared.
func (x *expiring) forget(r *rank) {
	m := x.deadlines(r)
	x.live -= len(*m)
	*m = nil
}

// compact rebuilds the heap from the deadlines of the ranks that are up
// (slots) once stale entries (of blocks written again later, or of ranks
// gone) outnumber them and the rank slots it walks: a prompt written again
// and again costs one entry, a rank that went costs none, and a rebuild is
// paid for by the pushes since the last one. The heap's order is total on
// the entries of ranks that are up, so the rebuild changes no expiry order.
func (x *expiring) compact(slots []*rank) {
	if len(x.queue) <= 2*x.live+len(slots)+64 {
		return
	}
	x.queue = x.queue[:0]
	for _, r := range slots {
		if r != nil {
			for h, d := range *x.deadlines(r) {
				x.queue = append(x.queue, expiryEntry{d, expiryKey{r, h}})
			}
		}
	}
	heap.Init(&x.queue)
}

// expire drops every block whose deadline is at or before now, in
// deadline order, handing each to drop, and returns what drop returned in
// all.
func (x *expiring) expire(now float64, drop func(r *rank, h protocol.SequenceHash) int) int {
	n := 0
	for x.queue.Len() > 0 && x.queue[0].deadline <= now {
		e := heap.Pop(&x.queue).(expiryEntry)
		r := e.key.r
		m := x.deadlines(r)
		if d, ok := (*m)[e.key.hash]; ok && d == e.deadline {
			delete(*m, e.key.hash)
			x.live--
			n += drop(r, e.key.hash)
		}
	}
	return n
}

type expiryHeap []expiryEntry

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, j int) bool {
	if h[i].deadline != h[j].deadline {
		return h[i].deadline < h[j].deadline
	}
	if si, sj := h[i].key.r.slot, h[j].key.r.slot; si != sj {
		return si < sj
	}
	return h[i].key.hash < h[j].key.hash
}
func (h expiryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)   { *h = append(*h, x.(expiryEntry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
