package engine

import "github.com/offline-router/offline-router/internal/wire"

// request is a placed request the router still books load for.
type request struct {
	id            string
	rank          *rank
	seq           []uint64 // sequence hashes it holds active on rank
	privateBlocks uint64
	prefillTokens uint64 // still booked; 0 once prefill completed
	committed     bool
	orphaned      bool // its worker was removed, and with it the booking
}

// finish ends a request (terminal or aborted), freeing what it booked.
func (e *Engine) finish(r *request) {
	if !r.orphaned {
		e.active.release(r)
	}
	delete(e.requests, r.id)
}

// prefillCompleted drops the request's prefill booking; repeating is a no-op.
func (e *Engine) prefillCompleted(r *request) {
	if !r.orphaned {
		r.rank.prefillTokens -= r.prefillTokens
	}
	r.prefillTokens = 0
}

func (r *request) status() string {
	switch {
	case r.orphaned:
		return "orphaned"
	case r.committed:
		return "committed"
	}
	return "placed"
}

func (r *request) state() wire.RequestState {
	return wire.RequestState{
		RequestID: r.id, Status: r.status(), WorkerID: r.rank.w.id, DPRank: r.rank.dp,
		PrefillTokens: r.prefillTokens, Blocks: len(r.seq) + int(r.privateBlocks),
	}
}
