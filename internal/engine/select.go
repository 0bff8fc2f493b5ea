package engine

import (
	"math"
	"slices"

	"github.com/offline-router/offline-router/internal/affinity"
	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// demand is what a place command asks for, fixed when it arrives: its
// blocks and its constraints. Building it changes nothing.
type demand struct {
	id            string
	role          protocol.Role
	isl           uint64
	islBlocks     uint64
	local         []protocol.LocalBlockHash // the index and active-block walks
	seq           []protocol.SequenceHash   // block addresses in approximate mode
	privateBlocks uint64                    // blocks without a hash, never shared
	allowed       []uint64
	pin           *uint64
	pinRank       *uint32
	arrival       float64
	tier          int64
	priority      float64       // seconds of queue jump
	key           *affinity.Key // session affinity key, if any
	bound         *binding      // the bound binding it arrived under, if any
	hardBound     bool          // ... and it must go to that binding's rank
}

// candidateSet is the ranks a demand may go to at some time, in
// (worker_id, dp_rank) order, and what the filters dropped.
type candidateSet struct {
	ranks       []*rank
	filtered    protocol.FilterCounts
	filteredSet []protocol.FilteredRank // only with evidence "full"
}

// newDemand checks a place command arriving at time t and derives its
// blocks. An id stays taken until the router has reported the request's end
// (it ended, was cancelled or timed out): the clock moving to t can place a
// waiting request as well as time it out, so the check is against the state
// before the clock moves.
func (e *Engine) newDemand(c *protocol.Command, t float64) (*demand, *protocol.Error) {
	if _, ok := e.requests[c.RequestID]; ok {
		return nil, protocol.Errorf(protocol.CodeDuplicateRequest, "request %q is already in flight", c.RequestID)
	}
	bs := e.cfg.BlockSize
	d := &demand{
		id: c.RequestID, role: firstRole(c.Role, "", protocol.RoleAggregated), isl: c.ISL(),
		allowed: c.AllowedWorkers, pin: c.WorkerID, pinRank: c.DPRank, arrival: t,
	}
	d.key = e.affinityKey(c, d.role)
	if err := e.planAffinity(d, t); err != nil {
		return nil, err
	}
	d.hardBound = d.bound != nil && e.hardAffinity()
	if c.StrictPriority != nil {
		d.tier = *c.StrictPriority
	}
	if c.Priority != nil {
		d.priority = *c.Priority
	}
	d.islBlocks = (d.isl + bs - 1) / bs
	switch {
	case c.Tokens != nil:
		d.local = kvindex.BlockHashes(c.Tokens, int(bs))
	case c.BlockHashes != nil:
		if uint64(len(c.BlockHashes)) > d.islBlocks {
			return nil, protocol.Errorf(protocol.CodeInvalidField, "field \"block_hashes\": %d hashes, but input_tokens %d at block_size %d makes only %d blocks",
				len(c.BlockHashes), d.isl, bs, d.islBlocks)
		}
		d.local = c.BlockHashes
	}
	switch {
	case c.SequenceHashes != nil:
		d.seq = c.SequenceHashes
	case !e.cfg.KVEvents:
		d.seq = kvindex.SequenceHashes(d.local)
	}
	d.privateBlocks = d.islBlocks - uint64(len(d.local))
	return d, nil
}

// checkPin reports why a pinned demand cannot go to its worker now.
func (e *Engine) checkPin(d *demand) *protocol.Error {
	if d.pin == nil {
		return nil
	}
	id := *d.pin
	w, ok := e.fleet.byID[id]
	switch {
	case !ok && e.fleet.removed[id]:
		return protocol.Errorf(protocol.CodePinnedWorkerUnavailable, "pinned worker %d was removed", id)
	case !ok:
		return protocol.Errorf(protocol.CodePinnedWorkerUnavailable, "pinned worker %d never became ready", id)
	case w.status != statusReady:
		return protocol.Errorf(protocol.CodePinnedWorkerUnavailable, "pinned worker %d is %s", id, w.status)
	case w.role != d.role:
		return protocol.Errorf(protocol.CodePinnedWorkerUnavailable, "pinned worker %d serves role %s, the request is %s", id, w.role, d.role)
	case d.pinRank != nil && e.fleet.rankOf(w, *d.pinRank) == nil:
		return protocol.Errorf(protocol.CodePinnedWorkerUnavailable, "pinned worker %d has dp ranks %d..%d, not %d",
			id, w.ranks[0].dp, w.ranks[len(w.ranks)-1].dp, *d.pinRank)
	}
	return nil
}

// staticallyAllowed reports whether rank r of a ready worker of the
// demand's role passes hard affinity, allowed_workers and the pin, and if
// not, why.
func (d *demand) staticallyAllowed(r *rank) (bool, string) {
	if target := d.boundTarget(); d.hardBound && target != nil && r != target {
		return false, protocol.FilterAffinity
	}
	if d.allowed != nil && !slices.Contains(d.allowed, r.w.id) {
		return false, protocol.FilterNotAllowed
	}
	if d.pin != nil && (r.w.id != *d.pin || (d.pinRank != nil && r.dp != *d.pinRank)) {
		return false, protocol.FilterNotPinned
	}
	return true, ""
}

// candidates narrows the ready ranks of the role by allowed_workers, the pin
// and the busy thresholds at time t, recording what it dropped. It changes
// nothing, so it can be asked about any time from now on.
func (e *Engine) candidates(d *demand, t float64) (candidateSet, *protocol.Error) {
	var cs candidateSet
	if err := e.checkPin(d); err != nil {
		return cs, err
	}
	full := e.cfg.Evidence == protocol.EvidenceFull
	cs.ranks = make([]*rank, 0, len(e.fleet.slots))
	drop := func(r *rank, reason string) {
		switch reason {
		case protocol.FilterAffinity:
			cs.filtered.Affinity++
		case protocol.FilterNotAllowed:
			cs.filtered.NotAllowed++
		case protocol.FilterNotPinned:
			cs.filtered.NotPinned++
		case protocol.FilterBusy:
			cs.filtered.Busy++
		}
		if full {
			cs.filteredSet = append(cs.filteredSet, protocol.FilteredRank{WorkerID: r.w.id, DPRank: r.dp, Reason: reason})
		}
	}
	ofRole := 0
	for _, w := range e.fleet.ready {
		if w.role != d.role {
			continue
		}
		ofRole++
		start := len(cs.ranks)
		for _, r := range w.ranks {
			if ok, reason := d.staticallyAllowed(r); !ok {
				drop(r, reason)
				continue
			}
			cs.ranks = append(cs.ranks, r)
		}
		// A worker is busy when every one of its remaining ranks is.
		busy := len(cs.ranks) > start
		for _, r := range cs.ranks[start:] {
			busy = busy && e.overloaded(r, t)
		}
		if busy {
			for _, r := range cs.ranks[start:] {
				drop(r, protocol.FilterBusy)
			}
			cs.ranks = cs.ranks[:start]
		}
	}
	if len(cs.ranks) > 0 {
		return cs, nil
	}
	switch {
	case ofRole == 0:
		return cs, protocol.Errorf(protocol.CodeNoEligibleWorker, "no ready worker serves role %s", d.role)
	case cs.filtered.Busy > 0 && d.hardBound:
		return cs, protocol.Errorf(protocol.CodeAllWorkersBusy, "%s is bound to worker %d, which is over a busy threshold", d.bound.Key, d.bound.Target.w.id)
	case cs.filtered.Busy > 0:
		return cs, protocol.Errorf(protocol.CodeAllWorkersBusy, "every eligible worker of role %s is over a busy threshold", d.role)
	case d.pin != nil && cs.filtered.NotAllowed > 0:
		return cs, protocol.Errorf(protocol.CodeNoEligibleWorker, "pinned worker %d is not in allowed_workers", *d.pin)
	default:
		return cs, protocol.Errorf(protocol.CodeNoEligibleWorker, "allowed_workers names no ready worker of role %s", d.role)
	}
}

// overloaded applies the busy thresholds that are set to r at time t.
func (e *Engine) overloaded(r *rank, t float64) bool {
	cfg := &e.cfg
	if v := cfg.ActiveDecodeBlocksThreshold; v != nil && r.w.totalKVBlocks != nil &&
		float64(r.activeDecodeBlocks()) > *v*float64(*r.w.totalKVBlocks) {
		return true
	}
	if cfg.ActivePrefillTokensThreshold == nil && cfg.ActivePrefillTokensThresholdFrac == nil {
		return false // the load below is the costly part, for every rank of every placement
	}
	prefill := r.prefill.at(t)
	if v := cfg.ActivePrefillTokensThreshold; v != nil && prefill > *v {
		return true
	}
	if v := cfg.ActivePrefillTokensThresholdFrac; v != nil && r.w.maxNumBatchedTokens != nil &&
		prefill > *v*float64(*r.w.maxNumBatchedTokens) {
		return true
	}
	return false
}

// score is one candidate's cost: scores[i] costs cs.ranks[i]. It holds no
// pointer, so filling a score per candidate needs no write barrier while the
// garbage collector runs (on a large heap, much of the time).
type score struct {
	overlap uint64
	prefill float64 // blocks of prefill work, after the overlap credit
	decode  uint64  // active blocks after placement
	cost    float64
	prob    float64
}

// place selects a rank among cs for a request and books it there, now.
func (e *Engine) place(req *request, cs candidateSet) protocol.Placement {
	d := req.d
	e.index.FindMatches(d.local, e.overlap)
	e.walk = e.active.Count(d.local, e.hits)

	best := uint64(0)
	for _, w := range e.fleet.ready {
		if w.role == d.role {
			for _, r := range w.ranks {
				best = max(best, uint64(e.overlap[r.slot]))
			}
		}
	}
	// Scratch reused by every placement: the evidence copies what it keeps.
	scores := slices.Grow(e.scores[:0], len(cs.ranks))[:len(cs.ranks)]
	e.scores = scores
	for i, r := range cs.ranks {
		s := score{overlap: uint64(e.overlap[r.slot])}
		newBlocks := uint64(len(d.local)) - uint64(e.hits[r.slot]) + d.privateBlocks
		s.prefill, s.decode, s.cost = e.cost(r.prefill.at(e.now), d.isl, s.overlap, r.activeDecodeBlocks()+newBlocks)
		scores[i] = s
	}
	pick, ties, minCost := e.pick(scores, cs.ranks, e.preferred(d, cs.ranks))
	chosen, chosenRank := scores[pick], cs.ranks[pick]

	cached := min(chosen.overlap*e.cfg.BlockSize, d.isl)
	e.book(req, chosenRank, d.isl-cached)
	p := protocol.Placement{
		RequestID: d.id, WorkerID: chosenRank.w.id, DPRank: chosenRank.dp, Role: d.role,
		OverlapBlocks: chosen.overlap, BestAvailableOverlapBlocks: best, ISLBlocks: d.islBlocks,
		CachedTokens: cached, PrefillTokens: d.isl - cached, QueuedMS: protocol.Num(e.now - d.arrival),
		Reason: e.reason(d, chosenRank, len(scores)), Binding: e.placedUnder(req),
	}
	if e.cfg.Evidence != protocol.EvidenceNone {
		p.Evidence = e.evidence(cs, scores, ties, chosen.cost, minCost)
	}
	e.approxRecord(d, chosenRank)
	return p
}

// cost is Dynamo's cost of a rank (lower wins): the prefill work in blocks
// after crediting the cached overlap, weighted, plus the rank's active blocks
// once the request's new blocks join them.
func (e *Engine) cost(activePrefill float64, isl, overlap, decodeBlocks uint64) (prefillBlocks float64, decode uint64, cost float64) {
	bs := float64(e.cfg.BlockSize)
	// float64() rounds each product on its own: no fused multiply-add (exp.go).
	prefillBlocks = max((activePrefill+float64(isl))/bs-float64(e.cfg.OverlapScoreCredit*float64(overlap)), 0)
	return prefillBlocks, decodeBlocks, float64(e.cfg.PrefillLoadScale*prefillBlocks) + float64(decodeBlocks)
}

// preferred is the index of the rank a soft-affinity request should go to
// while that rank passes the filters and is not queue-busy, or -1.
func (e *Engine) preferred(d *demand, ranks []*rank) int {
	target := d.boundTarget()
	if target == nil || e.queueBusy(target, e.now) {
		return -1
	}
	return slices.Index(ranks, target)
}

// pick chooses among scores: the preferred index when there is one (>= 0),
// else the cheapest (ties broken by the seeded stream) at temperature 0, else
// a softmax draw over range-normalised costs. It fills every score's
// probability and returns the chosen index, the number of candidates at the
// minimum cost, and that cost.
func (e *Engine) pick(scores []score, ranks []*rank, preferred int) (int, int, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range scores {
		lo, hi = min(lo, s.cost), max(hi, s.cost)
	}
	ties := 0
	for _, s := range scores {
		if s.cost == lo {
			ties++
		}
	}
	if len(scores) == 1 {
		preferred = 0 // nothing to choose: no policy counter or draw is used
	}
	if preferred >= 0 {
		for i := range scores {
			scores[i].prob = 0
		}
		scores[preferred].prob = 1
		return preferred, ties, lo
	}
	if e.cfg.Policy != protocol.PolicyKV {
		return e.pickBaseline(scores, ranks), ties, lo
	}
	t := e.cfg.Temperature
	if t == 0 || hi == lo {
		chosen := 0
		if ties > 1 {
			chosen = e.rng.index(ties)
		}
		seen := 0
		pick := 0
		for i := range scores {
			if scores[i].cost == lo {
				scores[i].prob = 1 / float64(ties)
				if seen == chosen {
					pick = i
				}
				seen++
			}
		}
		return pick, ties, lo
	}
	total := 0.0
	for i := range scores {
		scores[i].prob = portableExp(-(scores[i].cost - lo) / ((hi - lo) * t))
		total += scores[i].prob
	}
	u := e.rng.unit() * total
	// The last candidate takes any rounding shortfall of the running sum.
	pick := -1
	acc := 0.0
	for i := range scores {
		acc += scores[i].prob
		if pick < 0 && u < acc {
			pick = i
		}
		scores[i].prob /= total
	}
	if pick < 0 {
		pick = len(scores) - 1
	}
	return pick, ties, lo
}

// pickBaseline chooses by a baseline policy, ignoring cost (the costs are
// still computed, for the evidence): round_robin takes the candidates in turn
// from one counter, random draws uniformly, least_loaded takes the fewest
// active requests with ties drawn uniformly.
func (e *Engine) pickBaseline(scores []score, ranks []*rank) int {
	for i := range scores {
		scores[i].prob = 0
	}
	var pick int
	switch e.cfg.Policy {
	case protocol.PolicyRoundRobin:
		pick = int(e.roundRobin % uint64(len(scores)))
		e.roundRobin++
		scores[pick].prob = 1
		return pick
	case protocol.PolicyRandom:
		pick = e.rng.index(len(scores))
		for i := range scores {
			scores[i].prob = 1 / float64(len(scores))
		}
		return pick
	}
	least := ranks[0].activeRequests
	for _, r := range ranks {
		least = min(least, r.activeRequests)
	}
	var tied []int
	for i, r := range ranks {
		if r.activeRequests == least {
			tied = append(tied, i)
		}
	}
	pick = tied[0]
	if len(tied) > 1 {
		pick = tied[e.rng.index(len(tied))]
	}
	for _, i := range tied {
		scores[i].prob = 1 / float64(len(tied))
	}
	return pick
}

func (e *Engine) reason(d *demand, chosen *rank, candidates int) string {
	switch {
	case chosen == d.boundTarget():
		return protocol.ReasonAffinity
	case d.pin != nil:
		return protocol.ReasonPinned
	case candidates == 1:
		return protocol.ReasonOnlyCandidate
	}
	return string(e.cfg.Policy)
}

func (e *Engine) evidence(cs candidateSet, scores []score, ties int, selected, best float64) *protocol.PlacementEvidence {
	ev := &protocol.PlacementEvidence{
		Candidates: len(scores), Ties: ties, SelectedCost: protocol.Num(selected), BestCost: protocol.Num(best),
	}
	if cs.filtered != (protocol.FilterCounts{}) {
		f := cs.filtered
		ev.Filtered = &f
	}
	if e.cfg.Evidence == protocol.EvidenceFull {
		ev.CandidateSet = make([]protocol.CandidateScore, len(scores))
		for i, s := range scores {
			r := cs.ranks[i]
			ev.CandidateSet[i] = protocol.CandidateScore{
				WorkerID: r.w.id, DPRank: r.dp, OverlapBlocks: s.overlap,
				PrefillBlocks: protocol.Num(s.prefill), DecodeBlocks: s.decode,
				Cost: protocol.Num(s.cost), Probability: protocol.Num(s.prob),
			}
		}
		ev.FilteredSet = cs.filteredSet
	}
	return ev
}
