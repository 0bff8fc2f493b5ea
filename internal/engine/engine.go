// Package engine is the router's deterministic state machine. Like a raft
// node it is stepped by messages (protocol commands) on explicit virtual time,
// and everything a step did is collected in one place before it becomes the
// response. It does no I/O, reads no wall clock and starts no goroutines.
package engine

import (
	"slices"

	"github.com/offline-router/offline-router/internal/active"
	"github.com/offline-router/offline-router/internal/affinity"
	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/selector"
)

// Engine routes requests to workers. Not safe for concurrent use.
type Engine struct {
	cfg       protocol.Config
	now       float64
	fleet     fleet
	index     *kvindex.Index
	approx    *approxIndex
	routed    *routedTree     // sglang_cache_aware's own tree; nil for other policies
	predicted *predictedIndex // predict-on-route's side index; nil when off
	active    *active.Tree
	requests  map[string]*request
	queue     policyQueue
	bindings  *affinity.Table[*rank]
	held      int // requests waiting for a staged binding
	rng       *stream
	draws     *selectionDraws    // rng and the round_robin counter, as selection takes them
	params    [3]selector.Params // each role's: its worker-selection instance (by roleIndex)
	out       output             // what the current command did
	// adapterClock counts adapter uses, so that a load evicts the least
	// recently used idle adapter.
	adapterClock uint64
	// adapterEpoch moves whenever a LoRA request's best fit may change
	// (adaptersChanged).
	adapterEpoch uint64
	// tested is the class head the drain's round robin tested last, and
	// what admitting it found.
	tested struct {
		cq   *classQueue
		cs   candidateSet
		none *protocol.Error
	}

	// Scratch reused from command to command; overlap and hits are
	// indexed by rank slot.
	overlap  []uint32
	matched  []kvindex.RankID // the ranks the last overlap walk gave an overlap (findOverlap)
	tiers    lowerTiers       // the lower tiers' indexes, and what the last walk found there
	hits     []uint32
	walk     active.Walk          // where the active-block count stopped, for booking
	cands    []selector.Candidate // the candidates of one placement
	scores   []selector.Score     // and their scores
	costs    []float64            // or their costs alone (selectCheapest)
	bucketed bucketScratch        // selectBucketed's
	blocks   []kvindex.Block      // blocks to store (an event's, or an approximate placement's), as the index takes them
}

// output collects what one command did, in the order it happened.
type output struct {
	released []protocol.Placement // placed from the queue
	rejected []protocol.Rejection
	queued   []string
	ev       protocol.CommandEvidence
}

// New returns an engine at time 0 with no workers.
func New(cfg protocol.Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rng := newStream(cfg.Seed)
	return &Engine{
		cfg:       cfg,
		fleet:     newFleet(),
		index:     kvindex.New(),
		approx:    newApproxIndex(),
		routed:    newRoutedTree(&cfg),
		predicted: newPredictedIndex(&cfg),
		active:    active.New(),
		requests:  map[string]*request{},
		queue:     newPolicyQueue(flowClasses(&cfg)),
		bindings:  affinity.NewTable[*rank](cfg.Affinity.TTLMS),
		rng:       rng,
		draws:     &selectionDraws{rng: rng},
		params:    [3]selector.Params{selector.ParamsOf(&cfg, protocol.RoleAggregated), selector.ParamsOf(&cfg, protocol.RoleDecode), selector.ParamsOf(&cfg, protocol.RolePrefill)},
	}, nil
}

// TrustChainedHashes tells a new engine that its host's block hashes are
// chains of local hashes (kvindex.SequenceHashes), so that one names one
// prefix, and that its stored events carry their parent's path
// (protocol.Stored.Path), as the replay's do: the device index then keeps
// no per-rank table of block hashes (kvindex.Index.Lazy), and a stored or
// removed chain costs a few edges, not a table entry a block.
func (e *Engine) TrustChainedHashes() { e.index.Lazy() }

// IndexTables is how many ranks of the device index keep a table of block
// hashes (each of them, unless TrustChainedHashes; else those whose events
// needed one): what a replay's operation count bounds.
func (e *Engine) IndexTables() int { return e.index.Tables() }

// paramsOf is what selection reads for a request of role.
func (e *Engine) paramsOf(role protocol.Role) *selector.Params { return &e.params[roleIndex(role)] }

// paramsFor is what selection reads for d: its role's, or its own where
// its router_config_override changes them.
func (e *Engine) paramsFor(d *demand) *selector.Params {
	if d.params != nil {
		return d.params
	}
	return e.paramsOf(d.role)
}

func (e *Engine) growScratch() {
	// Capacity grows as append's does, so a fleet of n workers coming up one
	// by one costs O(n) in all; the length stays n, which the walks clear.
	if n := len(e.fleet.slots); n > len(e.overlap) {
		e.overlap = slices.Grow(e.overlap[:0], n)[:n]
		e.hits = slices.Grow(e.hits[:0], n)[:n]
	}
}
