package engine

import (
	"math"
	"slices"

	"github.com/offline-router/offline-router/internal/affinity"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Session affinity: the engine's use of the binding table. A request joins
// its key's binding when it arrives, in one of three ways, and keeps that
// tie until it ends:
//   - initializer: no live binding, so it stages one and is placed normally;
//     its dispatch_committed binds the key to its rank;
//   - waiter: the binding is staged by another request; it waits, and is
//     released by the initializer's commit (onto the bound rank) or abort
//     (the first waiter becomes the new initializer);
//   - leaseholder: the binding is bound; it holds a lease from its arrival,
//     even while it waits in the queue, so a binding never expires under a
//     request. Hence, while the clock moves, bindings change only by
//     expiring, and what a command will find at its now_ms is known before
//     anything changes.

type binding = affinity.Binding[*rank]

type bindRole uint8

const (
	bindNone bindRole = iota
	bindInitializer
	bindWaiter
	bindLeaseholder
)

func (e *Engine) hardAffinity() bool { return e.cfg.Affinity.Mode == protocol.AffinityHard }

// affinityKey is the binding key of a place command, or nil.
func (e *Engine) affinityKey(c *protocol.Command, role protocol.Role) *affinity.Key {
	if e.cfg.Affinity.Mode == protocol.AffinityOff {
		return nil
	}
	if e.cfg.Affinity.Key == protocol.AffinityKeySiblingGroup && c.ParentSessionID != nil {
		return &affinity.Key{Role: string(role), Kind: affinity.KindGroup, ID: *c.ParentSessionID}
	}
	if c.SessionID != nil {
		return &affinity.Key{Role: string(role), Kind: affinity.KindSession, ID: *c.SessionID}
	}
	return nil
}

// planAffinity finds the binding a demand arriving at t will join. It
// changes nothing; in hard mode it refuses a pin or allowed_workers that
// excludes the bound rank.
func (e *Engine) planAffinity(d *demand, t float64) *protocol.Error {
	if d.key == nil {
		return nil
	}
	b := e.bindings.LiveAt(*d.key, t)
	if b == nil || b.State != affinity.Bound {
		return nil
	}
	d.bound = b
	if !e.hardAffinity() {
		return nil
	}
	target := b.Target
	if d.pin != nil && (*d.pin != target.w.id || (d.pinRank != nil && *d.pinRank != target.dp)) {
		return protocol.Errorf(protocol.CodeAffinityConflict, "%s is bound to worker %d rank %d; the pin names another", b.Key, target.w.id, target.dp)
	}
	if d.allowed != nil && !slices.Contains(d.allowed, target.w.id) {
		return protocol.Errorf(protocol.CodeAffinityConflict, "%s is bound to worker %d, which allowed_workers excludes", b.Key, target.w.id)
	}
	return nil
}

// join ties an arriving request to its key's binding, as planned. It
// reports false when the request must wait for a staged binding.
func (e *Engine) join(req *request) bool {
	d := req.d
	if d.key == nil {
		return true
	}
	b := e.bindings.LiveAt(*d.key, e.now)
	switch {
	case b == nil:
		req.binding, req.bindRole = e.bindings.Stage(*d.key, d.id), bindInitializer
	case b.State == affinity.Staged:
		req.binding, req.bindRole = b, bindWaiter
		req.waiter = e.bindings.Wait(b, d.id)
		e.held++
		e.trackDeadline(req)
		req.class.hold(req, e.held)
		e.out.queued = append(e.out.queued, d.id)
		return false
	default:
		req.binding, req.bindRole = b, bindLeaseholder
		e.bindings.AddLease(b)
	}
	return true
}

// boundTarget is the rank a request must (hard) or should (soft) go to.
func (d *demand) boundTarget() *rank {
	if d.bound == nil || d.bound.Gone() {
		return nil
	}
	return d.bound.Target
}

// placedUnder records where a request under a binding was placed: a staged
// binding learns its initializer's rank.
func (e *Engine) placedUnder(req *request) string {
	if req.binding == nil || req.binding.Gone() {
		return "none"
	}
	switch req.bindRole {
	case bindInitializer:
		e.bindings.Placed(req.binding, req.rank)
		return "staged"
	case bindLeaseholder:
		return "bound"
	}
	return "none"
}

// committed settles the binding of a dispatched request: an initializer's
// binding becomes bound to its rank and its waiters are released onto it; in
// soft mode a request placed off its binding's rank moves the binding.
func (e *Engine) committed(req *request) {
	b := req.binding
	if b == nil || b.Gone() {
		return
	}
	switch req.bindRole {
	case bindInitializer:
		req.bindRole = bindLeaseholder
		for _, id := range e.bindings.Commit(b, req.rank) {
			w := e.requests[id]
			e.held--
			w.bindRole = bindLeaseholder
			w.d.bound, w.d.hardBound = b, e.hardAffinity()
			e.bindings.AddLease(b)
			e.release(w)
		}
	case bindLeaseholder:
		// Soft: follow the request, unless its worker drained or went away
		// since it was placed (a binding never points at such a worker).
		if !e.hardAffinity() && b.Target != req.rank && !req.orphaned && req.rank.w.status == statusReady {
			e.bindings.Move(b, req.rank)
		}
	}
}

// leftBinding undoes a request's tie when it ends (terminal, abort, cancel,
// timeout or rejection). An initializer that was never dispatched takes its
// staged binding with it, and its first waiter becomes the new initializer.
func (e *Engine) leftBinding(req *request) {
	b, role := req.binding, req.bindRole
	req.binding, req.bindRole = nil, bindNone
	if b == nil || b.Gone() {
		return
	}
	switch role {
	case bindInitializer:
		e.abort(b)
	case bindWaiter:
		e.bindings.Leave(b, req.waiter)
		e.held--
	case bindLeaseholder:
		e.bindings.EndLease(b, e.now)
	}
}

// abort ends the staging of a binding whose initializer went away; its
// first waiter, if any, becomes the initializer and is selected afresh, and
// the others wait for it.
func (e *Engine) abort(b *binding) {
	// An initializer still tied to it (its rank drained or went away) lets
	// go: the binding passes on, and its later commit must not bind it.
	if old, ok := e.requests[b.Initializer]; ok && old.binding == b {
		old.binding, old.bindRole = nil, bindNone
	}
	id, ok := e.bindings.Abort(b)
	if !ok {
		return
	}
	first := e.requests[id]
	e.held--
	first.bindRole = bindInitializer
	e.release(first)
}

// invalidate drops the bindings of a worker that drains or goes away. A
// staged one's waiters are promoted; requests under a bound one select
// afresh from now on.
func (e *Engine) invalidate(w *worker) {
	for _, b := range e.bindings.Invalidate(w.ranks...) {
		e.out.ev.BindingsInvalidated = append(e.out.ev.BindingsInvalidated, protocol.BindingRef{Role: protocol.Role(b.Key.Role), Key: b.Key.String()})
		e.staleRole(protocol.Role(b.Key.Role)) // a head bound to it may go elsewhere now
		if b.State == affinity.Staged {
			e.abort(b)
		}
	}
}

// expireBindings drops the bindings whose idle time ran out.
func (e *Engine) expireBindings() {
	for _, k := range e.bindings.Expire(e.now) {
		e.out.ev.BindingsExpired = append(e.out.ev.BindingsExpired, protocol.BindingRef{Role: protocol.Role(k.Role), Key: k.String()})
	}
}

func (e *Engine) bindingStates() []protocol.BindingState {
	out := []protocol.BindingState{}
	for _, b := range e.bindings.Sorted() {
		bs := protocol.BindingState{
			Role: protocol.Role(b.Key.Role), Key: b.Key.String(), State: b.State.String(),
			Leases: b.Leases, Initializer: b.Initializer, Waiters: b.Waiters(),
		}
		if b.HasTarget {
			bs.WorkerID, bs.DPRank = &b.Target.w.id, &b.Target.dp
		}
		if at := e.bindings.ExpiresAt(b); !math.IsInf(at, 1) {
			n := protocol.Num(at)
			bs.ExpiresAtMS = &n
		}
		out = append(out, bs)
	}
	return out
}
