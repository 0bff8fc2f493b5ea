package engine

import (
	"container/heap"
	"fmt"
	"math"
	"slices"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Admission decides when a request may be placed: the policy queue, its
// deadlines, and moving the clock through the moments it acts at (which
// wakeup.go finds).

func (e *Engine) prefillRate() float64 {
	if e.cfg.PrefillLoadModel == protocol.PrefillLoadLinear {
		return *e.cfg.PrefillTokensPerMS
	}
	return 0
}

// defaultMaxBatchedTokens is what Dynamo's queue takes for a worker that
// does not say its max_num_batched_tokens (queue.rs at the pinned commit).
const defaultMaxBatchedTokens = 10_000_000

// admissible reports whether d, of class c, could be placed at time t, and
// among which ranks: it has candidates, and not all of them are busy by its
// class. It changes nothing. noEndpoints is set, with ok, when no rank
// passes d's filters other than the busy thresholds (Dynamo's NoEndpoints):
// the head is dispatchable, and placing it fails with that error.
func (e *Engine) admissible(d *demand, c *flowClass, t float64) (cs candidateSet, ok bool, noEndpoints *protocol.Error) {
	cs, err := e.candidates(d, t)
	if err != nil {
		if cs.filtered.Busy == 0 {
			return cs, true, err
		}
		return cs, false, nil // busy by a threshold: it waits (PROTOCOL.md §5)
	}
	for _, r := range cs.ranks {
		if !c.busy(r, t) {
			return cs, true, nil
		}
	}
	return cs, false, nil
}

// busy is Dynamo's per-class busy test of a rank at time t: its prefill load
// above prefill_busy_threshold tokens, or above prefill_busy_threshold_frac
// of its max_num_batched_tokens (each strictly).
func (c *flowClass) busy(r *rank, t float64) bool {
	if c.busyAbs == nil && c.busyFrac == nil {
		return false
	}
	load := r.prefill.at(t)
	if c.busyAbs != nil && load > *c.busyAbs {
		return true
	}
	return c.busyFrac != nil && load > float64(*c.busyFrac*maxBatched(r))
}

func maxBatched(r *rank) float64 {
	if m := r.w.maxNumBatchedTokens; m != nil {
		return float64(*m)
	}
	return defaultMaxBatchedTokens
}

// preferred is the index of the rank a soft-affinity request should go to
// while that rank passes the filters and is not busy by its class, or -1.
func (e *Engine) preferred(req *request, ranks []*rank) int {
	target := req.d.boundTarget()
	if target == nil || req.class.class.busy(target, e.now) {
		return -1
	}
	return slices.Index(ranks, target)
}

// outcome is what became of a request that asked to be placed.
type outcome uint8

const (
	outPlaced outcome = iota
	outQueued
	outRejected
)

// placeOrWait places a request now, or queues it when its class already
// has waiting requests in its role (no overtaking) or it is not admissible,
// or rejects it when its class's queue is full or it has nowhere to go. A
// request of a class that never queues is placed among cs, which the
// caller found.
func (e *Engine) placeOrWait(req *request, cs candidateSet) (protocol.Placement, outcome) {
	cq := req.class
	if !cq.class.queueing() {
		return e.place(req, cs, e.preferred(req, cs.ranks)), outPlaced
	}
	if cq.head() == nil {
		cs, ok, noEndpoints := e.admissible(req.d, cq.class, e.now)
		switch {
		case noEndpoints != nil:
			e.reject(req, noEndpoints.Code, noEndpoints.Message)
			return protocol.Placement{}, outRejected
		case ok:
			return e.place(req, cs, e.preferred(req, cs.ranks)), outPlaced
		}
	}
	e.queueKey(req)
	if code, msg := e.overLimit(req); code != "" {
		e.reject(req, code, msg)
		return protocol.Placement{}, outRejected
	}
	e.queue.push(req)
	if cq.head() == req { // queued behind a head, it changes nothing
		cq.stale()
	}
	return protocol.Placement{}, outQueued
}

// release places (or queues) a request that stopped waiting for its
// binding. One of a class that never queues, that cannot be placed now, is
// rejected with the error a new request would get.
func (e *Engine) release(req *request) {
	var cs candidateSet
	if !req.class.class.queueing() {
		var err *protocol.Error
		if cs, err = e.candidates(req.d, e.now); err != nil {
			e.reject(req, err.Code, err.Message)
			return
		}
	}
	if p, o := e.placeOrWait(req, cs); o == outPlaced {
		e.out.released = append(e.out.released, p)
	}
}

// limitNames name the per-worker queue limits as Dynamo's rejection does.
var limitNames = [3]string{"requests", "raw_isl_tokens", "cached_tokens"}

// overLimit is Dynamo's queue-limit check of a request about to join its
// class's queue: each limit is per worker of the role (ready or draining),
// checked before the request is counted, so the request that reaches a
// limit is taken and the next one is not (a limit of 0 takes none: the class
// places what it can and rejects what would wait).
func (e *Engine) overLimit(req *request) (protocol.Code, string) {
	cq := req.class
	workers := e.fleet.discovered[roleIndex(cq.role)]
	for i, per := range cq.class.limits {
		if per == nil {
			continue
		}
		if limit := saturatingMul(*per, workers); cq.held[i] >= limit {
			return protocol.CodeQueueRejected, fmt.Sprintf("router policy class %q queue %s limit reached (current=%d, limit=%d)",
				cq.class.name, limitNames[i], cq.held[i], limit)
		}
	}
	return "", ""
}

// queueKey fixes what req is queued by: the synthetic class's queue_policy
// score (a configured class's deadline was fixed at arrival); its cost to
// round robin and its counts against the limits. The cached tokens are the
// best overlap among the ranks it may go to, from the index as it is now.
func (e *Engine) queueKey(req *request) {
	d, c := req.d, req.class.class
	if c.legacy && e.cfg.QueuePolicy != protocol.QueueWSPT {
		req.score = e.queueScore(d, 0)
		req.cost = 1
		return
	}
	cached := min(e.bestStaticOverlap(d)*e.cfg.BlockSize, d.isl)
	req.cost = max(d.isl-cached, 1)
	if c.legacy {
		req.score = e.queueScore(d, d.isl-cached)
		return
	}
	req.holds = usage{1, d.isl, cached}
}

// bestStaticOverlap is the most leading blocks of d's prompt any rank d may
// go to (by allowed_workers and its pin) caches.
func (e *Engine) bestStaticOverlap(d *demand) uint64 {
	e.findOverlap(d)
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
	return best
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

// queueScore is the synthetic class's queue_policy score of d at its
// arrival (higher first); wspt's uses the request's uncached tokens.
func (e *Engine) queueScore(d *demand, uncached uint64) float64 {
	arrivalS := d.arrival / 1000
	switch e.cfg.QueuePolicy {
	case protocol.QueueLCFS:
		return d.priority + arrivalS
	case protocol.QueueWSPT:
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
		e.reject(req, protocol.CodeQueueTimeout, fmt.Sprintf("waited %s ms (queue_timeout_ms %s)",
			protocol.AppendNum(nil, e.now-req.d.arrival), protocol.AppendNum(nil, *e.cfg.QueueTimeoutMS)))
	}
}

// expireClasses rejects every waiting request past its class's deadline:
// Dynamo's expiry at dispatch, which takes a class's heads while now >
// deadline (a class's order is its deadline order, so they are its first),
// and those held for their binding likewise (in arrival order, which is
// deadline order). It neither spends nor earns round-robin credit.
func (e *Engine) expireClasses() {
	for i := range e.queue.roles {
		for _, cq := range e.queue.roles[i].classes {
			if cq.class.legacy {
				continue
			}
			for head := cq.head(); head != nil && e.now > head.deadline; head = cq.head() {
				cq.stale()
				e.missed(head)
			}
			for w := cq.firstWaiter(); w != nil && e.now > w.deadline; w = cq.firstWaiter() {
				e.missed(w)
			}
		}
	}
}

// missed rejects a request past its class's deadline.
func (e *Engine) missed(req *request) {
	c := req.class.class
	e.reject(req, protocol.CodeQueueDeadlineExceeded, fmt.Sprintf(
		"router policy class %q deadline exceeded at dispatch (slo=%dms, overdue=%dms)",
		c.name, uint64(c.sloMS), uint64(e.now-req.deadline)))
}

// drain places queue heads, role by role, for as long as round robin finds
// a class whose head is admissible. A head with nowhere to go (no rank
// passes its filters) is rejected with that error, as Dynamo's NoEndpoints.
func (e *Engine) drain() {
	if e.queue.count == 0 {
		return // the usual case
	}
	for _, role := range roleOrder {
		rq := &e.queue.roles[roleIndex(role)]
		if !rq.waiting() {
			continue
		}
		for {
			e.tested.cq = nil
			cq := rq.next(e)
			if cq == nil {
				break
			}
			req := cq.head()
			if e.tested.cq != cq { // round robin usually serves the class it tested last
				e.tested.cs, _, e.tested.none = e.admissible(req.d, cq.class, e.now)
			}
			cs, noEndpoints := e.tested.cs, e.tested.none
			heap.Pop(&cq.heap)
			e.queue.left(cq, req)
			cq.stale()
			if noEndpoints != nil {
				e.reject(req, noEndpoints.Code, noEndpoints.Message)
				continue
			}
			e.out.released = append(e.out.released, e.place(req, cs, e.preferred(req, cs.ranks)))
		}
	}
	e.tested.cs = candidateSet{} // not kept past the drain
}

// dispatchable is round robin's test of a class's head (heads): admissible
// now. What admitting it found is kept (e.tested) for the drain.
func (e *Engine) dispatchable(cq *classQueue) bool {
	if cq.wake.known && e.headAt(cq) > e.now {
		return false // not admissible before its moment
	}
	var ok bool
	e.tested.cs, ok, e.tested.none = e.admissible(cq.head().d, cq.class, e.now)
	e.tested.cq = cq
	return ok
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
	e.expireClasses()
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
