package replay

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/engine"
	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// Options configures one replay.
type Options struct {
	Cluster cluster.Config
	Router  protocol.Config
	Goodput SLO // the service levels a request must meet to count in request_goodput
	// Replicas runs each router as several instances (Count 0 or 1: one).
	Replicas Replicas
	// Signals is the KV event channel to the routers (the zero value: at
	// once, in order, none lost).
	Signals Signals
	// Concurrency, when above 0, replays in a closed loop: that many
	// sessions in flight (Workload.ReplayConcurrency says how).
	Concurrency int
	// StartBeforeMS, when above 0, has a closed loop start no play at or
	// past it, and Run then give only how many plays started when some
	// did not (recycle.go; Result.playsStarted).
	StartBeforeMS float64
	Commands      io.Writer // if set, every command line sent, as the router read it (the prefill router's, disaggregated)
	Responses     io.Writer // if set, every response line
	// DecodeCommands and DecodeResponses are the decode router's streams,
	// disaggregated.
	DecodeCommands, DecodeResponses io.Writer
	Progress                        func(done, total int) // called now and then
	// Records keeps each request's Record in the Result (Result.Records).
	Records bool
	// Stop, when closed, ends the run between two commands with
	// ErrStopped: the streams then hold every command sent so far, whole.
	Stop <-chan struct{}
	// ops, when set, gets the run's operation counts (tests).
	ops *replayOps
}

// replayOps are a replay's counts of work, which TestReplayOperationCounts
// bounds: its simulated caches' (the simple model's) and its KV events'
// (events sent to the router, and the blocks they name), and the ranks of
// the routers' indexes that came to keep a table entry a block.
type replayOps struct {
	cacheRuns, cacheBlocks int
	events, eventBlocks    int
	indexTables            int
}

// ErrStopped is Run's error when Options.Stop ended it.
var ErrStopped = errors.New("replay stopped before its end")

// stopEvery is how many of the loop's steps pass between looks at
// Options.Stop: a look is a channel poll, a step a fraction of a
// microsecond, and a stop is wanted within milliseconds.
const stopEvery = 256

// placement is where a pool's router put a request, and what it saw.
type placement struct {
	worker        *simWorker
	placedAt      float64
	overlap, best uint64
	// host and disk are the blocks past the device prefix the router found
	// in the chosen rank's lower tiers (disk: with external).
	host, disk uint64
	sentAt     float64 // when it was sent to the router
	replica    int     // the router replica it was sent to
	sent       bool    // it reached the pool's router
}

// simRequest is a trace request on its way through the cluster.
type simRequest struct {
	*Request
	placement           // on its worker (its prefill worker when disaggregated)
	dec       placement // on its decode worker, when disaggregated
	// work is it as its workers see it, and what they made of it. Its
	// hash ids (work.Local) are held from its first place to its end, and
	// their sequence hashes (work.Seq) from its dispatch to a worker: only
	// the requests in flight hold theirs, which at 16-token blocks are each
	// as large as the trace's ids were.
	work cluster.Request
	// on is the worker it runs on now, whose timers name it.
	on        *simWorker
	class     int // its policy class's index in the config (0 without classes)
	doneAt    float64
	islBlocks uint64
	rejected  protocol.Code // why the router turned it away; "" if it did not
	sentSeq   int           // its place was the sentSeq-th sent, from 1
	// after are the requests that wait on this one (release.go): a
	// session's next turn, an agent's dependents.
	after []edge
	// waits counts the dependencies it still waits for, readyAt is when
	// those met so far let it go.
	waits      int32
	readyAt    float64
	dispatched bool
	// play is its play (a session, or a request alone, outside agentic
	// traces), whose end frees a lane in a closed loop.
	play *playRun
	// next is the turn after it in its session (its conversation, in an
	// agentic trace), whose prompt names the blocks its output fills
	// (generated.go).
	next *simRequest
	// binding is the request whose trigger, after bindingDelay, released
	// it last (its critical dependency: agentic_metrics.go).
	binding      *simRequest
	bindingDelay float64
}

type eventKind uint8

const (
	evArrival eventKind = iota
	evPrefillDone
	evDecodeDone
	evStepDone    // an iteration engine's step ends
	evTransferred // a prompt's KV has reached the decode pool
	evSync        // a message of the replica-sync channel arrives
	evSignal      // a KV event reaches its pool's routers, late (Options.Signals)
	evRestart     // a worker's engine restarts
)

// event is a moment the host acts at. It holds no pointer (idx is a
// request's index in trace order, or a worker's in id order), so the queue
// moves plain words.
type event struct {
	at   float64
	seq  uint64
	kind eventKind
	idx  int32
}

// eventQueue orders events by time, then by when they were scheduled. It
// is a binary heap written out rather than container/heap, which boxes
// every pushed event into an allocation: that and its interface calls were
// the top of a replay's profile.
type eventQueue []event

func (q eventQueue) less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}

func (q *eventQueue) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (q *eventQueue) pop() event {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		smallest, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h.less(l, smallest) {
			smallest = l
		}
		if r < len(h) && h.less(r, smallest) {
			smallest = r
		}
		if smallest == i {
			break
		}
		h[i], h[smallest] = h[smallest], h[i]
		i = smallest
	}
	*q = h
	return top
}

// host is the simulated cluster and its conversation with the router.
type host struct {
	opt     Options
	pools   []*pool // one, aggregated; or prefill then decode
	order   []*simWorker
	events  eventQueue
	nextSeq uint64
	byID    map[string]*simRequest
	reqs    []*simRequest // in trace order: an event's idx
	starts  []*playRun    // closed loop: the plays not started yet, in order
	// playsStarted counts the closed loop's plays started.
	playsStarted int
	sent         int
	finished     int
	err          error         // the first failure to talk to a router
	syncs        []syncMessage // the sync channel's messages: an evSync's idx
	channel      channel       // the KV event channel, when it is not perfect
	faulty       bool          // the channel is not perfect (Options.Signals)
	syncRNG      *rand.Rand    // which messages the channel drops
	// events and eventBlocks count the KV events sent to the router and
	// the blocks they name (a replica's copy once).
	kvEvents, kvEventBlocks int
	// loraCapacity is what each worker_ready says of the worker's
	// adapters: nil when no request runs under one, so that a run without
	// adapters sends what it always did.
	loraCapacity *uint32
	// hardware are the aggregated cluster's pools of identical workers,
	// each with the Config its workers run under (the cluster's own, for
	// a homogeneous one).
	hardware []cluster.WorkerPool
}

// pool is workers behind their router: the whole cluster, or, when prefill
// and decode are disaggregated, each role's, as Dynamo runs one router per
// role. A router may run as several replicas (several frontends), each
// with its own view of the workers.
type pool struct {
	role     protocol.Role // "" for the aggregated cluster
	replicas []*replica
	workers  map[rankKey]*simWorker
	order    []*simWorker // in (id, rank) order
}

// poolSpec is one pool to bring up: its role, its workers, its streams.
type poolSpec struct {
	role                protocol.Role
	workers             int
	commands, responses io.Writer
}

// poolSpecs are the pools the cluster runs: the whole cluster, or a
// prefill pool (on opt's streams) and a decode pool (on its decode
// streams).
func poolSpecs(opt Options) []poolSpec {
	c := &opt.Cluster
	if !c.Disaggregated() {
		return []poolSpec{{"", c.Workers, opt.Commands, opt.Responses}}
	}
	return []poolSpec{{protocol.RolePrefill, c.PrefillWorkers, opt.Commands, opt.Responses},
		{protocol.RoleDecode, c.DecodeWorkers, opt.DecodeCommands, opt.DecodeResponses}}
}

// replica is one router instance of a pool, and what the host knows of it
// from its answers.
type replica struct {
	pool    *pool
	index   int
	router  *router
	waiting map[string]*simRequest // sent to it, neither placed nor rejected yet
	placed  []*simRequest          // dispatch queue of its placements
	now     float64                // its clock, as its last answer gave it
	wakeup  *float64
	pending int
	// eventsApplied are the KV events it applied, as its answers to
	// observe say.
	eventsApplied int
	// eventIDGaps and eventIDRepeats are the event ids its answers said
	// did not follow the last one on their rank.
	eventIDGaps, eventIDRepeats int
	// synced are the requests other replicas placed that it booked from
	// the sync channel, and has not seen end.
	synced map[string]bool
}

// Run replays the trace and reports what routing did.
func Run(trace []Request, opt Options) (*Result, error) {
	start := time.Now()
	h := &host{opt: opt, byID: map[string]*simRequest{}}
	h.hardware = h.opt.Cluster.WorkerPools()
	h.syncRNG = rand.New(rand.NewPCG(opt.Router.Seed, 0x5ec))
	h.channel.rng = rand.New(rand.NewPCG(opt.Router.Seed, signalStream))
	h.faulty = !opt.Signals.Perfect()
	if slices.ContainsFunc(trace, func(r Request) bool { return r.LoRAName != "" }) {
		h.loraCapacity = ptr(opt.Cluster.LoRACapacity())
	}
	for _, spec := range poolSpecs(opt) {
		p := &pool{role: spec.role, workers: map[rankKey]*simWorker{}}
		h.pools = append(h.pools, p)
		for i := range max(opt.Replicas.Count, 1) {
			// Each replica draws its own random stream, as separate
			// frontends do.
			cfg := opt.Router
			cfg.Seed += uint64(i)
			eng, err := engine.New(cfg)
			if err != nil {
				return nil, err
			}
			eng.TrustChainedHashes()
			rp := &replica{pool: p, index: i, waiting: map[string]*simRequest{}, synced: map[string]bool{}}
			if i == 0 { // the streams are the first replica's
				rp.router = newRouter(eng, spec.commands, spec.responses)
			} else {
				rp.router = newRouter(eng, nil, nil)
			}
			p.replicas = append(p.replicas, rp)
			// The stream opens with its config, so that it replays alone.
			h.send(rp, &protocol.Command{Op: protocol.OpConfig, Config: wire.ConfigCommand(cfg)})
		}
		h.announce(p, spec.workers)
	}
	for i := range trace {
		r := &simRequest{Request: &trace[i]}
		r.work.Tag, r.work.InputTokens = int32(len(h.reqs)), r.InputTokens
		h.reqs = append(h.reqs, r)
		if _, dup := h.byID[r.ID]; dup {
			return nil, fmt.Errorf("request id %s appears twice", r.ID)
		}
		r.islBlocks = (r.InputTokens + opt.Cluster.BlockSize - 1) / opt.Cluster.BlockSize
		var err error
		if r.class, err = classOf(&opt.Router, r.PolicyClass); err != nil {
			return nil, fmt.Errorf("request %s: field \"policy_class\": %w", r.ID, err)
		}
		h.byID[r.ID] = r
	}
	for i, rs := range opt.Signals.Restarts {
		if h.pools[0].workers[rankKey{rs.Worker, 0}] == nil {
			return nil, fmt.Errorf("an engine restart of worker %d, which the cluster has not (its workers are 1 to %d)", rs.Worker, opt.Cluster.Workers)
		}
		h.nextSeq++
		h.events.push(event{at: rs.AtMS, seq: h.nextSeq, kind: evRestart, idx: int32(i)})
	}
	if err := h.link(trace); err != nil {
		return nil, err
	}
	// The streams are flushed even after a failure: they show what led to it.
	err := h.loop(len(trace))
	for _, p := range h.pools {
		for _, rp := range p.replicas {
			err = errors.Join(err, rp.router.flush())
		}
	}
	if err != nil {
		return nil, err
	}
	if len(h.starts) > 0 { // stopped at StartBeforeMS: the plays that ran are what counts
		return &Result{playsStarted: h.playsStarted}, nil
	}
	if opt.ops != nil {
		for _, w := range h.order {
			n := w.Counts()
			opt.ops.cacheRuns += n.CacheRunOps
			opt.ops.cacheBlocks += n.CacheBlockOps
		}
		opt.ops.events, opt.ops.eventBlocks = h.kvEvents, h.kvEventBlocks
		for _, p := range h.pools {
			for _, rp := range p.replicas {
				opt.ops.indexTables += rp.router.eng.IndexTables()
			}
		}
	}
	return h.result(trace, time.Since(start)), nil
}

// announce brings up the pool's workers, each with its DP ranks.
// announce brings up the pool's workers, each with its DP ranks: an
// aggregated cluster's hardware pools one after another, ids from 1.
func (h *host) announce(p *pool, workers int) {
	pools := []cluster.WorkerPool{{Workers: workers, Config: &h.opt.Cluster}}
	if p.role == "" {
		pools = h.hardware
	}
	dp := uint32(max(h.opt.Cluster.DPSize, 1))
	id := uint64(0)
	for k, wp := range pools {
		c := wp.Config
		mbt, kv, seqs := c.MaxNumBatchedTokens, uint64(c.TotalKVBlocks), uint64(c.MaxNumSeqs)
		for range wp.Workers {
			id++
			for rank, model := range cluster.NewRanks(c, id, dp) {
				rank := uint32(rank)
				w := &simWorker{Worker: model, id: id, dpRank: rank, idx: int32(len(h.order)), pool: p,
					hardware: k, kvBlocks: c.TotalKVBlocks}
				p.workers[rankKey{id, rank}] = w
				p.order, h.order = append(p.order, w), append(h.order, w)
			}
			// The worker's sizes are each rank's.
			cmd := &protocol.Command{Op: protocol.OpWorkerReady, NowMS: ptr(0.0), WorkerID: ptr(id), Role: p.role,
				TotalKVBlocks: &kv, MaxNumBatchedTokens: &mbt, MaxNumSeqs: &seqs, MaxGPULoRACount: h.loraCapacity}
			if dp > 1 {
				cmd.DPSize = &dp
			}
			h.toAll(p, cmd)
		}
	}
}

// stopped reports whether Options.Stop is closed.
func (h *host) stopped() bool {
	select {
	case <-h.opt.Stop:
		return true
	default:
		return false
	}
}

func (h *host) schedule(at float64, kind eventKind, r *simRequest) {
	if at > protocol.MaxNumber && h.err == nil {
		h.err = fmt.Errorf("request %s: simulated time would reach %.0f ms, past the router's clock (2^53 ms): the trace's timestamps and delays, --arrival-speedup-ratio, or a slow --worker-prefill-tokens-per-ms take it too far", r.ID, at)
	}
	h.nextSeq++
	h.events.push(event{at: at, seq: h.nextSeq, kind: kind, idx: r.work.Tag})
}

// loop runs events in time order, waking the router at next_wakeup_ms
// whenever that comes first.
func (h *host) loop(total int) error {
	for steps := 0; ; steps++ {
		if h.opt.Progress != nil && steps%512 == 0 {
			h.opt.Progress(h.finished, total)
		}
		if steps%stopEvery == 0 && h.stopped() {
			return ErrStopped
		}
		next := math.Inf(1)
		if len(h.events) > 0 {
			next = h.events[0].at
		}
		if h.err != nil {
			return h.err
		}
		if rp := h.wakesFirst(); rp != nil && *rp.wakeup <= next {
			h.send(rp, &protocol.Command{Op: protocol.OpAdvanceClock, NowMS: ptr(*rp.wakeup)})
			continue
		}
		if len(h.events) == 0 {
			if h.giveUp() {
				continue
			}
			break
		}
		ev := h.events.pop()
		switch ev.kind {
		case evArrival:
			h.arrive(ev.at, h.reqs[ev.idx])
		case evPrefillDone, evDecodeDone:
			r := h.reqs[ev.idx]
			h.fire(ev.at, r.on, cluster.Timer{At: ev.at, Kind: timerOf[ev.kind], Req: &r.work})
		case evTransferred:
			h.place(h.pools[1], ev.at, h.reqs[ev.idx])
		case evSync:
			h.deliver(ev.at, ev.idx)
		case evSignal:
			h.receive(ev.at, ev.idx)
		case evRestart:
			h.restart(ev.at, ev.idx)
		case evStepDone:
			if w := h.order[ev.idx]; ev.seq == w.stepSeq { // else stale: its run was cut
				h.fire(ev.at, w, cluster.Timer{At: ev.at, Kind: cluster.StepDone})
			}
		}
	}
	if h.opt.Progress != nil {
		h.opt.Progress(h.finished, total)
	}
	for _, p := range h.pools {
		for _, rp := range p.replicas {
			if len(rp.waiting) > 0 {
				return fmt.Errorf("%d requests still wait in the router, and cancelling them failed", len(rp.waiting))
			}
		}
	}
	// Nothing is left to happen: every request ended (but those of the
	// plays Options.StartBeforeMS left unstarted), and no router books one
	// still. Else the simulation, not the trace, is wrong.
	for _, p := range h.starts {
		total -= p.left
	}
	if h.finished != total {
		return fmt.Errorf("%d of %d requests never ended: a simulated worker stalled", total-h.finished, total)
	}
	for _, p := range h.pools {
		for _, rp := range p.replicas {
			if n := rp.router.booked(); n > 0 {
				return fmt.Errorf("router replica %d (pool %q) still books %d requests after every one ended", rp.index, p.role, n)
			}
		}
	}
	return nil
}

// wakesFirst is the router replica that asked to be woken first, if any.
func (h *host) wakesFirst() *replica {
	var first *replica
	for _, p := range h.pools {
		for _, rp := range p.replicas {
			if rp.wakeup != nil && (first == nil || *rp.wakeup < *first.wakeup) {
				first = rp
			}
		}
	}
	return first
}

// waitingAtEnd is the rejection reason of a request the router still held
// when nothing left in the run could release it (a role no worker has,
// with a queue and no timeout): a client would give up, and the host
// cancels it.
const waitingAtEnd protocol.Code = "waiting_at_end"

// giveUp cancels, in the order they were sent, the requests the router
// holds when nothing else will happen, and reports whether it did.
func (h *host) giveUp() bool {
	gave := false
	for _, p := range h.pools {
		for _, rp := range p.replicas {
			stuck := slices.SortedFunc(maps.Values(rp.waiting), func(a, b *simRequest) int { return a.sentSeq - b.sentSeq })
			for _, r := range stuck {
				h.send(rp, &protocol.Command{Op: protocol.OpCancelPending, RequestID: r.ID})
				if h.err != nil {
					return false
				}
				delete(rp.waiting, r.ID)
				r.rejected, r.doneAt = waitingAtEnd, rp.now
				h.ended(rp.now, r)
				gave = true
			}
		}
	}
	return gave
}

func (h *host) arrive(t float64, r *simRequest) {
	r.Arrival = t
	h.sent++
	r.sentSeq = h.sent
	h.place(h.pools[0], t, r)
}

// place asks the pool's router (the replica r falls to) to place r.
func (h *host) place(p *pool, t float64, r *simRequest) {
	if r.work.Local == nil { // its first place: its ids, packed in the trace, until its end
		r.work.Local = r.HashIDs
		if r.packed != nil { // a read trace's, one id a block
			r.work.Local = r.appendIDs(make([]protocol.LocalBlockHash, 0, r.islBlocks))
		}
	}
	ph := r.phase(p)
	ph.replica = h.assign(p, r)
	rp := p.replicas[ph.replica]
	rp.waiting[r.ID] = r
	ph.sentAt, ph.sent = t, true
	c := &protocol.Command{Op: protocol.OpPlace, NowMS: ptr(t), RequestID: r.ID, InputTokens: &r.InputTokens,
		OutputTokens: &r.OutputTokens, BlockHashes: r.hashes()}
	if r.Session != "" {
		c.SessionID = &r.Session
	}
	if r.ParentSession != "" {
		c.ParentSessionID = &r.ParentSession
	}
	if r.Agent != nil { // its identity in its play, keyed as Dynamo's adapters key it
		session, parent := agentKeys(r.Agent, h.opt.Router.Affinity.Key)
		c.SessionID, c.ParentSessionID = orNil(session), orNil(parent)
	}
	c.Priority, c.StrictPriority, c.Role, c.PolicyClass, c.LoRAName = r.Priority, r.StrictPriority, r.Role, r.policyClass(), r.loraName()
	if p.role != "" {
		c.Role = p.role
	}
	h.send(rp, c)
}

// send sends one command to a router replica and acts on the response:
// placements are dispatched to their workers, rejections end their
// requests. After a failure it sends nothing more, and the loop returns
// the error.
func (h *host) send(rp *replica, c *protocol.Command) {
	if h.err != nil {
		return
	}
	resp, err := rp.router.send(c)
	defer rp.router.release(resp)
	if err == nil && resp.Error != nil {
		if c.Op == protocol.OpPlace && turnedAway[resp.Error.Code] {
			// A refused command leaves the router's clock where it was:
			// the request ends when it arrived.
			r := h.byID[c.RequestID]
			r.rejected, r.doneAt = resp.Error.Code, *c.NowMS
			delete(rp.waiting, r.ID)
			h.ended(r.doneAt, r)
		} else {
			err = fmt.Errorf("the replay host sent a bad command: %s: %s", c.Op, resp.Error.Message)
		}
	}
	if err != nil {
		h.err = err
		return
	}
	h.answered(rp, c, resp, "")
}

// answered acts on a replica's answer to c: the placements it released are
// dispatched (but for synced, a booking from the sync channel, which is
// another replica's to run), the rejections end their requests.
func (h *host) answered(rp *replica, c *protocol.Command, resp *protocol.Response, synced string) {
	p := rp.pool
	if resp.Evidence != nil && resp.Evidence.EventsApplied != nil {
		rp.eventsApplied += *resp.Evidence.EventsApplied
		rp.eventIDGaps += len(resp.Evidence.EventIDGaps)
		rp.eventIDRepeats += len(resp.Evidence.EventIDRepeats)
	}
	t := float64(resp.NowMS)
	rp.now = t
	rp.wakeup = nil
	if resp.NextWakeupMS != nil {
		w := float64(*resp.NextWakeupMS)
		rp.wakeup = &w
	}
	rp.pending = resp.PendingCount
	for _, pl := range resp.Placements {
		if pl.RequestID == synced {
			rp.synced[synced] = true
			continue
		}
		r := h.byID[pl.RequestID]
		delete(rp.waiting, r.ID)
		ph := r.phase(p)
		ph.worker = p.workers[rankKey{pl.WorkerID, pl.DPRank}]
		ph.placedAt, ph.overlap, ph.best = t, pl.OverlapBlocks, pl.BestAvailableOverlapBlocks
		ph.host, ph.disk = pl.HostOverlapBlocks, pl.DiskOverlapBlocks
		rp.placed = append(rp.placed, r)
		if len(p.replicas) > 1 { // the others learn of the booking as a pinned place
			// Its class's busy threshold decides whether the others can
			// book it at once.
			h.sync(rp, &protocol.Command{Op: protocol.OpPlace, RequestID: r.ID, InputTokens: &r.InputTokens,
				OutputTokens: &r.OutputTokens, BlockHashes: r.hashes(), WorkerID: &pl.WorkerID, DPRank: &pl.DPRank, Role: p.role,
				PolicyClass: r.policyClass(), LoRAName: r.loraName()}, t)
		}
	}
	for _, rj := range resp.Rejected {
		r := h.byID[rj.RequestID]
		delete(rp.waiting, r.ID)
		r.rejected, r.doneAt = rj.Code, t
		h.ended(t, r)
	}
	// Dispatch outside the loop above: a commit may itself release requests.
	for len(rp.placed) > 0 && c.Op != protocol.OpDispatchCommitted {
		r := rp.placed[0]
		rp.placed = rp.placed[1:]
		h.send(rp, &protocol.Command{Op: protocol.OpDispatchCommitted, NowMS: ptr(t), RequestID: r.ID})
		h.dispatch(t, r.phase(p).worker, r)
	}
}

// toAll sends c to every replica of the pool: the config, the workers, the
// KV events (each replica subscribes to every worker's).
func (h *host) toAll(p *pool, c *protocol.Command) {
	for _, rp := range p.replicas {
		h.send(rp, c)
	}
}

// toOwner sends one of r's lifecycle commands to the replica that placed
// it, and through the sync channel to the others.
func (h *host) toOwner(p *pool, r *simRequest, c *protocol.Command) {
	rp := p.replicas[r.phase(p).replica]
	h.send(rp, c)
	if len(p.replicas) > 1 {
		h.sync(rp, &protocol.Command{Op: c.Op, RequestID: c.RequestID}, *c.NowMS)
	}
}

// dispatch hands r to its worker.
func (h *host) dispatch(t float64, w *simWorker, r *simRequest) {
	if r.work.Seq == nil { // its first worker (a decode worker has them from its prefill)
		r.work.Seq = kvindex.SequenceHashes(r.work.Local)
		h.generated(r)
	}
	r.on = w
	if !r.dispatched {
		r.dispatched = true
		h.release(t, r, OnDispatch)
	}
	decode := w.pool.role == protocol.RoleDecode
	if !w.Enqueue(&r.work, h.outputsOn(w.pool, r), decode) {
		// Its prompt and output need more blocks than the worker has: no
		// engine could run it. The router's booking is released.
		r.rejected, r.doneAt = tooLongForCache, t
		h.toOwner(w.pool, r, &protocol.Command{Op: protocol.OpRequestTerminal, NowMS: ptr(t), RequestID: r.ID})
		h.ended(t, r)
		return
	}
	if decode {
		// Its prompt's KV is here: no prefill is left to book.
		h.toOwner(w.pool, r, &protocol.Command{Op: protocol.OpPrefillCompleted, NowMS: ptr(t), RequestID: r.ID})
	}
	h.start(t, w)
}

// outputsOn is how many of r's output tokens a worker of pool p makes: a
// prefill worker the first, a decode worker the rest.
func (h *host) outputsOn(p *pool, r *simRequest) uint64 {
	if p.role == protocol.RolePrefill {
		return 1
	}
	return r.OutputTokens
}

// tooLongForCache is the rejection reason of a request whose prompt and
// output need more KV blocks than a worker has.
const tooLongForCache protocol.Code = "exceeds_kv_cache"

// timerOf is the worker timer an event kind ends.
var timerOf = [...]cluster.TimerKind{evPrefillDone: cluster.PrefillDone, evDecodeDone: cluster.DecodeDone, evStepDone: cluster.StepDone}

// start has the worker start what it can at t.
func (h *host) start(t float64, w *simWorker) {
	for {
		res, more := w.Start(t)
		h.apply(t, w, res)
		if !more {
			return
		}
	}
}

// fire ends a timer of the worker's at t, then has it start what it can.
func (h *host) fire(t float64, w *simWorker, tm cluster.Timer) {
	h.apply(t, w, w.Fire(t, tm))
	h.start(t, w)
}

// apply acts on what a worker did at t: its KV events go to the router,
// its first tokens and ends to the request's router, and the timer it asks
// for is scheduled.
func (h *host) apply(t float64, w *simWorker, res cluster.Result) {
	p := w.pool
	for i := range res.Events {
		h.observe(t, w, &res.Events[i])
	}
	for _, x := range res.First {
		r := h.reqs[x.Tag]
		h.toOwner(p, r, &protocol.Command{Op: protocol.OpPrefillCompleted, NowMS: ptr(t), RequestID: r.ID})
	}
	for _, x := range res.Finished {
		r := h.reqs[x.Tag]
		h.toOwner(p, r, &protocol.Command{Op: protocol.OpRequestTerminal, NowMS: ptr(t), RequestID: r.ID})
		if p.role == protocol.RolePrefill && r.OutputTokens > 1 {
			// Its KV goes to a decode worker, which makes the rest.
			h.schedule(t+h.opt.Cluster.TransferMS(r.InputTokens), evTransferred, r)
			continue
		}
		r.doneAt = t
		h.ended(t, r)
	}
	switch tm := res.Timer; tm.Kind {
	case cluster.PrefillDone:
		h.schedule(tm.At, evPrefillDone, h.reqs[tm.Req.Tag])
	case cluster.DecodeDone:
		h.schedule(tm.At, evDecodeDone, h.reqs[tm.Req.Tag])
	case cluster.StepDone:
		// An end scheduled before it, for a run since cut, goes stale.
		h.nextSeq++
		w.stepSeq = h.nextSeq
		h.events.push(event{at: tm.At, seq: h.nextSeq, kind: evStepDone, idx: w.idx})
	}
}

// turnedAway are the place errors a serving frontend answers with a
// refusal to its client (Dynamo's HTTP 529 when every worker is busy), not
// a host's mistake: the replay counts the request as rejected and goes on.
var turnedAway = map[protocol.Code]bool{
	protocol.CodeAllWorkersBusy:          true,
	protocol.CodeNoEligibleWorker:        true,
	protocol.CodePinnedWorkerUnavailable: true,
	protocol.CodePinnedWorkerOverloaded:  true,
	protocol.CodeAffinityConflict:        true,
}

// observe reports KV events to the router, unless it runs in approximate
// mode: there a host has no event stream, and the router learns from its
// own placements.
func (h *host) observe(t float64, w *simWorker, ev *protocol.KVEvent) {
	if !h.opt.Router.KVEvents {
		return
	}
	h.kvEvents++
	switch d := ev.Data.(type) {
	case protocol.Stored:
		h.kvEventBlocks += len(d.Blocks)
	case protocol.Removed:
		h.kvEventBlocks += len(d.BlockHashes)
	}
	if h.faulty {
		h.transmit(t, w, ev)
		return
	}
	if len(w.pool.replicas) > 1 {
		// The simple model reuses an event's block slices: one replica's
		// answer can admit more on w before the next replica has the event.
		switch d := ev.Data.(type) {
		case protocol.Stored:
			d.Blocks = slices.Clone(d.Blocks)
			ev.Data = d
		case protocol.Removed:
			ev.Data = protocol.Removed{BlockHashes: slices.Clone(d.BlockHashes)}
		}
	}
	h.toAll(w.pool, &protocol.Command{Op: protocol.OpObserve, NowMS: ptr(t), Events: []protocol.KVEvent{*ev}})
}

// hashes are r's block hashes for a place command: none when it has none.
func (r *simRequest) hashes() []protocol.LocalBlockHash {
	if len(r.work.Local) == 0 {
		return nil
	}
	return r.work.Local
}

// policyClass is r's policy_class for a place command: none when it names
// none, so that a trace without classes sends what it always did.
func (r *simRequest) policyClass() *string {
	if r.PolicyClass == "" {
		return nil
	}
	return &r.PolicyClass
}

// loraName is r's lora_name for a place command: none when it runs on the
// base model, so that a trace without adapters sends what it always did.
func (r *simRequest) loraName() *string {
	if r.LoRAName == "" {
		return nil
	}
	return &r.LoRAName
}

// phase is r's placement in pool p.
func (r *simRequest) phase(p *pool) *placement {
	if p.role == protocol.RoleDecode {
		return &r.dec
	}
	return &r.placement
}

// ended releases what waited on r's end; in a closed loop, a play that
// ended makes room for the next one.
func (h *host) ended(t float64, r *simRequest) {
	h.finished++
	r.work.Drop()
	if !r.dispatched { // turned away: what waited on its dispatch goes now
		h.release(t, r, OnDispatch)
	}
	h.release(t, r, OnCompletion)
	if r.play.left--; r.play.left == 0 && len(h.starts) > 0 && (h.opt.StartBeforeMS == 0 || t < h.opt.StartBeforeMS) {
		h.startPlay(t, h.starts[0])
		h.starts = h.starts[1:]
	}
}

func ptr[T any](v T) *T { return &v }

// simWorker is one rank of the simulated cluster, as the host drives it.
type simWorker struct {
	cluster.Worker
	id     uint64
	dpRank uint32
	idx    int32 // in (pool, id, rank) order
	pool   *pool
	// stepSeq is the host's event for the end of its step under way: an
	// earlier one is stale.
	stepSeq uint64
	// hardware is its pool's index in host.hardware (0 disaggregated),
	// kvBlocks its KV cache's blocks.
	hardware int
	kvBlocks int
}

// rankKey names a simulated rank: a worker and its DP rank.
type rankKey struct {
	worker uint64
	rank   uint32
}
