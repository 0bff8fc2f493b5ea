package engine

import (
	"github.com/offline-router/offline-router/internal/protocol"
)

// candidateSet is the ranks a demand may go to at some time, in
// (worker_id, dp_rank) order, and what the filters dropped.
type candidateSet struct {
	ranks       []*rank
	slots       []uint32   // of ranks
	role        *roleRanks // when the candidates are its whole ready list
	version     uint64     // of role's list, then
	filtered    protocol.FilterCounts
	filteredSet []protocol.FilteredRank // only with evidence "full"
}

// candidates narrows the ready ranks of the role by hard affinity,
// allowed_workers, the pin, the request's LoRA adapter and the busy
// thresholds at time t, in that order, recording what it dropped. It changes
// nothing, so it can be asked about any time from now on.
func (e *Engine) candidates(d *demand, t float64) (candidateSet, *protocol.Error) {
	var cs candidateSet
	if err := e.checkPin(d); err != nil {
		return cs, err
	}
	fit := e.loraFit(d)
	if d.unfiltered() && !e.busyThresholds() && fit == fitNone {
		if rr := e.fleet.ofRole(d.role); len(rr.ranks) > 0 {
			return candidateSet{ranks: rr.ranks, slots: rr.slots, role: rr, version: rr.version}, nil // no filter drops any
		}
	}
	full := e.cfg.Evidence == protocol.EvidenceFull
	cs.ranks, cs.slots = make([]*rank, 0, len(e.fleet.slots)), make([]uint32, 0, len(e.fleet.slots))
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
		case protocol.FilterLoRA:
			cs.filtered.LoRA++
		}
		if full {
			cs.filteredSet = append(cs.filteredSet, protocol.FilteredRank{WorkerID: r.w.id, DPRank: r.dp, Reason: reason})
		}
	}
	ofRole := 0
	for _, w := range e.fleet.readyWorkers() {
		if w.role != d.role {
			continue
		}
		ofRole++
		start := len(cs.ranks)
		fits := fit == fitNone || w.fit(d.lora) == fit
		for _, r := range w.ranks {
			switch ok, reason := d.staticallyAllowed(r); {
			case !ok:
				drop(r, reason)
			case !fits:
				drop(r, protocol.FilterLoRA)
			default:
				cs.ranks, cs.slots = append(cs.ranks, r), append(cs.slots, r.slot)
			}
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
			cs.ranks, cs.slots = cs.ranks[:start], cs.slots[:start]
		}
	}
	if len(cs.ranks) > 0 {
		return cs, nil
	}
	switch {
	case ofRole == 0:
		return cs, protocol.Errorf(protocol.CodeNoEligibleWorker, "no ready worker serves role %s", d.role)
	case cs.filtered.Busy > 0 && d.pin != nil:
		// Dynamo's PinnedWorkerOverloaded: a pin is not rerouted.
		return cs, protocol.Errorf(protocol.CodePinnedWorkerOverloaded, "pinned worker %d is over a busy threshold", *d.pin)
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

// busyThresholds reports whether any busy threshold is set.
func (e *Engine) busyThresholds() bool {
	cfg := &e.cfg
	return cfg.ActiveDecodeBlocksThreshold != nil || cfg.ActivePrefillTokensThreshold != nil ||
		cfg.ActivePrefillTokensThresholdFrac != nil
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
