package engine

import (
	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/wire"
)

// observe applies KV events one by one. An event that cannot apply is
// skipped and reported; the others still apply.
func (e *Engine) observe(events []wire.RouterEvent) {
	ev := &e.out.ev
	applied := 0
	for i := range events {
		x := &events[i]
		if x.StorageTier != "device" {
			ev.EventsIgnored++
			continue
		}
		if reason := e.applyEvent(x); reason != "" {
			ev.EventsSkipped = append(ev.EventsSkipped, wire.SkippedEvent{
				Index: i, WorkerID: x.WorkerID, DPRank: x.DPRank, EventID: x.EventID, Reason: reason,
			})
			continue
		}
		applied++
	}
	ev.EventsApplied = &applied
}

// applyEvent applies one event, or returns why it was skipped.
func (e *Engine) applyEvent(x *wire.RouterEvent) string {
	w, ok := e.fleet.byID[x.WorkerID]
	if !ok {
		if e.fleet.removed[x.WorkerID] {
			return wire.SkipRemovedWorker
		}
		return wire.SkipUnknownWorker
	}
	r := e.fleet.rankOf(w, x.DPRank)
	if r == nil {
		return wire.SkipUnknownRank
	}
	id := kvindex.RankID(r.slot)
	if !e.index.EventIDAbove(id, x.EventID) {
		return wire.SkipStaleEventID
	}
	switch x.Kind {
	case wire.EventStored:
		e.blocks = e.blocks[:0]
		for _, b := range x.Blocks {
			e.blocks = append(e.blocks, kvindex.Block{BlockHash: b.BlockHash, TokensHash: b.TokensHash})
		}
		if !e.index.Store(id, x.ParentHash, e.blocks) {
			return wire.SkipUnknownParent
		}
	case wire.EventRemoved:
		e.index.Remove(id, x.Removed)
	case wire.EventCleared:
		e.index.Clear(id)
	}
	e.index.RecordEventID(id, x.EventID)
	return ""
}
