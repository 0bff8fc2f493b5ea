package engine

import (
	"slices"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// observe applies KV events one by one. An event that cannot apply is
// skipped and reported; the others still apply.
func (e *Engine) observe(events []protocol.KVEvent) {
	ev := &e.out.ev
	applied := 0
	var ignored []string
	for i := range events {
		x := &events[i]
		ignored = append(ignored, x.IgnoredKeys...)
		tier := x.TierOf()
		if _, ok := x.Data.(protocol.Cleared); ok {
			tier = protocol.TierDevice // a reset takes every tier, whichever it names
		}
		switch {
		case !x.OfWorker():
			ev.EventsIgnored++ // a cache owner's lane, or a malformed domain: dropped as Dynamo drops it
			continue
		case x.UnknownMedium:
			ev.EventsSkipped = append(ev.EventsSkipped, protocol.SkippedEvent{EventRef: refOf(i, x), Reason: protocol.SkipUnknownMedium})
			continue
		case tier == "":
			ev.EventsIgnored++ // AISimulate's tier names none of Dynamo's: its id still counts
			e.noteIgnored(i, x)
			continue
		}
		if reason := e.applyEvent(i, x, tier); reason != "" {
			ev.EventsSkipped = append(ev.EventsSkipped, protocol.SkippedEvent{EventRef: refOf(i, x), Reason: reason})
			continue
		}
		applied++
	}
	ev.EventsApplied = &applied
	ev.EventKeysIgnored = countKeys(ignored)
}

// countKeys counts each key, sorted by key: sorted once, not kept sorted
// key by key, so a line of many distinct keys costs k log k.
func countKeys(keys []string) []protocol.IgnoredKey {
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	var out []protocol.IgnoredKey
	for _, k := range keys {
		if n := len(out); n > 0 && out[n-1].Key == k {
			out[n-1].Count++
		} else {
			out = append(out, protocol.IgnoredKey{Key: k, Count: 1})
		}
	}
	return out
}

// applyEvent applies one event to the index of its tier, or returns why
// it was skipped. A cleared resets the rank's device cache and every lower
// tier, whatever tier it names (Dynamo's reset scope).
func (e *Engine) applyEvent(i int, x *protocol.KVEvent, tier string) string {
	r, last, seen, skip := e.eventRank(x)
	if skip != "" {
		return skip
	}
	id := kvindex.RankID(r.slot)
	switch d := x.Data.(type) {
	case protocol.Stored:
		if tier != protocol.TierDevice {
			e.tiers.of(tier).Store(id, d.ParentHash, d.Blocks)
			break
		}
		switch e.index.Store(id, d.ParentHash, d.Blocks) {
		case kvindex.ErrUnknownParent:
			return protocol.SkipUnknownParent
		case kvindex.ErrSelfReference:
			return protocol.SkipInvalidBlockSequence
		}
		for _, b := range d.Blocks {
			e.approx.disown(r, b.BlockHash) // the engine holds it now: no TTL
		}
	case protocol.Removed:
		if tier != protocol.TierDevice {
			e.tiers.of(tier).Remove(id, d.BlockHashes)
			break
		}
		e.index.Remove(id, d.BlockHashes)
		for _, h := range d.BlockHashes {
			e.approx.disown(r, h)
		}
	case protocol.Cleared:
		e.index.Clear(id)
		e.tiers.clear(id)
		e.approx.forget(r)
	}
	e.noteEventID(i, x, id, last, seen)
	return ""
}

// noteIgnored counts the event id of a worker's event of a tier the
// router has no index for in its rank's id stream: an engine numbers its
// events per rank across tiers (AISimulate's publisher does, and
// Dynamo's gap check keys on worker and rank alone), so dropping one from
// the stream would make the next look like a gap.
func (e *Engine) noteIgnored(i int, x *protocol.KVEvent) {
	if r, last, seen, skip := e.eventRank(x); skip == "" {
		e.noteEventID(i, x, kvindex.RankID(r.slot), last, seen)
	}
}

// eventRank is the rank an event is of and the last event id applied
// there, or why the event is skipped.
func (e *Engine) eventRank(x *protocol.KVEvent) (r *rank, last uint64, seen bool, skip string) {
	w, ok := e.fleet.byID[x.WorkerID]
	if !ok {
		if e.fleet.removed.has(x.WorkerID) {
			return nil, 0, false, protocol.SkipRemovedWorker
		}
		return nil, 0, false, protocol.SkipUnknownWorker
	}
	if r = e.fleet.rankOf(w, x.DPRank); r == nil {
		return nil, 0, false, protocol.SkipUnknownRank
	}
	last, seen = e.index.LastEventID(kvindex.RankID(r.slot))
	if seen && x.EventID <= last && e.cfg.DedupeEventIDs {
		return nil, 0, false, protocol.SkipStaleEventID
	}
	return r, last, seen, ""
}

// noteEventID records x's id as the last of its rank's stream, saying when
// it does not follow the one before.
func (e *Engine) noteEventID(i int, x *protocol.KVEvent, id kvindex.RankID, last uint64, seen bool) {
	// Applied in arrival order, as Dynamo's indexer does: an engine that
	// restarts numbers its events afresh, and a router that waited for its
	// ids to pass the old ones would miss its cleared and every store
	// after it. What does not follow is said.
	if seen && (x.EventID <= last || x.EventID-last > 1) { // (last+1 would wrap at 2^64 - 1)
		note := protocol.EventIDNote{EventRef: refOf(i, x), LastEventID: last}
		if x.EventID <= last {
			e.out.ev.EventIDRepeats = append(e.out.ev.EventIDRepeats, note)
		} else {
			e.out.ev.EventIDGaps = append(e.out.ev.EventIDGaps, note)
		}
	}
	e.index.RecordEventID(id, x.EventID)
}

func refOf(i int, x *protocol.KVEvent) protocol.EventRef {
	return protocol.EventRef{Index: i, WorkerID: x.WorkerID, DPRank: x.DPRank, EventID: x.EventID}
}
