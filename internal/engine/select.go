package engine

import (
	"math"
	"slices"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/wire"
)

// admission is a place command vetted against the engine as of its time:
// its hashes and the ranks it may go to. Building it changes nothing.
type admission struct {
	role          wire.Role
	isl           uint64
	islBlocks     uint64
	local         []uint64 // local block hashes: the index walk
	seq           []uint64 // sequence hashes: the active-block accounting
	privateBlocks uint64   // blocks without a hash, never shared
	candidates    []*rank  // in (worker_id, dp_rank) order
	filtered      wire.FilterCounts
	filteredSet   []wire.FilteredRank // only with evidence "full"
}

// admit checks a place command and finds its candidate ranks at time t.
func (e *Engine) admit(c *wire.Command, t float64) (*admission, *wire.Error) {
	if _, ok := e.requests[c.RequestID]; ok {
		return nil, wire.Errorf(wire.CodeDuplicateRequest, "request %q is already in flight", c.RequestID)
	}
	bs := e.cfg.BlockSize
	a := &admission{role: firstRole(c.Role, "", wire.RoleAggregated), isl: c.ISL()}
	a.islBlocks = (a.isl + bs - 1) / bs
	switch {
	case c.Tokens != nil:
		a.local = kvindex.BlockHashes(c.Tokens, int(bs))
	case c.BlockHashes != nil:
		if uint64(len(c.BlockHashes)) > a.islBlocks {
			return nil, wire.Errorf(wire.CodeInvalidField, "field \"block_hashes\": %d hashes, but input_tokens %d at block_size %d makes only %d blocks",
				len(c.BlockHashes), a.isl, bs, a.islBlocks)
		}
		a.local = c.BlockHashes
	}
	if c.SequenceHashes != nil {
		a.seq = c.SequenceHashes
	} else {
		a.seq = kvindex.SequenceHashes(a.local)
	}
	a.privateBlocks = a.islBlocks - uint64(len(a.seq))
	if err := e.checkPin(c, a.role); err != nil {
		return nil, err
	}
	if err := e.filter(c, a, t); err != nil {
		return nil, err
	}
	return a, nil
}

func (e *Engine) checkPin(c *wire.Command, role wire.Role) *wire.Error {
	if c.WorkerID == nil {
		return nil
	}
	id := *c.WorkerID
	w, ok := e.fleet.byID[id]
	switch {
	case !ok && e.fleet.removed[id]:
		return wire.Errorf(wire.CodePinnedWorkerUnavailable, "pinned worker %d was removed", id)
	case !ok:
		return wire.Errorf(wire.CodePinnedWorkerUnavailable, "pinned worker %d never became ready", id)
	case w.status != statusReady:
		return wire.Errorf(wire.CodePinnedWorkerUnavailable, "pinned worker %d is %s", id, w.status)
	case w.role != role:
		return wire.Errorf(wire.CodePinnedWorkerUnavailable, "pinned worker %d serves role %s, the request is %s", id, w.role, role)
	case c.DPRank != nil && e.fleet.rankOf(w, *c.DPRank) == nil:
		return wire.Errorf(wire.CodePinnedWorkerUnavailable, "pinned worker %d has dp ranks %d..%d, not %d",
			id, w.ranks[0].dp, w.ranks[len(w.ranks)-1].dp, *c.DPRank)
	}
	return nil
}

// filter narrows the ready ranks of the role by allowed_workers, the pin and
// the busy thresholds, recording what it dropped.
func (e *Engine) filter(c *wire.Command, a *admission, t float64) *wire.Error {
	full := e.cfg.Evidence == wire.EvidenceFull
	drop := func(r *rank, reason string, count *int) {
		*count++
		if full {
			a.filteredSet = append(a.filteredSet, wire.FilteredRank{WorkerID: r.w.id, DPRank: r.dp, Reason: reason})
		}
	}
	ofRole := 0
	for _, w := range e.fleet.ready {
		if w.role != a.role {
			continue
		}
		ofRole++
		if c.AllowedWorkers != nil && !slices.Contains(c.AllowedWorkers, w.id) {
			for _, r := range w.ranks {
				drop(r, wire.FilterNotAllowed, &a.filtered.NotAllowed)
			}
			continue
		}
		start := len(a.candidates)
		for _, r := range w.ranks {
			if c.WorkerID != nil && (w.id != *c.WorkerID || (c.DPRank != nil && r.dp != *c.DPRank)) {
				drop(r, wire.FilterNotPinned, &a.filtered.NotPinned)
				continue
			}
			a.candidates = append(a.candidates, r)
		}
		// A worker is busy when every one of its remaining ranks is.
		busy := len(a.candidates) > start
		for _, r := range a.candidates[start:] {
			busy = busy && e.overloaded(r, t)
		}
		if busy {
			for _, r := range a.candidates[start:] {
				drop(r, wire.FilterBusy, &a.filtered.Busy)
			}
			a.candidates = a.candidates[:start]
		}
	}
	if len(a.candidates) > 0 {
		return nil
	}
	switch {
	case ofRole == 0:
		return wire.Errorf(wire.CodeNoEligibleWorker, "no ready worker serves role %s", a.role)
	case a.filtered.Busy > 0:
		return wire.Errorf(wire.CodeAllWorkersBusy, "every eligible worker of role %s is over a busy threshold", a.role)
	case c.WorkerID != nil && a.filtered.NotAllowed > 0:
		return wire.Errorf(wire.CodeNoEligibleWorker, "pinned worker %d is not in allowed_workers", *c.WorkerID)
	default:
		return wire.Errorf(wire.CodeNoEligibleWorker, "allowed_workers names no ready worker of role %s", a.role)
	}
}

// overloaded applies the busy thresholds that are set to r at time t.
func (e *Engine) overloaded(r *rank, t float64) bool {
	cfg := &e.cfg
	prefill := float64(r.prefillTokens)
	if v := cfg.ActiveDecodeBlocksThreshold; v != nil && r.w.totalKVBlocks != nil &&
		float64(r.activeDecodeBlocks()) > *v*float64(*r.w.totalKVBlocks) {
		return true
	}
	if v := cfg.ActivePrefillTokensThreshold; v != nil && prefill > *v {
		return true
	}
	if v := cfg.ActivePrefillTokensThresholdFrac; v != nil && r.w.maxNumBatchedTokens != nil &&
		prefill > *v*float64(*r.w.maxNumBatchedTokens) {
		return true
	}
	return false
}

// score is one candidate's cost.
type score struct {
	r       *rank
	overlap uint64
	prefill float64 // blocks of prefill work, after the overlap credit
	decode  uint64  // active blocks after placement
	cost    float64
	prob    float64
}

// place selects a rank for an admitted request and books it there.
func (e *Engine) place(c *wire.Command, a *admission) (wire.Placement, *rank) {
	e.index.FindMatches(a.local, e.overlap)
	clear(e.hits)
	e.active.countHits(a.seq, e.hits)

	best := uint64(0)
	for _, w := range e.fleet.ready {
		if w.role == a.role {
			for _, r := range w.ranks {
				best = max(best, uint64(e.overlap[r.slot]))
			}
		}
	}
	scores := make([]score, len(a.candidates))
	for i, r := range a.candidates {
		s := score{r: r, overlap: uint64(e.overlap[r.slot])}
		newBlocks := uint64(len(a.seq)) - uint64(e.hits[r.slot]) + a.privateBlocks
		s.prefill, s.decode, s.cost = e.cost(r.prefillTokens, a.isl, s.overlap, r.activeDecodeBlocks()+newBlocks)
		scores[i] = s
	}
	pick, ties, minCost := e.pick(scores)
	chosen := scores[pick]

	cached := min(chosen.overlap*e.cfg.BlockSize, a.isl)
	req := &request{
		id: c.RequestID, rank: chosen.r, seq: a.seq,
		privateBlocks: a.privateBlocks, prefillTokens: a.isl - cached,
	}
	e.active.book(req)
	e.requests[req.id] = req

	p := wire.Placement{
		RequestID: req.id, WorkerID: chosen.r.w.id, DPRank: chosen.r.dp, Role: a.role,
		OverlapBlocks: chosen.overlap, BestAvailableOverlapBlocks: best, ISLBlocks: a.islBlocks,
		CachedTokens: cached, PrefillTokens: a.isl - cached,
		Reason: e.reason(c, len(scores)), Binding: "none",
	}
	if e.cfg.Evidence != wire.EvidenceNone {
		p.Evidence = e.evidence(a, scores, ties, chosen.cost, minCost)
	}
	return p, chosen.r
}

// cost is Dynamo's cost of a rank (lower wins): the prefill work in blocks
// after crediting the cached overlap, weighted, plus the rank's active blocks
// once the request's new blocks join them.
func (e *Engine) cost(activePrefill, isl, overlap, decodeBlocks uint64) (prefillBlocks float64, decode uint64, cost float64) {
	bs := float64(e.cfg.BlockSize)
	prefillBlocks = math.Max((float64(activePrefill)+float64(isl))/bs-e.cfg.OverlapScoreCredit*float64(overlap), 0)
	return prefillBlocks, decodeBlocks, e.cfg.PrefillLoadScale*prefillBlocks + float64(decodeBlocks)
}

// pick chooses among scores: the cheapest (ties broken by the seeded
// stream) at temperature 0, else a softmax draw over range-normalised costs.
// It fills every score's probability and returns the chosen index, the
// number of candidates at the minimum cost, and that cost.
func (e *Engine) pick(scores []score) (int, int, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range scores {
		lo, hi = math.Min(lo, s.cost), math.Max(hi, s.cost)
	}
	ties := 0
	for _, s := range scores {
		if s.cost == lo {
			ties++
		}
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
		scores[i].prob = math.Exp(-(scores[i].cost - lo) / ((hi - lo) * t))
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

func (e *Engine) reason(c *wire.Command, candidates int) string {
	switch {
	case c.WorkerID != nil:
		return wire.ReasonPinned
	case candidates == 1:
		return wire.ReasonOnlyCandidate
	}
	return e.cfg.Policy
}

func (e *Engine) evidence(a *admission, scores []score, ties int, selected, best float64) *wire.PlacementEvidence {
	ev := &wire.PlacementEvidence{
		Candidates: len(scores), Ties: ties, SelectedCost: wire.Num(selected), BestCost: wire.Num(best),
	}
	if a.filtered != (wire.FilterCounts{}) {
		f := a.filtered
		ev.Filtered = &f
	}
	if e.cfg.Evidence == wire.EvidenceFull {
		ev.CandidateSet = make([]wire.CandidateScore, len(scores))
		for i, s := range scores {
			ev.CandidateSet[i] = wire.CandidateScore{
				WorkerID: s.r.w.id, DPRank: s.r.dp, OverlapBlocks: s.overlap,
				PrefillBlocks: wire.Num(s.prefill), DecodeBlocks: s.decode,
				Cost: wire.Num(s.cost), Probability: wire.Num(s.prob),
			}
		}
		ev.FilteredSet = a.filteredSet
	}
	return ev
}
