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
	if e.queue.head(req.d.role) == req { // queued behind a head, it changes nothing
		e.stale(req.d.role)
	}
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
	for _, role := range roleOrder {
		rq := e.queue.byRole[role]
		if rq.Len() == 0 || (e.wake[roleIndex(role)].known && e.headAt(role) > e.now) {
			continue // no head, or none admissible before its moment
		}
		for rq.Len() > 0 {
			req := (*rq)[0]
			cs, ok := e.admissible(req.d, e.now)
			if !ok {
				break
			}
			heap.Pop(rq)
			e.queue.count--
			e.stale(role)
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
