package engine

import (
	"cmp"
	"slices"

	"github.com/offline-router/offline-router/internal/protocol"
)

// adapters is what the router knows of one worker's LoRA adapters: how
// many it can hold and which it holds, as worker_ready advertised them and
// as the router's own placements have loaded them since. Dynamo keys this
// by worker (its model manager files a worker's capacity under DP rank 0),
// so every rank of a worker holds the same adapters. A worker that
// advertises no capacity has none (nil): the router knows nothing of its
// adapters and loads none there.
type adapters struct {
	capacity uint32
	loaded   map[string]*adapter
	idle     int // loaded adapters with no request in flight: what a load may evict
}

type adapter struct {
	inFlight uint64 // booked requests using it
	used     uint64 // the engine's adapter clock when a request last booked it (0: advertised, never used)
}

// Adapter fits, as a LoRA request sees a worker, best first: a worker that
// holds the adapter, one that can load it (a free slot, or an idle adapter
// to evict), one that can do neither.
const (
	fitNone = iota
	fitLoadable
	fitLoaded
)

// newAdapters is a worker's adapters as worker_ready gave them.
func newAdapters(c *protocol.Command) *adapters {
	capacity := c.LoRACapacity()
	if capacity == 0 {
		return nil
	}
	a := &adapters{capacity: capacity, loaded: make(map[string]*adapter, len(c.LoRAAdapters))}
	for _, name := range c.LoRAAdapters {
		a.loaded[name] = &adapter{}
	}
	a.idle = len(a.loaded)
	return a
}

// fit is how well w suits a request for adapter name.
func (w *worker) fit(name string) int {
	a := w.lora
	switch {
	case a == nil:
		return fitNone
	case a.loaded[name] != nil:
		return fitLoaded
	case uint32(len(a.loaded)) < a.capacity || a.idle > 0:
		return fitLoadable
	}
	return fitNone
}

// loraFit is the best fit among the ready workers of d's role that pass
// its static filters, or fitNone when d asks for no adapter or no worker
// knows its adapters. Dynamo's LoRA filter narrows the candidates to the
// workers of the best fit and never empties them: with no worker fitting,
// it filters nothing.
//
// The fit changes only with what some worker's adapters offer, the ready
// set or a binding, each of which moves the adapter epoch; the queue's
// wakeup asks it for every worker of a head, so it is kept per demand for
// the epoch it was found at.
func (e *Engine) loraFit(d *demand) int {
	if d.lora == "" || e.fleet.loraWorkers == 0 {
		return fitNone
	}
	if d.fitAt == e.adapterEpoch+1 {
		return d.fit
	}
	best := fitNone
	for _, w := range e.fleet.readyWorkers() {
		if w.role != d.role || w.lora == nil {
			continue
		}
		for _, r := range w.ranks {
			if ok, _ := d.staticallyAllowed(r); ok {
				best = max(best, w.fit(d.lora))
				break
			}
		}
		if best == fitLoaded {
			break
		}
	}
	d.fit, d.fitAt = best, e.adapterEpoch+1
	return best
}

// loraAllows reports whether the LoRA filter leaves w among d's candidates.
func (e *Engine) loraAllows(d *demand, w *worker) bool {
	fit := e.loraFit(d)
	return fit == fitNone || w.fit(d.lora) == fit
}

// adaptersChanged: what the adapters of a worker of role offer, or the
// workers that offer them, changed, so a LoRA request's best fit may have:
// cached fits are dropped, and the moments of the role's LoRA heads.
func (e *Engine) adaptersChanged(role protocol.Role) {
	e.adapterEpoch++
	if e.queue.count == 0 {
		return
	}
	for _, cq := range e.queue.roles[roleIndex(role)].classes {
		if h := cq.head(); h != nil && h.d.lora != "" {
			cq.stale()
		}
	}
}

// useAdapter books req's adapter on w, loading it if w does not hold it:
// into a free slot, else in place of the least recently used idle adapter
// (ties by name), else past capacity (every slot is busy, and the engine
// must wait for one: the adapter leaves as soon as it is idle). It returns
// what the placement says of it: the load ("" when w held it) and the
// adapter evicted.
func (e *Engine) useAdapter(req *request, w *worker) (load, evicted string) {
	a := w.lora
	if a == nil || req.d.lora == "" {
		return "", ""
	}
	e.adapterClock++
	x := a.loaded[req.d.lora]
	if x == nil || x.inFlight == 0 && a.idle == 1 {
		defer e.adaptersChanged(w.role) // a new adapter held, or the last idle one taken
	}
	if x == nil {
		switch {
		case uint32(len(a.loaded)) < a.capacity:
			load = protocol.LoRALoaded
		case a.idle > 0:
			load, evicted = protocol.LoRAEvicted, a.leastRecentlyUsed()
			delete(a.loaded, evicted)
			a.idle--
		default:
			load = protocol.LoRAOverCapacity
		}
		x = &adapter{}
		a.loaded[req.d.lora] = x
		a.idle++
	}
	if x.inFlight == 0 {
		a.idle--
	}
	x.inFlight++
	x.used = e.adapterClock
	return load, evicted
}

// releaseAdapter undoes useAdapter for a request leaving w.
func (e *Engine) releaseAdapter(name string, w *worker) {
	a := w.lora
	if a == nil || name == "" {
		return
	}
	x := a.loaded[name]
	if x.inFlight--; x.inFlight > 0 {
		return
	}
	if uint32(len(a.loaded)) > a.capacity {
		delete(a.loaded, name) // loaded past capacity: unloaded once idle
	} else {
		a.idle++
	}
	e.adaptersChanged(w.role)
}

// leastRecentlyUsed is the idle adapter a load evicts. It walks the
// adapters, at most the worker's capacity, on a load alone.
func (a *adapters) leastRecentlyUsed() string {
	var victim string
	var at uint64
	for name, x := range a.loaded {
		if x.inFlight > 0 {
			continue
		}
		if victim == "" || x.used < at || x.used == at && name < victim {
			victim, at = name, x.used
		}
	}
	return victim
}

// state is the worker's adapters as inspect shows them, by name; nil when
// the router knows nothing of them.
func (a *adapters) state() *[]protocol.AdapterState {
	if a == nil {
		return nil
	}
	out := make([]protocol.AdapterState, 0, len(a.loaded))
	for name, x := range a.loaded {
		out = append(out, protocol.AdapterState{Name: name, InFlight: x.inFlight})
	}
	slices.SortFunc(out, func(p, q protocol.AdapterState) int { return cmp.Compare(p.Name, q.Name) })
	return &out
}
