package engine

import (
	"math"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Stepping: one command in, its effects gathered in e.out, one response
// out. Checks come first and change nothing, so a refused command leaves
// the engine as it was; then the clock moves, the command acts, and the
// queue drains.

// Apply steps the engine with one command and fills resp. Any Command value
// is safe: it is validated first, as the decoder validates a line. A command
// is all-or-nothing: when resp.Error is set, the engine is exactly as before.
// The engine keeps the command's slices (a place's block hashes outlive it
// in the active-block tree): the caller must not change them afterwards.
func (e *Engine) Apply(c *protocol.Command, resp *protocol.Response) {
	if err := e.apply(c, resp); err != nil {
		*resp = protocol.Response{Seq: resp.Seq, ID: resp.ID, Op: resp.Op, Error: err}
	} else {
		resp.OK = true
	}
	e.Status(resp)
}

// Status fills the fields every response carries from the engine's state.
func (e *Engine) Status(resp *protocol.Response) {
	resp.NowMS = protocol.Num(e.now)
	resp.PendingCount = e.queue.count + e.held
	resp.NextWakeupMS = nil
	// A moment past the latest now_ms a command may carry never comes: no
	// host could advance to it, so it is not a wakeup.
	if t, ok := e.nextWakeup(); ok && t <= protocol.MaxNumber {
		n := protocol.Num(t)
		resp.NextWakeupMS = &n
	}
}

func (e *Engine) apply(c *protocol.Command, resp *protocol.Response) *protocol.Error {
	if err := c.Validate(); err != nil {
		return err
	}
	t := e.now
	if c.NowMS != nil {
		if *c.NowMS < e.now {
			return protocol.Errorf(protocol.CodeClockRegression, "field \"now_ms\": %s is before the router's clock %s",
				protocol.AppendNum(nil, *c.NowMS), protocol.AppendNum(nil, e.now))
		}
		t = *c.NowMS
	}
	// Everything that can fail is checked before anything changes, so that
	// a failed command leaves the engine untouched; what depends only on
	// time (decaying load) is evaluated as of t.
	var d *demand
	var cs candidateSet
	var err *protocol.Error
	if c.Op == protocol.OpPlace {
		d, cs, err = e.checkPlace(c, t)
	} else {
		err = e.check(c)
	}
	if err != nil {
		return err
	}
	e.out = output{}
	e.advance(t)
	switch c.Op {
	case protocol.OpWorkerReady:
		e.workerReady(c)
	case protocol.OpWorkerDraining:
		w := e.fleet.byID[*c.WorkerID]
		e.workerDraining(w)
		e.invalidate(w)
	case protocol.OpWorkerRemoved:
		// Gone first, so that waiters its bindings release cannot land on it.
		w := e.fleet.byID[*c.WorkerID]
		e.workerRemoved(w)
		e.invalidate(w)
	case protocol.OpPlace:
		req := &request{d: d, queueIndex: -1, class: e.queue.classOf(d.role, d.class)}
		if c := req.class.class; !c.legacy {
			req.deadline = d.arrival + c.sloMS // fixed at arrival, held or queued
		}
		e.requests[d.id] = req
		if !e.join(req) {
			break // waits for its binding's initializer
		}
		if !req.class.class.queueing() && len(e.out.released) > 0 {
			// Requests of other classes the clock released on the way have
			// booked load since the candidates were found: find them again.
			// With none left, the request is rejected as a new one would be
			// refused; its checks passed, so the command stands.
			var err *protocol.Error
			if cs, err = e.candidates(d, e.now); err != nil {
				e.reject(req, err.Code, err.Message)
				break
			}
		}
		switch p, o := e.placeOrWait(req, cs); o {
		case outPlaced:
			resp.Placements = append(resp.Placements, p)
		case outQueued:
			e.trackDeadline(req)
			e.out.queued = append(e.out.queued, d.id)
		}
	case protocol.OpObserve:
		e.observe(c.Events)
	case protocol.OpDispatchCommitted:
		req := e.requests[c.RequestID]
		req.committed = true
		e.committed(req)
	case protocol.OpDispatchAborted, protocol.OpRequestTerminal:
		// A waiting request may have timed out as the clock moved: its
		// rejection is in this response and there is nothing left to end.
		if req, ok := e.requests[c.RequestID]; ok {
			e.finish(req)
		}
	case protocol.OpPrefillCompleted:
		e.prefillCompleted(e.requests[c.RequestID])
	case protocol.OpCancelPending:
		req, ok := e.requests[c.RequestID]
		cancelled := ok && req.waiting()
		if cancelled {
			e.finish(req)
		}
		resp.Cancelled = &cancelled
	case protocol.OpInspect:
		resp.State = e.inspect()
	case protocol.OpTopologySettled, protocol.OpAdvanceClock:
	}
	if c.Op != protocol.OpInspect {
		e.drain() // whatever the command freed or changed
	}
	resp.Placements = append(resp.Placements, e.out.released...)
	resp.Rejected = e.out.rejected
	resp.Queued = e.out.queued
	if !e.out.ev.Empty() {
		ev := e.out.ev
		resp.Evidence = &ev
	}
	return nil
}

// checkPlace validates a place command as of time t. It also finds the
// candidates, which the advance to t cannot change (it only expires
// approximate entries): a request of a class that never queues needs them,
// and fails without them. One of a class that queues fails only when no
// rank passes its filters and its class has no backlog, as in Dynamo (the
// busy test sends nothing to the queue then, and placing it fails with
// NoEndpoints); any other lack of candidates makes it wait.
func (e *Engine) checkPlace(c *protocol.Command, t float64) (*demand, candidateSet, *protocol.Error) {
	d, err := e.newDemand(c, t)
	if err != nil {
		return d, candidateSet{}, err
	}
	cq := e.queue.classOf(d.role, d.class)
	if cq.class.queueing() && cq.head() != nil {
		return d, candidateSet{}, nil // it waits in line: nothing to find now
	}
	cs, err := e.candidates(d, t)
	if cq.class.queueing() {
		// Placing it finds its candidates again after the clock; here
		// only whether it could go anywhere at all matters.
		if cs.filtered.Busy > 0 {
			err = nil
		}
		return d, candidateSet{}, err
	}
	return d, cs, err
}

// check validates a command other than place against the state before the
// clock moves to the command's time, changing nothing. Nothing the clock
// does can make a command that passed here fail.
func (e *Engine) check(c *protocol.Command) *protocol.Error {
	switch c.Op {
	case protocol.OpConfig:
		return protocol.Errorf(protocol.CodeConfigTooLate, "an engine keeps the config it was built with; a config command is taken only as the first command of a stream")
	case protocol.OpWorkerReady:
		if w, ok := e.fleet.byID[*c.WorkerID]; ok {
			return protocol.Errorf(protocol.CodeDuplicateWorker, "worker %d is already %s; it can come back only after worker_removed", w.id, w.status)
		}
		start := first(c.DPStart, e.cfg.WorkerDefaults.DPStart, 0)
		size := first(c.DPSize, e.cfg.WorkerDefaults.DPSize, 1)
		if uint64(start)+uint64(size) > math.MaxUint32+1 {
			return protocol.Errorf(protocol.CodeInvalidField, `field "dp_start": dp_start + dp_size exceeds the dp_rank range`)
		}
		if up := len(e.fleet.slots) - len(e.fleet.freeSlots); up+int(size) > protocol.MaxRanks {
			return protocol.Errorf(protocol.CodeInvalidField, `field "dp_size": %d more ranks would pass the %d the router holds at once (%d are up)`, size, protocol.MaxRanks, up)
		}
	case protocol.OpWorkerDraining, protocol.OpWorkerRemoved:
		_, err := e.lookupWorker(*c.WorkerID)
		return err
	case protocol.OpObserve:
		return e.checkTokenIDs(c.Events)
	case protocol.OpDispatchAborted, protocol.OpRequestTerminal:
		if _, ok := e.requests[c.RequestID]; !ok {
			return protocol.Errorf(protocol.CodeUnknownRequest, "request %q is not in flight", c.RequestID)
		}
	case protocol.OpDispatchCommitted, protocol.OpPrefillCompleted:
		req, ok := e.requests[c.RequestID]
		if !ok {
			return protocol.Errorf(protocol.CodeUnknownRequest, "request %q is not in flight", c.RequestID)
		}
		// A host sees a waiting request's placement only in a response, so
		// it cannot have dispatched one that is waiting now.
		if req.waiting() {
			return protocol.Errorf(protocol.CodeUnknownRequest, "request %q is waiting (in the queue or for its session's binding): it has no placement yet", c.RequestID)
		}
	}
	return nil
}
