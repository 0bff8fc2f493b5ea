package engine

import (
	"container/heap"
	"math"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Wakeup: the earliest time after now at which the router would act with no
// further input (next_wakeup_ms): a waiting request times out, or a queue
// head becomes admissible as prefill load decays.
//
// Every response carries it, and finding a head's moment reads every rank
// its role has, so each role keeps every worker's own moment for its head,
// in a heap, and mends them rather than finding them all again:
//   - a worker that comes up, or whose load falls, is asked again alone
//     (O(its ranks)); its moment may move either way by a rounding, as its
//     decay is re-based;
//   - a worker that goes drops out;
//   - a new head, or a binding of the role invalidated, finds them all.
// A load rises only by a placement, and a request is placed only when no
// head waits in its role, or as the head itself (no overtaking): that is a
// new head already.
//
// The clock moving alone changes nothing: loads only fall and deadlines
// stay, so the first moment at which the head is admissible is the same from
// any earlier now. A head is admissible on a worker at time t exactly when
// admissible (the queue's own test) would find it on that worker, so the
// moment a role keeps is the one the queue acts at.

// roleWake is one class queue's head's moment: the first time, at or after
// the now it was found at, at which some worker of the role admits the
// head; +Inf when there is no head or no worker will without input.
// (Each class of each role keeps its own: each has its own head and busy
// test.)
type roleWake struct {
	known bool
	// eligible are the workers with a rank that passes the head's filters
	// (busy thresholds aside). With none, the head has nowhere to go: it
	// is dispatchable now, to be rejected (drain takes it before the
	// command ends).
	eligible map[*worker]struct{}
	at       map[*worker]float64 // each worker's moment, where it has one
	first    wakeHeap            // the same, earliest first; an entry no longer in at is stale
}

type wakeEntry struct {
	t float64
	w *worker
}

type wakeHeap []wakeEntry

func (h wakeHeap) Len() int { return len(h) }
func (h wakeHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].w.id < h[j].w.id
}
func (h wakeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *wakeHeap) Push(x any)   { *h = append(*h, x.(wakeEntry)) }
func (h *wakeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// stale drops the class queue's moments: its head, or what admits the
// head, changed.
func (cq *classQueue) stale() { cq.wake.known = false }

// staleRole drops the moments of every class of role.
func (e *Engine) staleRole(role protocol.Role) {
	e.adapterEpoch++ // a binding of the role changed: a hard-bound head's best fit may have
	for _, cq := range e.queue.roles[roleIndex(role)].classes {
		cq.stale()
	}
}

// headAt returns cq's moment, finding every worker's if they are not known.
func (e *Engine) headAt(cq *classQueue) float64 {
	w := &cq.wake
	head := cq.head()
	if !w.known {
		w.known, w.first = true, w.first[:0]
		if w.at == nil {
			w.at, w.eligible = map[*worker]float64{}, map[*worker]struct{}{}
		}
		clear(w.at)
		clear(w.eligible)
		if head != nil {
			for _, wk := range e.fleet.readyWorkers() {
				if e.mayTake(head.d, wk) {
					w.eligible[wk] = struct{}{}
				}
				if t := e.workerAdmitsAt(head.d, cq.class, wk); !math.IsInf(t, 1) {
					w.at[wk] = t
					w.first = append(w.first, wakeEntry{t, wk})
				}
			}
		}
		heap.Init(&w.first)
	}
	if head != nil && len(w.eligible) == 0 {
		return e.now
	}
	for len(w.first) > 0 {
		top := w.first[0]
		if t, ok := w.at[top.w]; ok && t == top.t {
			return t
		}
		heap.Pop(&w.first)
	}
	return math.Inf(1)
}

// workerChanged: wk came up, or its load changed; its moment is found
// again, for each class of its role. (A load rises only by a placement,
// which in one class's queue is the head's own, a new head already; but
// another class's placement raises the load its heads wait on.)
func (e *Engine) workerChanged(wk *worker) {
	for _, cq := range e.queue.roles[roleIndex(wk.role)].classes {
		w := &cq.wake
		head := cq.head()
		if !w.known || head == nil {
			continue
		}
		if e.mayTake(head.d, wk) {
			w.eligible[wk] = struct{}{}
		}
		t := e.workerAdmitsAt(head.d, cq.class, wk)
		if math.IsInf(t, 1) {
			delete(w.at, wk)
			continue
		}
		w.at[wk] = t
		heap.Push(&w.first, wakeEntry{t, wk})
		if len(w.first) > 2*len(w.at)+64 { // stale entries outnumber the live: rebuild
			w.first = w.first[:0]
			for wk, t := range w.at {
				w.first = append(w.first, wakeEntry{t, wk})
			}
			heap.Init(&w.first)
		}
	}
}

// workerLost: wk went; its moments drop out.
func (e *Engine) workerLost(wk *worker) {
	for _, cq := range e.queue.roles[roleIndex(wk.role)].classes {
		if w := &cq.wake; w.known {
			delete(w.at, wk)
			delete(w.eligible, wk)
		}
	}
}

// mayTake reports whether wk has a rank that passes d's filters, busy
// thresholds aside.
func (e *Engine) mayTake(d *demand, wk *worker) bool {
	if wk.unlisted || wk.role != d.role || e.checkPin(d) != nil || !e.loraAllows(d, wk) {
		return false
	}
	for _, r := range wk.ranks {
		if ok, _ := d.staticallyAllowed(r); ok {
			return true
		}
	}
	return false
}

// nextWakeup is the earliest time after now at which the router would act
// with no further input: a waiting request times out (queue_timeout_ms),
// a configured class's head, or its first request held for a binding,
// passes its deadline (the first moment after it: the deadline is missed
// only once it has passed), or a head becomes admissible.
func (e *Engine) nextWakeup() (float64, bool) {
	best := math.Inf(1)
	if req := e.queue.oldest(); req != nil {
		best = e.deadline(req)
	}
	for i := range e.queue.roles {
		for _, cq := range e.queue.roles[i].classes {
			if !cq.class.legacy {
				if w := cq.firstWaiter(); w != nil {
					best = min(best, math.Nextafter(w.deadline, math.Inf(1)))
				}
			}
			head := cq.head()
			if head == nil {
				continue
			}
			if !cq.class.legacy {
				best = min(best, math.Nextafter(head.deadline, math.Inf(1)))
			}
			best = min(best, e.headAt(cq))
		}
	}
	return best, !math.IsInf(best, 1)
}

// workerAdmitsAt returns the first time at or after now at which d is
// admissible on wk alone, or +Inf. Loads only fall without input, so each
// rank stops being overloaded (and queue-busy) at one moment, and d is
// admissible on wk from the first moment some rank it may go to is neither
// queue-busy nor on a busy worker. Rounding is settled by checking the
// answer with admitsOn itself, so a host that advances the clock to exactly
// this time gets the release.
func (e *Engine) workerAdmitsAt(d *demand, c *flowClass, wk *worker) float64 {
	if wk.unlisted || wk.role != d.role || e.checkPin(d) != nil || !e.loraAllows(d, wk) {
		return math.Inf(1)
	}
	if e.admitsOn(d, c, wk, e.now) {
		return e.now
	}
	workerFree, best := math.Inf(1), math.Inf(1)
	for _, r := range wk.ranks {
		if ok, _ := d.staticallyAllowed(r); ok {
			workerFree = min(workerFree, e.unloadedAt(r))
		}
	}
	for _, r := range wk.ranks {
		if ok, _ := d.staticallyAllowed(r); ok {
			best = min(best, max(workerFree, e.queueFreeAt(r, c)))
		}
	}
	if math.IsInf(best, 1) {
		return best
	}
	t := max(best, math.Nextafter(e.now, math.Inf(1)))
	for range 64 {
		if e.admitsOn(d, c, wk, t) {
			return e.earliestOn(d, c, wk, t)
		}
		t = math.Nextafter(t, math.Inf(1))
	}
	return math.Inf(1)
}

// admitsOn reports whether d could be placed on one of wk's ranks at time
// t: the part of admissible that is wk's (wk not busy, and a rank d may go
// to that is not busy by its class).
func (e *Engine) admitsOn(d *demand, c *flowClass, wk *worker, t float64) bool {
	allowed, busy := 0, true
	for _, r := range wk.ranks {
		if ok, _ := d.staticallyAllowed(r); ok {
			allowed++
			busy = busy && e.overloaded(r, t)
		}
	}
	if allowed == 0 || busy {
		return false
	}
	for _, r := range wk.ranks {
		if ok, _ := d.staticallyAllowed(r); ok && !c.busy(r, t) {
			return true
		}
	}
	return false
}

// earliestOn finds the first time after now at which wk admits d, given
// that it does at t and not at now: the decay's inverse (reachTime) can
// land late, by an ulp or by thousands, and a host that advances to just
// before next_wakeup_ms must see nothing happen. Admitting only grows with
// time, so the boundary is found by bisection over the float64 values
// between now and t (their bits, times being >= 0, are in the same order):
// one check when t is right, at most 64.
func (e *Engine) earliestOn(d *demand, c *flowClass, wk *worker, t float64) float64 {
	lo, hi := math.Float64bits(e.now), math.Float64bits(t)
	if hi-lo > 1 {
		if !e.admitsOn(d, c, wk, math.Float64frombits(hi-1)) {
			return t
		}
		hi--
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if e.admitsOn(d, c, wk, math.Float64frombits(mid)) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return math.Float64frombits(hi)
}

// unloadedAt is when r stops exceeding every busy threshold that is set.
func (e *Engine) unloadedAt(r *rank) float64 {
	cfg := &e.cfg
	t := e.now
	if v := cfg.ActiveDecodeBlocksThreshold; v != nil && r.w.totalKVBlocks != nil &&
		float64(r.activeDecodeBlocks()) > *v*float64(*r.w.totalKVBlocks) {
		return math.Inf(1) // decode blocks do not decay
	}
	if v := cfg.ActivePrefillTokensThreshold; v != nil {
		t = max(t, r.prefill.reachTime(*v))
	}
	if v := cfg.ActivePrefillTokensThresholdFrac; v != nil && r.w.maxNumBatchedTokens != nil {
		t = max(t, r.prefill.reachTime(*v*float64(*r.w.maxNumBatchedTokens)))
	}
	return t
}

// queueFreeAt is when r stops being busy by class c.
func (e *Engine) queueFreeAt(r *rank, c *flowClass) float64 {
	t := e.now
	if c.busyAbs != nil {
		t = max(t, r.prefill.reachTime(*c.busyAbs))
	}
	if c.busyFrac != nil {
		t = max(t, r.prefill.reachTime(float64(*c.busyFrac*maxBatched(r))))
	}
	return t
}
