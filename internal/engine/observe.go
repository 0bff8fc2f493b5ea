package engine

import (
	"slices"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// observe applies KV events one by one. An event that cannot apply is
// skipped and reported; the others still apply.
func (e *Engine) observe(events []protocol.KVEvent) {
	e.hashTokenIDs(events)
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

// checkTokenIDs refuses an observe whose stored block brings token_ids to
// hash that are not one whole block: the router hashes whole blocks only,
// as Dynamo's publisher publishes only those.
func (e *Engine) checkTokenIDs(events []protocol.KVEvent) *protocol.Error {
	for i := range events {
		st, ok := events[i].Data.(protocol.Stored)
		if !ok {
			continue
		}
		for _, u := range st.Unhashed {
			if uint64(len(u.TokenIDs)) != e.cfg.BlockSize {
				return protocol.Errorf(protocol.CodeInvalidField, "field \"events[%d].event.data.stored.blocks[%d].token_ids\": a block without tokens_hash needs block_size (%d) token ids to hash, got %d",
					i, u.Index, e.cfg.BlockSize, len(u.TokenIDs))
			}
		}
	}
	return nil
}

// hashTokenIDs gives each stored block that came with token_ids and no
// tokens_hash the hash of its tokens under its store's salt, as Dynamo's
// publisher computes tokens_hash from an engine's tokens, adapter and
// namespace.
func (e *Engine) hashTokenIDs(events []protocol.KVEvent) {
	for i := range events {
		st, ok := events[i].Data.(protocol.Stored)
		if !ok || len(st.Unhashed) == 0 {
			continue
		}
		salt := kvindex.Salt(st.LoRAName, st.CacheNamespace)
		for _, u := range st.Unhashed {
			st.Blocks[u.Index].TokensHash = kvindex.SaltedBlockHashes(u.TokenIDs, int(e.cfg.BlockSize), salt)[0]
		}
	}
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
		switch e.index.StoreUnder(id, d.Path, d.ParentHash, d.Blocks) {
		case kvindex.ErrUnknownParent:
			return protocol.SkipUnknownParent
		case kvindex.ErrSelfReference:
			return protocol.SkipInvalidBlockSequence
		}
		for i := 0; i < len(d.Blocks) && len(r.approx) > 0; i++ { // a rank with no deadlines has none to drop
			e.approx.disown(r, d.Blocks[i].BlockHash) // the engine holds it now: no TTL
		}
	case protocol.Removed:
		if tier != protocol.TierDevice {
			e.tiers.of(tier).Remove(id, d.BlockHashes)
			break
		}
		e.index.Remove(id, d.BlockHashes)
		for i := 0; i < len(d.BlockHashes) && len(r.approx) > 0; i++ {
			e.approx.disown(r, d.BlockHashes[i])
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
