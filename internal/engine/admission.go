package engine

import (
	"container/heap"
	"fmt"
	"math"
	"slices"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Admission decides when a request may be placed, and tells the host when
// to wake the router: the policy queue, time-decaying prefill load and
// next_wakeup_ms.

func (e *Engine) queueEnabled() bool { return e.cfg.QueueThreshold != nil }

func (e *Engine) prefillRate() float64 {
	if e.cfg.PrefillLoadModel == protocol.PrefillLoadLinear {
		return *e.cfg.PrefillTokensPerMS
	}
	return 0
}

// admissible reports whether d could be placed at time t, and among which
// ranks: it has candidates, and not all of them are busy by queue_threshold.
// It changes nothing.
func (e *Engine) admissible(d *demand, t float64) (candidateSet, bool) {
	cs, err := e.candidates(d, t)
	if err != nil {
		return cs, false
	}
	for _, r := range cs.ranks {
		if !e.queueBusy(r, t) {
			return cs, true
		}
	}
	return cs, !e.queueEnabled()
}

// queueBusy: active_prefill_tokens > queue_threshold × max_num_batched_tokens;
// a rank without max_num_batched_tokens is never busy by this rule.
func (e *Engine) queueBusy(r *rank, t float64) bool {
	q := e.cfg.QueueThreshold
	return q != nil && r.w.maxNumBatchedTokens != nil && r.prefill.at(t) > *q*float64(*r.w.maxNumBatchedTokens)
}

// preferred is the index of the rank a soft-affinity request should go to
// while that rank passes the filters and is not queue-busy, or -1.
func (e *Engine) preferred(d *demand, ranks []*rank) int {
	target := d.boundTarget()
	if target == nil || e.queueBusy(target, e.now) {
		return -1
	}
	return slices.Index(ranks, target)
}

// placeOrWait places a request now, or queues it when its role already has
// waiting requests (no overtaking) or it is not admissible. Without a queue
// it places among cs, which the caller found.
func (e *Engine) placeOrWait(req *request, cs candidateSet) (protocol.Placement, bool) {
	if !e.queueEnabled() {
		return e.place(req, cs, e.preferred(req.d, cs.ranks)), true
	}
	if e.queue.head(req.d.role) == nil {
		if cs, ok := e.admissible(req.d, e.now); ok {
			return e.place(req, cs, e.preferred(req.d, cs.ranks)), true
		}
	}
	req.score = e.queueScore(req.d)
	e.queue.push(req)
	return protocol.Placement{}, false
}

// release places (or queues) a request that stopped waiting for its
// binding. Without a queue, one that cannot be placed now is rejected with
// the error a new request would get.
func (e *Engine) release(req *request) {
	var cs candidateSet
	if !e.queueEnabled() {
		var err *protocol.Error
		if cs, err = e.candidates(req.d, e.now); err != nil {
			e.reject(req, err.Code, err.Message)
			return
		}
	}
	if p, placed := e.placeOrWait(req, cs); placed {
		e.out.released = append(e.out.released, p)
	}
}

// trackDeadline notes a request that starts waiting, for queue_timeout_ms.
func (e *Engine) trackDeadline(req *request) {
	if e.cfg.QueueTimeoutMS == nil {
		return
	}
	// Requests that stopped waiting stay in arrivals until they reach its
	// front; behind a head that waits long they would pile up without end.
	// Once they outnumber the waiting ones they are swept: O(1) amortized.
	q := &e.queue
	if len(q.arrivals) > 2*(q.count+e.held)+32 {
		q.arrivals = slices.DeleteFunc(q.arrivals, func(r *request) bool { return !r.waiting() })
	}
	q.arrivals = append(q.arrivals, req)
}

// queueScore is the queue_policy score of d at its arrival (higher first).
// wspt uses the best overlap among the ranks d may go to, from the index as
// it is now.
func (e *Engine) queueScore(d *demand) float64 {
	arrivalS := d.arrival / 1000
	switch e.cfg.QueuePolicy {
	case protocol.QueueLCFS:
		return d.priority + arrivalS
	case protocol.QueueWSPT:
		e.index.FindMatches(d.local, e.overlap)
		best := uint64(0)
		for _, w := range e.fleet.readyWorkers() {
			if w.role != d.role {
				continue
			}
			for _, r := range w.ranks {
				if ok, _ := d.staticallyAllowed(r); ok {
					best = max(best, uint64(e.overlap[r.slot]))
				}
			}
		}
		uncached := d.isl - min(best*e.cfg.BlockSize, d.isl)
		return (1 + d.priority) / max(float64(uncached), 1)
	}
	return d.priority - arrivalS
}

// deadline is when a waiting request times out: the first time t at which
// its age, t - arrival as the floating point computes it, reaches
// queue_timeout_ms (arrival + timeout can round either way of that). Expiry
// and next_wakeup_ms both use it, so they cannot disagree by a rounding, and
// a request is never dropped an ulp short of its age.
func (e *Engine) deadline(req *request) float64 {
	arrival, timeout := req.d.arrival, *e.cfg.QueueTimeoutMS
	t := arrival + timeout
	for t-arrival < timeout {
		t = math.Nextafter(t, math.Inf(1))
	}
	for p := math.Nextafter(t, math.Inf(-1)); p-arrival >= timeout; p = math.Nextafter(t, math.Inf(-1)) {
		t = p
	}
	return t
}

// expireQueue rejects every waiting request that has waited queue_timeout_ms.
func (e *Engine) expireQueue() {
	for {
		req := e.queue.oldest()
		if req == nil || e.now < e.deadline(req) {
			return
		}
		e.stale()
		e.reject(req, protocol.CodeQueueTimeout, fmt.Sprintf("waited %s ms (queue_timeout_ms %s)",
			protocol.AppendNum(nil, e.now-req.d.arrival), protocol.AppendNum(nil, *e.cfg.QueueTimeoutMS)))
	}
}

// drain places queue heads, role by role, for as long as the head is
// admissible.
func (e *Engine) drain() {
	if e.queue.count == 0 {
		return // the usual case; the roles' queues are a map away
	}
	if e.wake.known && (!e.wake.ok || e.wake.at > e.now) {
		return // nothing changed since no head was admissible before wake.at
	}
	for _, role := range roleOrder {
		rq := e.queue.byRole[role]
		for rq.Len() > 0 {
			req := (*rq)[0]
			cs, ok := e.admissible(req.d, e.now)
			if !ok {
				break
			}
			heap.Pop(rq)
			e.queue.count--
			e.stale()
			e.out.released = append(e.out.released, e.place(req, cs, e.preferred(req.d, cs.ranks)))
		}
	}
}

// stepTo moves the clock to t (not before now) and applies what time does
// there: approximate entries and idle bindings expire, waiting requests time
// out, then the queue drains. Timeouts go first, so a request whose deadline is the very
// moment it would become admissible is rejected.
func (e *Engine) stepTo(t float64) {
	if t > e.now {
		e.now = t
		e.out.ev.ApproxExpired += e.approxExpire()
	}
	e.expireBindings()
	e.expireQueue()
	e.drain()
}

// advance moves the clock to t through every moment in between at which the
// queue would act, in time order, so that each release and timeout happens
// at its exact time.
func (e *Engine) advance(t float64) {
	for e.queue.count > 0 || e.held > 0 { // a held waiter has a deadline too
		next, ok := e.nextWakeup()
		if !ok || next > t || next <= e.now {
			break // (next <= now would be a bug; never spin on it)
		}
		e.stepTo(next)
	}
	e.stepTo(t)
}

// wakeup caches nextWakeup. Finding it reads every rank a queue head may go
// to, and every response carries it, so a stream of lines that change
// nothing it rests on (clock steps short of it, KV events, refused lines)
// would pay that per line. It rests on the waiting requests, the workers,
// the ranks' loads and the bindings of waiting requests (which hold a lease,
// so do not expire); whatever changes one of those calls stale. The clock
// moving alone leaves it true: loads only fall and deadlines stay, so the
// first moment after now at which the router acts is the same from any
// earlier now, until the router acts.
type wakeup struct {
	at    float64
	ok    bool
	known bool
}

// stale drops the cached wakeup after a change it may rest on.
func (e *Engine) stale() { e.wake.known = false }

// nextWakeup is the earliest time after now at which the router would act
// with no further input: a waiting request times out, or a queue head
// becomes admissible as prefill load decays.
func (e *Engine) nextWakeup() (float64, bool) {
	if !e.wake.known {
		e.wake.at, e.wake.ok = e.findWakeup()
		e.wake.known = true
	}
	return e.wake.at, e.wake.ok
}

// findWakeup is nextWakeup without the cache.
func (e *Engine) findWakeup() (float64, bool) {
	if e.queue.count == 0 && e.held == 0 {
		return math.Inf(1), false
	}
	best := math.Inf(1)
	if req := e.queue.oldest(); req != nil {
		best = e.deadline(req)
	}
	for _, role := range roleOrder {
		if req := e.queue.head(role); req != nil {
			best = min(best, e.admissibleAt(req.d))
		}
	}
	return best, !math.IsInf(best, 1)
}

// admissibleAt returns the earliest time after now at which d becomes
// admissible with no further input, or +Inf. Loads only fall without input,
// so each rank stops being overloaded (and queue-busy) at one moment, and d
// is admissible from the first moment some rank it may go to is neither
// queue-busy nor on a busy worker. Rounding is settled by checking the
// answer with admissible itself, so a host that advances the clock to
// exactly this time gets the release.
func (e *Engine) admissibleAt(d *demand) float64 {
	if e.checkPin(d) != nil {
		return math.Inf(1)
	}
	best := math.Inf(1)
	for _, w := range e.fleet.readyWorkers() {
		if w.role != d.role {
			continue
		}
		workerFree := math.Inf(1)
		for _, r := range w.ranks {
			if ok, _ := d.staticallyAllowed(r); ok {
				workerFree = min(workerFree, e.unloadedAt(r))
			}
		}
		for _, r := range w.ranks {
			if ok, _ := d.staticallyAllowed(r); ok {
				best = min(best, max(workerFree, e.queueFreeAt(r)))
			}
		}
	}
	if math.IsInf(best, 1) {
		return best
	}
	t := max(best, math.Nextafter(e.now, math.Inf(1)))
	for range 64 {
		if _, ok := e.admissible(d, t); ok {
			return e.earliestAdmissible(d, t)
		}
		t = math.Nextafter(t, math.Inf(1))
	}
	return math.Inf(1)
}

// earliestAdmissible finds the first time after now at which d is
// admissible, given that it is at t: the decay's inverse (reachTime) can
// land late, by an ulp or by thousands, and a host that advances to just
// before next_wakeup_ms must see nothing happen. Admissibility only grows
// with time, so the boundary is found by bisection over the float64 values
// between now and t (their bits, times being >= 0, are in the same order):
// one check when t is right, at most 64.
func (e *Engine) earliestAdmissible(d *demand, t float64) float64 {
	lo, hi := math.Float64bits(e.now), math.Float64bits(t) // not admissible at lo; admissible at hi
	if hi-lo > 1 {
		if _, ok := e.admissible(d, math.Float64frombits(hi-1)); !ok {
			return t
		}
		hi--
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if _, ok := e.admissible(d, math.Float64frombits(mid)); ok {
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

// queueFreeAt is when r stops being busy by queue_threshold.
func (e *Engine) queueFreeAt(r *rank) float64 {
	q := e.cfg.QueueThreshold
	if q == nil || r.w.maxNumBatchedTokens == nil {
		return e.now
	}
	return max(e.now, r.prefill.reachTime(*q*float64(*r.w.maxNumBatchedTokens)))
}
