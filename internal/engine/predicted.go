package engine

import (
	"math"
	"slices"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Predict-on-route (predicted_ttl_ms; Dynamo's --router-predicted-ttl-secs):
// a placement writes its prompt's full blocks for the chosen rank into a
// side index, each forgotten predicted_ttl_ms after it was last written,
// and a rank's overlap is the larger of what the KV events say it caches
// and what was routed to it. It credits a burst of requests sharing a
// prefix with the blocks the first is about to store, before its KV event
// arrives. KV events never touch the side index: it is the router's guess,
// and a guess that turns out right is then also in the main index, where
// the per-rank maximum makes the two one.
type predictedIndex struct {
	index   *kvindex.Index
	blocks  *expiring
	overlap []uint32         // by rank slot: the side index's own match
	matched []kvindex.RankID // ranks either index gave an overlap, each once
}

// newPredictedIndex returns the side index when the config asks for one.
func newPredictedIndex(cfg *protocol.Config) *predictedIndex {
	if cfg.PredictedTTLMS == nil {
		return nil
	}
	return &predictedIndex{index: kvindex.New(),
		blocks: &expiring{deadlines: func(r *rank) *map[protocol.SequenceHash]float64 { return &r.predicted }}}
}

// findOverlap writes into e.overlap, by rank slot, the leading blocks of
// d's prompt each rank caches (the main index) or was routed (the side
// index), whichever is more, and returns the ranks either gave an overlap.
func (e *Engine) findOverlap(d *demand) []kvindex.RankID {
	e.index.FindMatches(d.local, e.overlap)
	p := e.predicted
	if p == nil {
		return e.index.Matched()
	}
	e.predictedExpire()
	if n := len(e.overlap); len(p.overlap) < n {
		p.overlap = slices.Grow(p.overlap[:0], n)[:n]
	}
	p.index.FindMatches(d.local, p.overlap)
	p.matched = append(p.matched[:0], e.index.Matched()...)
	for _, r := range p.index.Matched() {
		if e.overlap[r] == 0 {
			p.matched = append(p.matched, r) // not in the main index's list
		}
		e.overlap[r] = max(e.overlap[r], p.overlap[r])
	}
	return p.matched
}

// predictedRecord writes the placed prompt's blocks for its rank, each
// with a fresh deadline.
func (e *Engine) predictedRecord(d *demand, r *rank) {
	p := e.predicted
	if p == nil || len(d.local) == 0 {
		return
	}
	deadline := predictedDeadline(e.now, *e.cfg.PredictedTTLMS)
	e.blocks = e.blocks[:0]
	for i := range d.local {
		e.blocks = append(e.blocks, kvindex.Block{BlockHash: d.seq[i], TokensHash: d.local[i]})
		p.blocks.set(r, d.seq[i], deadline)
	}
	p.index.Store(kvindex.RankID(r.slot), nil, e.blocks)
	p.blocks.compact(e.fleet.slots)
}

// expiryBucketMS is the grain of a predicted block's deadline: Dynamo
// rounds each expiry up to a 100 ms bucket, so blocks written a few ms
// apart expire together.
const expiryBucketMS = 100

// predictedDeadline is when a block written at now with ttl expires.
func predictedDeadline(now, ttl float64) float64 {
	return float64(math.Ceil((now+ttl)/expiryBucketMS) * expiryBucketMS)
}

// predictedExpire drops the side index's blocks whose deadline is at or
// before now.
func (e *Engine) predictedExpire() {
	p := e.predicted
	p.blocks.expire(e.now, func(r *rank, h protocol.SequenceHash) int {
		return p.index.Remove(kvindex.RankID(r.slot), []protocol.SequenceHash{h})
	})
}
