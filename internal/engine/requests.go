package engine

import (
	"github.com/offline-router/offline-router/internal/affinity"
	"github.com/offline-router/offline-router/internal/protocol"
)

// request is a request the router knows: waiting in the queue (rank nil)
// or placed and booked on a rank.
type request struct {
	d         *demand
	rank      *rank
	prefill   *prefillEntry // booked prefill; done once completed or decayed
	end       uint32        // the active-tree segment its prompt ends at, once booked
	bookedAt  int           // its place in rank.booked while booked
	committed bool
	orphaned  bool // its worker was removed, and with it the booking
	binding   *binding
	bindRole  bindRole
	waiter    affinity.Waiter // its place among a staged binding's waiters

	// Its policy class's queue in its role, where it waits if it must, and
	// what it is queued by there, each fixed at arrival:
	class      *classQueue
	queueIndex int     // position in its class's heap; -1 when not waiting
	score      float64 // the synthetic class's queue-policy score
	deadline   float64 // a configured class's: arrival + slo_ms
	cost       uint64  // uncached prompt tokens, at least 1: what round robin charges
	holds      usage   // what it counts for against its class's limits
	arrivalSeq uint64  // arrival order, the last tie-break
}

// waiting reports whether the request waits: in the policy queue, or for a
// staged binding.
func (r *request) waiting() bool { return r.queueIndex >= 0 || r.bindRole == bindWaiter }

// book places req on r now: its load joins the rank's.
func (e *Engine) book(req *request, r *rank, prefillTokens uint64) {
	req.rank = r
	req.prefill = r.prefill.add(e.now, prefillTokens)
	var added uint64
	req.end, added = e.active.Book(e.walk, req.d.local, r.slot)
	r.distinctBlocks += added
	r.activeRequests++
	r.privateBlocks += req.d.privateBlocks
	req.bookedAt = len(r.booked)
	r.booked = append(r.booked, req)
	e.fleet.noteLoad(r)
	if e.queue.count > 0 {
		e.workerChanged(r.w)
	}
}

// unbook removes the request's load from its rank, unless the rank is gone.
func (e *Engine) unbook(req *request) {
	if req.orphaned {
		return
	}
	r := req.rank
	r.prefill.remove(e.now, req.prefill)
	r.distinctBlocks -= e.active.Release(req.end, r.slot)
	r.activeRequests--
	r.privateBlocks -= req.d.privateBlocks
	e.releaseAdapter(req.d.lora, r.w)
	e.fleet.noteLoad(r)
	e.workerChanged(r.w)
	last := r.booked[len(r.booked)-1]
	r.booked[req.bookedAt], last.bookedAt = last, req.bookedAt
	r.booked[len(r.booked)-1] = nil
	r.booked = r.booked[:len(r.booked)-1]
}

// finish ends a request (terminal, aborted or cancelled), freeing what it
// booked or taking it out of the queue, then undoing its session tie.
func (e *Engine) finish(req *request) {
	switch {
	case req.queueIndex >= 0:
		if req.class.head() == req { // from behind the head, it changes nothing
			req.class.stale()
		}
		e.queue.remove(req)
	case req.rank != nil:
		e.unbook(req)
	}
	delete(e.requests, req.d.id)
	e.leftBinding(req)
}

// reject drops a request that will not be placed, and says why.
func (e *Engine) reject(req *request, code protocol.Code, message string) {
	e.finish(req)
	e.out.rejected = append(e.out.rejected, protocol.Rejection{RequestID: req.d.id, Code: code, Message: message})
}

// prefillCompleted drops the request's prefill booking; repeating is a no-op.
func (e *Engine) prefillCompleted(req *request) {
	if !req.orphaned {
		req.rank.prefill.remove(e.now, req.prefill)
		e.fleet.noteLoad(req.rank)
		e.workerChanged(req.rank.w)
	}
}

func (req *request) state() protocol.RequestState {
	st := protocol.RequestState{RequestID: req.d.id, Blocks: len(req.d.local) + int(req.d.privateBlocks)}
	switch {
	case req.bindRole == bindWaiter:
		st.Status = "held" // waiting for its session's staged binding
		return st
	case req.waiting():
		st.Status = "queued"
		return st
	case req.orphaned:
		st.Status = "orphaned"
	case req.committed:
		st.Status = "committed"
	default:
		st.Status = "placed"
	}
	st.WorkerID, st.DPRank = &req.rank.w.id, &req.rank.dp
	if !req.prefill.done {
		st.PrefillTokens = req.prefill.tokens
	}
	return st
}
