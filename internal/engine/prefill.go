package engine

import "math"

// prefillLoad is a rank's booked prefill work. With the linear model
// (rate > 0) the rank works through it like one server in FIFO order: the
// oldest prefill decays to 0 over tokens/rate, then the next oldest starts.
// The total therefore falls at exactly `rate` while there is work, which is
// what at and reachTime use; the FIFO is kept so that a completed request
// takes back only what it still had. With no model (rate 0) nothing decays.
type prefillLoad struct {
	prefillLevel
	fifo []*prefillEntry
	head int
	live int // entries in fifo not done
}

// prefillLevel is what the load at a time is worked out from: all a
// placement reads of it.
type prefillLevel struct {
	pending  uint64  // tokens of entries not yet fully decayed, exact (first: see rankLoad)
	consumed float64 // how much of the head entry has decayed
	rate     float64 // tokens per ms; 0 = no decay
	last     float64 // the time the fields above describe
}

// prefillEntry is one request's booked prefill on a rank.
type prefillEntry struct {
	tokens uint64
	done   bool // fully decayed or released
}

// at returns the load at time t >= last, without changing anything.
func (p *prefillLevel) at(t float64) float64 {
	v := float64(p.pending) - p.consumed
	if p.rate > 0 && t > p.last {
		v -= float64(p.rate * (t - p.last)) // rounded alone: no fused multiply-add (exp.go)
	}
	return max(v, 0)
}

// reachTime returns the earliest time at which the load is at most level
// with no further input: last when it already is, +Inf when it never will.
func (p *prefillLoad) reachTime(level float64) float64 {
	if p.at(p.last) <= level {
		return p.last
	}
	if p.rate == 0 {
		return math.Inf(1)
	}
	return p.last + (float64(p.pending)-p.consumed-level)/p.rate
}

// decayTo brings the FIFO to time t, retiring entries that decayed fully.
func (p *prefillLoad) decayTo(t float64) {
	if p.rate > 0 && t > p.last {
		budget := float64(p.rate * (t - p.last)) // no fused multiply-add, even across statements (exp.go)
		for budget > 0 && p.head < len(p.fifo) {
			e := p.fifo[p.head]
			if e.done {
				p.head++
				continue
			}
			left := float64(e.tokens) - p.consumed
			if budget < left {
				p.consumed += budget
				break
			}
			budget -= left
			p.retireHead()
		}
	}
	p.last = t
	p.compact()
}

// add books tokens at time t.
func (p *prefillLoad) add(t float64, tokens uint64) *prefillEntry {
	p.decayTo(t)
	e := &prefillEntry{tokens: tokens}
	if tokens == 0 {
		e.done = true
		return e
	}
	p.fifo = append(p.fifo, e)
	p.live++
	p.pending += tokens
	return e
}

// remove releases what is left of e at time t.
func (p *prefillLoad) remove(t float64, e *prefillEntry) {
	p.decayTo(t) // which leaves the head at the first entry not done
	if e.done {
		return
	}
	if p.head < len(p.fifo) && p.fifo[p.head] == e {
		p.retireHead()
	} else {
		e.done = true
		p.live--
		p.pending -= e.tokens
	}
	p.compact()
}

func (p *prefillLoad) retireHead() {
	e := p.fifo[p.head]
	e.done = true
	p.live--
	p.pending -= e.tokens
	p.consumed = 0
	p.head++
}

// compact drops retired entries from the front once they are half the
// slice, and those released behind a head that stays (a prefill that never
// completes) once they outnumber the live ones: O(1) per entry, amortized.
func (p *prefillLoad) compact() {
	for p.head < len(p.fifo) && p.fifo[p.head].done {
		p.head++
	}
	switch {
	case p.head == len(p.fifo):
		p.fifo, p.head, p.consumed = p.fifo[:0], 0, 0
	case len(p.fifo)-p.head > 2*p.live+16:
		kept := p.fifo[:0]
		for _, e := range p.fifo[p.head:] {
			if !e.done {
				kept = append(kept, e)
			}
		}
		clear(p.fifo[len(kept):])
		p.fifo, p.head = kept, 0
	case p.head > len(p.fifo)/2:
		n := copy(p.fifo, p.fifo[p.head:])
		clear(p.fifo[n:])
		p.fifo, p.head = p.fifo[:n], 0
	}
}
