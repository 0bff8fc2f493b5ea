package engine

import (
	"slices"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/selector"
)

// place chooses a rank among cs for a request (Dynamo's selector: the
// selector package, which books nothing) and then books the request there,
// now. preferred is the index in cs of the rank soft affinity asks for, or -1.
func (e *Engine) place(req *request, cs candidateSet, preferred int) protocol.Placement {
	d := req.d
	e.matched = e.findOverlap(d)
	e.walk = e.active.Count(d.local, e.hits)
	var routed []uint32
	if e.routed != nil {
		routed = e.routedMatches(d)
	}
	var sel selector.Result
	bestOverlap := uint64(0)
	// The cheap paths cost the device prefix alone: with a lower tier in
	// use every candidate is costed.
	switch cheapest := selector.Cheapest(e.paramsFor(d), preferred) && e.cfg.Evidence != protocol.EvidenceFull && !e.tiers.inUse(); {
	case cheapest && cs.role != nil && cs.role.version == cs.version:
		sel = e.selectBucketed(d, cs.role)
		bestOverlap = e.bucketed.bestOverlap
	case cheapest:
		sel = e.selectCheapest(d, cs)
		bestOverlap = e.bestOverlap(d)
	default:
		sel = e.selectAmong(d, cs, preferred, routed)
		e.scores = sel.Scores // scratch for the next placement: the evidence copies what it keeps
		bestOverlap = e.bestOverlap(d)
	}
	chosen, chosenRank := sel.Chosen, cs.ranks[sel.Index]

	cached := cachedTokens(&e.cfg, chosen.Overlap, chosen.Host, chosen.Disk, d.isl)
	e.book(req, chosenRank, d.isl-cached)
	p := protocol.Placement{
		RequestID: d.id, WorkerID: chosenRank.w.id, DPRank: chosenRank.dp, Role: d.role,
		// Dynamo's target cached prefix: device and host blocks.
		OverlapBlocks: chosen.Overlap + chosen.Host, HostOverlapBlocks: chosen.Host, DiskOverlapBlocks: chosen.Disk,
		BestAvailableOverlapBlocks: bestOverlap, ISLBlocks: d.islBlocks,
		CachedTokens: cached, PrefillTokens: d.isl - cached, QueuedMS: protocol.Num(e.now - d.arrival),
		Reason: e.reason(d, chosenRank, len(cs.ranks)), Binding: e.placedUnder(req),
	}
	p.LoRALoad, p.LoRAEvicted = e.useAdapter(req, chosenRank.w)
	if e.cfg.Evidence != protocol.EvidenceNone {
		p.Evidence = e.evidence(cs, sel)
	}
	e.approxRecord(d, chosenRank)
	e.predictedRecord(d, chosenRank)
	e.routedRecord(d, chosenRank)
	return p
}

// selectAmong costs every candidate and selects among them.
func (e *Engine) selectAmong(d *demand, cs candidateSet, preferred int, routed []uint32) selector.Result {
	params := e.paramsFor(d)
	reads := selector.Of(params.Policy).Reads
	load, key, device := reads&(selector.ReadsWaiting|selector.ReadsKVUsage) != 0, reads&selector.ReadsKey != 0, reads&selector.ReadsDevice != 0
	cands := slices.Grow(e.cands[:0], len(cs.ranks))[:len(cs.ranks)]
	e.cands = cands
	for i, r := range cs.ranks {
		newBlocks := uint64(len(d.local)) - uint64(e.hits[r.slot]) + d.privateBlocks
		cands[i] = selector.Candidate{Overlap: uint64(e.overlap[r.slot]), Host: e.tiers.host(r.slot), Disk: e.tiers.disk(r.slot),
			PrefillTokens: r.prefill.at(e.now), DecodeBlocks: r.activeDecodeBlocks() + newBlocks, ActiveRequests: r.activeRequests}
		// What the policy does not read (its entry in the table) is not
		// worked out.
		if load {
			cands[i].Waiting, cands[i].KVUsage = uint64(r.prefill.live), r.kvUsage()
		}
		if key {
			cands[i].Key = r.w.id*0x9e3779b97f4a7c15 ^ uint64(r.dp)
		}
		if device {
			cands[i].CPU = r.w.device == protocol.DeviceCPU
		}
		if routed != nil {
			cands[i].Routed, cands[i].TreeBlocks = uint64(routed[r.slot]), uint64(len(r.routed))
		}
	}
	return selector.Select(*params, selector.Request{ISL: d.isl, Blocks: d.islBlocks, Session: d.session}, cands, preferred, e.draws, e.scores)
}

// selectCheapest is selectAmong where only the cheapest candidate counts
// (selector.Cheapest, and no evidence "full" to show every score): each
// candidate is costed from the rank loads in slot order, without its
// rank's struct, into one float. The same choice, ties and costs.
func (e *Engine) selectCheapest(d *demand, cs candidateSet) selector.Result {
	costs := slices.Grow(e.costs[:0], len(cs.slots))[:len(cs.slots)]
	e.costs = costs
	for i, s := range cs.slots {
		c := e.cheapCandidate(d, s)
		costs[i] = selector.CostOf(e.paramsFor(d), d.isl, c.Overlap, c.PrefillTokens, c.DecodeBlocks)
	}
	index, ties, best := selector.PickCheapest(costs, e.draws)
	chosen := e.cheapCandidate(d, cs.slots[index])
	return selector.Result{Index: index, Chosen: selector.Cost(e.paramsFor(d), d.isl, &chosen), Ties: ties, BestCost: best}
}

// cheapCandidate is the rank at slot s as Cost reads it, from its load
// copy: only the fields Cost reads.
func (e *Engine) cheapCandidate(d *demand, s uint32) selector.Candidate {
	l := &e.fleet.loads[s]
	return selector.Candidate{Overlap: uint64(e.overlap[s]), PrefillTokens: l.prefill.at(e.now),
		DecodeBlocks: l.decode + uint64(len(d.local)) + d.privateBlocks - uint64(e.hits[s])}
}

// bestOverlap is the most blocks of d's prompt any ready rank of its role
// caches on its device and host (as overlap_blocks counts them), filtered
// or not, from the overlap walk place just made: among the ranks it gave
// a match, not every rank.
func (e *Engine) bestOverlap(d *demand) uint64 {
	rr, best := e.fleet.ofRole(d.role), uint64(0)
	for _, r := range e.matched {
		if _, ok := e.fleet.positionIn(rr, uint32(r)); ok {
			best = max(best, uint64(e.overlap[r])+e.tiers.host(uint32(r)))
		}
	}
	return best
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
	return string(e.paramsFor(d).Policy)
}

// evidence is why the selection chose as it did: the summary, and with
// evidence "full" every candidate's score and every filtered rank.
func (e *Engine) evidence(cs candidateSet, sel selector.Result) *protocol.PlacementEvidence {
	scores := sel.Scores
	ev := &protocol.PlacementEvidence{
		Candidates: len(cs.ranks), Ties: sel.Ties, SelectedCost: protocol.Num(sel.Chosen.Cost), BestCost: protocol.Num(sel.BestCost),
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
				WorkerID: r.w.id, DPRank: r.dp, OverlapBlocks: s.Overlap, HostBlocks: s.Host, DiskBlocks: s.Disk,
				PrefillBlocks: protocol.Num(s.Prefill), DecodeBlocks: s.Decode,
				Cost: protocol.Num(s.Cost), Probability: protocol.Num(s.Prob),
			}
		}
		ev.FilteredSet = cs.filteredSet
	}
	return ev
}
