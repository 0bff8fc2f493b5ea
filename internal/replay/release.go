package replay

import "fmt"

// When a request is sent: a first turn, or an agentic root, at its
// timestamp (in a closed loop, when its play's lane opens); anything else
// once all it waits for has happened, on the virtual clock, plus the
// longest of their delays. A session's later turn waits for the end of the
// turn before it, after its delay_ms; an agentic request for each of its
// dependencies' trigger (a dispatch or a completion), after the
// dependency's delay. A request the router turned away counts as
// completed when it was turned away, and as dispatched then if it never
// was, so that what waits on it still goes.

// edge is one request waiting on another.
type edge struct {
	r       *simRequest // the one that waits
	trigger Trigger
	delayMS float64
}

// playRun is a play as a closed loop runs it: its roots, sent when its
// lane opens (each its timestamp's offset from the play's first later),
// and how many of its requests have not ended.
type playRun struct {
	roots []*simRequest
	first float64 // the earliest root's timestamp
	left  int
}

// link sets up what each request waits for and schedules the open loop's
// roots, or, with Options.Concurrency, the closed loop's first plays (in
// the order they first appear, as Dynamo's --replay-concurrency starts
// sessions): a play is an agentic trace's play, else a session, else a
// request alone. In a closed loop timestamps are ignored but within a
// play: a session's later turn without delay_ms follows the turn before
// it after the gap between their timestamps (or at once), a first turn's
// delay_ms is ignored.
func (h *host) link(trace []Request) error {
	closed := h.opt.Concurrency > 0
	plays := map[string]*playRun{}
	var order []*playRun
	last, lastStamp := map[string]*simRequest{}, map[string]float64{}
	next := successors(trace)
	for i := range trace {
		r := h.reqs[i]
		key := playKey(r.Request)
		p := plays[key]
		if p == nil || key == "" {
			p = &playRun{first: r.Arrival}
			order = append(order, p)
			if key != "" {
				plays[key] = p
			}
		}
		r.play = p
		p.left++
		for _, d := range r.Deps {
			h.wait(r, h.reqs[d.On], d.Trigger, d.DelayMS)
		}
		if n := next[i]; n >= 0 {
			r.next = h.reqs[n]
		}
		prev := last[r.Session]
		if r.Session != "" && r.Agent == nil {
			last[r.Session] = r
		}
		switch {
		case r.Agent != nil:
		case closed && prev != nil:
			delay := max(r.Arrival-lastStamp[r.Session], 0)
			if r.DelayMS != nil {
				delay = *r.DelayMS
			} else {
				lastStamp[r.Session] = r.Arrival
			}
			h.wait(r, prev, OnCompletion, delay)
		case closed:
			lastStamp[r.Session] = r.Arrival
		case r.DelayMS != nil:
			if prev == nil {
				return fmt.Errorf("request %s has a delay but no earlier turn of its session %q to follow", r.ID, r.Session)
			}
			h.wait(r, prev, OnCompletion, *r.DelayMS)
		}
		if r.waits > 0 {
			continue
		}
		if !closed {
			h.schedule(r.Arrival, evArrival, r)
			continue
		}
		p.roots = append(p.roots, r)
		p.first = min(p.first, r.Arrival)
	}
	if !closed {
		return nil
	}
	n := min(h.opt.Concurrency, len(order))
	for _, p := range order[:n] {
		h.startPlay(0, p)
	}
	h.starts = order[n:]
	return nil
}

// wait makes r wait on on's trigger, then delay ms.
func (h *host) wait(r, on *simRequest, trigger Trigger, delayMS float64) {
	on.after = append(on.after, edge{r, trigger, delayMS})
	r.waits++
}

// startPlay sends a closed loop's play's roots, its lane open at t.
func (h *host) startPlay(t float64, p *playRun) {
	h.playsStarted++
	for _, r := range p.roots {
		h.schedule(t+(r.Arrival-p.first), evArrival, r)
	}
}

// release lets go, at t, of what waited on r's trigger: each dependent
// whose last wait this was is sent at the latest its waits allow.
func (h *host) release(t float64, r *simRequest, trigger Trigger) {
	for _, e := range r.after {
		if e.trigger != trigger {
			continue
		}
		d := e.r
		if at := t + e.delayMS; d.binding == nil || at > d.readyAt {
			d.readyAt, d.binding, d.bindingDelay = at, r, e.delayMS
		}
		if d.waits--; d.waits == 0 {
			h.schedule(d.readyAt, evArrival, d)
		}
	}
}
