package cluster

import "github.com/offline-router/offline-router/internal/protocol"

// Worker is one simulated rank (a worker's DP rank) under its worker
// model. The host drives it: Enqueue a dispatched request, Start whatever
// can start, Fire each Timer it asked for when its time comes; each call
// says in a Result what came of it. A Result is the host's until its next
// call on the same worker that returns one.
type Worker interface {
	// Enqueue takes r, dispatched here, to make outputs tokens (received:
	// its prompt's KV came from a prefill worker, which made its first
	// token); false if it could never fit this worker's cache, which then
	// holds nothing of it.
	Enqueue(r *Request, outputs uint64, received bool) bool
	// Start begins at t what can begin: the simple model admits one
	// waiting request (more: call again), the iteration engine starts a
	// step, or cuts a run of decode steps short for a request just
	// enqueued to join the next.
	Start(t float64) (res Result, more bool)
	// Fire applies the end of a Timer the worker asked for, at its time t.
	Fire(t float64, tm Timer) Result
	// Counts are what the worker did over the run.
	Counts() Counts
	// Usage is what its busy share and KV usage are made from.
	Usage() Usage
}

// Restarter is a worker whose engine can restart (the iteration engine):
// Restart clears its cache at t and says so with a cleared event, its
// event ids starting again from 1.
type Restarter interface {
	Restart(t float64) Result
}

// Result is what a worker did in one call, in the order the host acts on
// it: the KV events to publish, the requests whose first token it made,
// those that ended here, and the timer it asks for.
type Result struct {
	Events   []protocol.KVEvent
	First    []*Request
	Finished []*Request
	Timer    Timer
}

// TimerKind is what a Timer ends.
type TimerKind uint8

const (
	NoTimer TimerKind = iota
	// PrefillDone and DecodeDone end a request's prefill or decode (the
	// simple model); each is its own.
	PrefillDone
	DecodeDone
	// StepDone ends the step (or run of steps) under way (the iteration
	// engine): the latest asked for replaces any before it.
	StepDone
)

// Timer is a moment a worker asks to be woken at.
type Timer struct {
	At   float64
	Kind TimerKind
	Req  *Request // PrefillDone and DecodeDone's
}

// Counts are a worker's totals over a run.
type Counts struct {
	Preemptions int // running requests that gave their blocks back, to be computed again
	Evicted     int // cached blocks evicted
	// CacheRunOps and CacheBlockOps are the simple model's cache work (run
	// and block operations: runcache.go), which the replay's operation
	// counts bound.
	CacheRunOps, CacheBlockOps int
	// Tiers are its lower tiers', in walk order; nil without.
	Tiers []TierCounts
	// LockstepWaitMS is the step time a rank of a DP-attention worker
	// waited on its slowest sibling (its whole step when it had none).
	LockstepWaitMS float64
}

// newWorker is rank rank of worker id under cfg's worker model, stepping alone.
func newWorker(cfg *Config, id uint64, rank uint32) Worker {
	pub := publisher{id: id, rank: rank}
	if cfg.Engine == EngineIteration {
		return newIterEngine(cfg, &cfg.Profile.Step, pub)
	}
	return newSimpleWorker(cfg, pub)
}

// publisher numbers a rank's KV events, as its engine's publisher does.
type publisher struct {
	id      uint64
	rank    uint32
	eventID uint64
}

// event is data as the rank's next event on the device tier.
func (p *publisher) event(data protocol.EventData) protocol.KVEvent {
	return p.eventOn(protocol.TierDevice, data)
}

// eventOn is data as the rank's next event, on tier.
func (p *publisher) eventOn(tier string, data protocol.EventData) protocol.KVEvent {
	p.eventID++
	return protocol.KVEvent{WorkerID: p.id, DPRank: p.rank, StorageTier: tier, EventID: p.eventID, Data: data}
}
