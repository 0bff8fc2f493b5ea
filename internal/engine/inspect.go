package engine

import (
	"math"
	"slices"
	"strings"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// inspect snapshots everything a command can change, in a stable order, so
// that two snapshots are equal exactly when the states are.
func (e *Engine) inspect() *protocol.State {
	st := &protocol.State{
		IndexNodes: e.index.Nodes(), Workers: []protocol.WorkerState{}, Requests: []protocol.RequestState{},
		Queue: []protocol.QueuedState{}, Bindings: e.bindingStates(), RandomDraws: e.rng.draws, RoundRobinNext: e.draws.next,
	}
	ids := make([]uint64, 0, len(e.fleet.byID))
	for id := range e.fleet.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		w := e.fleet.byID[id]
		ws := protocol.WorkerState{
			WorkerID: w.id, Status: w.status.String(), Role: w.role,
			TotalKVBlocks: w.totalKVBlocks, MaxNumBatchedTokens: w.maxNumBatchedTokens, MaxNumSeqs: w.maxNumSeqs,
			DeviceType: w.device, LoRAAdapters: w.lora.state(),
		}
		if w.lora != nil {
			ws.MaxGPULoRACount = w.lora.capacity
		}
		for _, r := range w.ranks {
			rid := kvindex.RankID(r.slot)
			rs := protocol.RankState{
				DPRank: r.dp, ActiveRequests: r.activeRequests, ActivePrefillTokens: protocol.Num(r.prefill.at(e.now)),
				ActiveDecodeBlocks: r.activeDecodeBlocks(), IndexBlocks: e.index.Blocks(rid), TierBlocks: e.tiers.blocks(rid),
			}
			if last, ok := e.index.LastEventID(rid); ok {
				rs.LastEventID = &last
			}
			st.IndexBlocks += rs.IndexBlocks
			ws.Ranks = append(ws.Ranks, rs)
		}
		st.Workers = append(st.Workers, ws)
	}
	for _, r := range e.requests {
		st.Requests = append(st.Requests, r.state())
	}
	slices.SortFunc(st.Requests, func(a, b protocol.RequestState) int { return strings.Compare(a.RequestID, b.RequestID) })
	for _, role := range roleOrder {
		for _, cq := range e.queue.roles[roleIndex(role)].classes {
			for _, req := range cq.ordered() {
				q := protocol.QueuedState{RequestID: req.d.id, Role: role, Tier: req.d.tier, Score: protocol.Num(req.score), ArrivalMS: protocol.Num(req.d.arrival)}
				deadline := math.Inf(1)
				if e.cfg.QueueTimeoutMS != nil {
					deadline = e.deadline(req)
				}
				if !cq.class.legacy {
					q.PolicyClass = cq.class.name
					q.Score = 0
					deadline = min(deadline, req.deadline)
				}
				if !math.IsInf(deadline, 1) {
					n := protocol.Num(deadline)
					q.DeadlineMS = &n
				}
				st.Queue = append(st.Queue, q)
			}
		}
	}
	return st
}
