package replay

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Signals is the KV event channel from the simulated workers to the
// router as deployments have it: late, lossy, duplicated, out of order,
// and broken by engine restarts. The zero value is the perfect channel,
// every event at once and in order. Every draw comes from one stream
// seeded by the router's seed, so a run is the same bytes every time.
type Signals struct {
	// DelayMS delays every event; ReorderWindowMS adds to each a delay
	// drawn uniformly from [0, window), so that events within the window
	// of each other may arrive in either order.
	DelayMS         float64 `json:"delay_ms,omitempty"`
	ReorderWindowMS float64 `json:"reorder_window_ms,omitempty"`
	// LossRate is the share of events the router never gets, DupRate the
	// share it gets twice: again DupLagMS after the first, as a publisher's
	// retry would send it (by then a later event may have changed what it
	// names, and the copy undoes that).
	LossRate float64 `json:"loss_rate,omitempty"`
	DupRate  float64 `json:"dup_rate,omitempty"`
	DupLagMS float64 `json:"dup_lag_ms,omitempty"`
	// Restarts restart workers' engines: each clears the worker's prefix
	// cache, sends cleared and numbers its events afresh from 1.
	Restarts []Restart `json:"restarts,omitempty"`
}

// Restart is a worker's engine restarting at a time.
type Restart struct {
	Worker uint64  `json:"worker_id"`
	AtMS   float64 `json:"at_ms"`
}

// ParseRestart reads WORKER@MS: worker WORKER's engine restarts MS into
// the run.
func ParseRestart(s string) (Restart, error) {
	id, at, ok := strings.Cut(s, "@")
	if !ok {
		return Restart{}, fmt.Errorf("%q: expected WORKER@MS (a worker id, the ms into the run it restarts at)", s)
	}
	w, err := strconv.ParseUint(id, 10, 64)
	if err != nil || w < 1 {
		return Restart{}, fmt.Errorf("%q: expected a worker id from 1 before @", s)
	}
	ms, err := strconv.ParseFloat(at, 64)
	if err != nil || !(ms >= 0 && ms <= protocol.MaxNumber) {
		return Restart{}, fmt.Errorf("%q: expected the ms from 0 to 2^53 after @", s)
	}
	return Restart{Worker: w, AtMS: ms}, nil
}

// Perfect reports whether the channel is the perfect one.
func (s *Signals) Perfect() bool {
	return s.DelayMS == 0 && s.ReorderWindowMS == 0 && s.LossRate == 0 && s.DupRate == 0 && len(s.Restarts) == 0
}

// Check says what is wrong with the channel, naming the flag.
func (s *Signals) Check() error {
	switch {
	case !(s.DelayMS >= 0 && s.DelayMS <= 1e9):
		return fmt.Errorf("--event-delay-ms %v: expected 0 to 1e9 ms", s.DelayMS)
	case !(s.ReorderWindowMS >= 0 && s.ReorderWindowMS <= 1e9):
		return fmt.Errorf("--event-reorder-window-ms %v: expected 0 to 1e9 ms", s.ReorderWindowMS)
	case !(s.LossRate >= 0 && s.LossRate <= 1):
		return fmt.Errorf("--event-loss-rate %v: expected a share from 0 to 1", s.LossRate)
	case !(s.DupRate >= 0 && s.DupRate <= 1):
		return fmt.Errorf("--event-dup-rate %v: expected a share from 0 to 1", s.DupRate)
	case !(s.DupLagMS >= 0 && s.DupLagMS <= 1e9):
		return fmt.Errorf("--event-dup-lag-ms %v: expected 0 to 1e9 ms", s.DupLagMS)
	}
	return nil
}

// signalStream seeds the channel's draws apart from the router's and the
// sync channel's.
const signalStream = 0x5167

// channel is the host's side of an imperfect event channel: the events in
// flight (an evSignal's idx) and what it did to them.
type channel struct {
	rng      *rand.Rand
	inFlight []signalEvent
	lost     int
	dup      int
}

// signalEvent is an event on its way to a pool's routers.
type signalEvent struct {
	w  *simWorker
	ev protocol.KVEvent
}

// transmit puts ev, of worker w at t, on the channel: lost, or scheduled once
// or twice after its delay. Its block lists are copied: the simple model
// reuses them before a late event arrives.
func (h *host) transmit(t float64, w *simWorker, ev *protocol.KVEvent) {
	s, c := &h.opt.Signals, &h.channel
	if s.LossRate > 0 && c.rng.Float64() < s.LossRate {
		c.lost++
		return
	}
	copies := 1
	if s.DupRate > 0 && c.rng.Float64() < s.DupRate {
		copies, c.dup = 2, c.dup+1
	}
	x := *ev
	switch d := x.Data.(type) {
	case protocol.Stored:
		d.Blocks, d.Path = slices.Clone(d.Blocks), slices.Clone(d.Path)
		x.Data = d
	case protocol.Removed:
		x.Data = protocol.Removed{BlockHashes: slices.Clone(d.BlockHashes)}
	}
	for k := range copies {
		delay := s.DelayMS
		if s.ReorderWindowMS > 0 {
			delay += float64(c.rng.Float64() * s.ReorderWindowMS)
		}
		if k > 0 {
			delay += s.DupLagMS
		}
		c.inFlight = append(c.inFlight, signalEvent{w, x})
		h.nextSeq++
		h.events.push(event{at: t + delay, seq: h.nextSeq, kind: evSignal, idx: int32(len(c.inFlight) - 1)})
	}
}

// receive delivers in-flight event i to its pool's routers at t.
func (h *host) receive(t float64, i int32) {
	m := h.channel.inFlight[i]
	h.channel.inFlight[i] = signalEvent{} // delivered: let it go
	h.toAll(m.w.pool, &protocol.Command{Op: protocol.OpObserve, NowMS: ptr(t), Events: []protocol.KVEvent{m.ev}})
}

// restart restarts the engine of worker Restarts[i] at t, each of its
// ranks: their caches cleared, their events numbered afresh.
func (h *host) restart(t float64, i int32) {
	p, id := h.pools[0], h.opt.Signals.Restarts[i].Worker
	for rank := uint32(0); ; rank++ {
		w := p.workers[rankKey{id, rank}]
		if w == nil {
			return
		}
		h.apply(t, w, w.Worker.(cluster.Restarter).Restart(t))
	}
}
