// Package engine is the router's deterministic state machine. Like a raft
// node it is stepped by messages (wire commands) on explicit virtual time,
// and everything a step did is collected in its response. It does no I/O,
// reads no wall clock and starts no goroutines.
package engine

import (
	"fmt"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/wire"
)

// Engine routes requests to workers. Not safe for concurrent use.
type Engine struct {
	cfg      wire.Config
	now      float64
	fleet    fleet
	index    *kvindex.Index
	approx   *approxIndex
	active   activeBlocks
	requests map[string]*request
	rng      *stream

	// Scratch slices indexed by rank slot, reused by every placement.
	overlap []uint32
	hits    []uint32
}

// New returns an engine at time 0 with no workers.
func New(cfg wire.Config) (*Engine, error) {
	if err := supported(cfg); err != nil {
		return nil, err
	}
	return &Engine{
		cfg:      cfg,
		fleet:    newFleet(),
		index:    kvindex.New(),
		approx:   newApproxIndex(),
		active:   activeBlocks{},
		requests: map[string]*request{},
		rng:      newStream(cfg.Seed),
	}, nil
}

// supported refuses configuration this build does not implement yet, so
// that a key is never accepted and then silently ignored.
func supported(cfg wire.Config) error {
	switch {
	case cfg.Policy != wire.PolicyKV:
		return fmt.Errorf("config policy: %q is not implemented yet (only kv)", cfg.Policy)
	case cfg.QueueThreshold != nil:
		return fmt.Errorf("config queue_threshold: the policy queue is not implemented yet")
	case cfg.QueueTimeoutMS != nil:
		return fmt.Errorf("config queue_timeout_ms: the policy queue is not implemented yet")
	case cfg.PrefillLoadModel != "none":
		return fmt.Errorf("config prefill_load_model: %q is not implemented yet", cfg.PrefillLoadModel)
	case cfg.Affinity.Mode != "off":
		return fmt.Errorf("config affinity.mode: session affinity is not implemented yet")
	}
	return nil
}

// Apply steps the engine with one decoded command and fills resp. A command
// is all-or-nothing: when resp.Error is set, the engine is exactly as before.
func (e *Engine) Apply(c *wire.Command, resp *wire.Response) {
	if err := e.apply(c, resp); err != nil {
		*resp = wire.Response{Seq: resp.Seq, ID: resp.ID, Op: resp.Op, Error: err}
	} else {
		resp.OK = true
	}
	e.Status(resp)
}

// Status fills the fields every response carries from the engine's state.
func (e *Engine) Status(resp *wire.Response) {
	resp.NowMS = wire.Num(e.now)
	resp.PendingCount = 0
	resp.NextWakeupMS = nil
}

func (e *Engine) apply(c *wire.Command, resp *wire.Response) *wire.Error {
	t := e.now
	if c.NowMS != nil {
		if *c.NowMS < e.now {
			return wire.Errorf(wire.CodeClockRegression, "field \"now_ms\": %s is before the router's clock %s",
				wire.AppendNum(nil, *c.NowMS), wire.AppendNum(nil, e.now))
		}
		t = *c.NowMS
	}
	// Everything that can fail is checked as of time t before anything
	// changes, so that a failed command leaves the engine untouched.
	var adm *admission
	var err *wire.Error
	if c.Op == wire.OpPlace {
		adm, err = e.admit(c, t)
	} else {
		err = e.check(c)
	}
	if err != nil {
		return err
	}
	ev := &wire.CommandEvidence{}
	e.advance(t, ev)
	switch c.Op {
	case wire.OpWorkerReady:
		e.workerReady(c)
	case wire.OpWorkerDraining:
		e.workerDraining(e.fleet.byID[*c.WorkerID])
	case wire.OpWorkerRemoved:
		e.workerRemoved(e.fleet.byID[*c.WorkerID], ev)
	case wire.OpPlace:
		p, r := e.place(c, adm)
		resp.Placements = append(resp.Placements, p)
		e.approxRecord(adm, r, ev)
	case wire.OpObserve:
		e.observe(c.Events, ev)
	case wire.OpDispatchCommitted:
		e.requests[c.RequestID].committed = true
	case wire.OpDispatchAborted, wire.OpRequestTerminal:
		e.finish(e.requests[c.RequestID])
	case wire.OpPrefillCompleted:
		e.prefillCompleted(e.requests[c.RequestID])
	case wire.OpCancelPending:
		resp.Cancelled = new(bool) // nothing waits until the policy queue exists
	case wire.OpInspect:
		resp.State = e.inspect()
	case wire.OpTopologySettled, wire.OpAdvanceClock:
	}
	if !ev.Empty() {
		resp.Evidence = ev
	}
	return nil
}

// check validates a command other than place against the engine state,
// changing nothing.
func (e *Engine) check(c *wire.Command) *wire.Error {
	switch c.Op {
	case wire.OpWorkerReady:
		if w, ok := e.fleet.byID[*c.WorkerID]; ok {
			return wire.Errorf(wire.CodeDuplicateWorker, "worker %d is already %s; it can come back only after worker_removed", w.id, w.status)
		}
		start := first(c.DPStart, e.cfg.WorkerDefaults.DPStart, 0)
		size := first(c.DPSize, e.cfg.WorkerDefaults.DPSize, 1)
		if uint64(start)+uint64(size) > 1<<32 {
			return wire.Errorf(wire.CodeInvalidField, `field "dp_start": dp_start + dp_size exceeds the dp_rank range`)
		}
	case wire.OpWorkerDraining, wire.OpWorkerRemoved:
		_, err := e.lookupWorker(*c.WorkerID)
		return err
	case wire.OpObserve:
		if !e.cfg.KVEvents {
			return wire.Errorf(wire.CodeKVEventsDisabled, "observe needs kv_events: true; in approximate mode the index learns from placements")
		}
	case wire.OpDispatchCommitted, wire.OpDispatchAborted, wire.OpPrefillCompleted, wire.OpRequestTerminal:
		if _, ok := e.requests[c.RequestID]; !ok {
			return wire.Errorf(wire.CodeUnknownRequest, "request %q is not in flight", c.RequestID)
		}
	}
	return nil
}

// advance moves the clock to t and applies what time does.
func (e *Engine) advance(t float64, ev *wire.CommandEvidence) {
	if t == e.now {
		return
	}
	e.now = t
	ev.ApproxExpired += e.approxExpire()
}

func (e *Engine) growScratch() {
	if n := len(e.fleet.slots); n > len(e.overlap) {
		e.overlap = make([]uint32, n)
		e.hits = make([]uint32, n)
	}
}
