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
//
// The clock never goes back and the TTL is fixed, so deadlines come in
// the order the writes do: the writes wait in a first-in first-out log,
// not a heap, and expiring one costs its blocks, not a log of the queue.
// A block's deadline is its last write's (rank.predicted); an older
// write of a block written again is passed over when it expires.
type predictedIndex struct {
	index   *kvindex.Index
	ttl     float64
	live    int              // blocks with a deadline, on ranks that are up
	log     []predictedWrite // from head on, in deadline order
	head    int
	hashes  []protocol.SequenceHash // the writes' blocks, in order, from hashHead on
	hashAt  int
	overlap []uint32         // by rank slot: the side index's own match
	matched []kvindex.RankID // ranks either index gave an overlap, each once
	expired []protocol.SequenceHash
}

// predictedWrite is one placement's blocks whose deadline it set: the
// next n of the log's hashes.
type predictedWrite struct {
	r        *rank
	deadline float64
	n        int
}

// newPredictedIndex returns the side index when the config asks for one.
func newPredictedIndex(cfg *protocol.Config) *predictedIndex {
	if cfg.PredictedTTLMS == nil {
		return nil
	}
	return &predictedIndex{index: kvindex.New(), ttl: *cfg.PredictedTTLMS}
}

// expiryBucketMS is the grain of a predicted block's deadline: Dynamo
// rounds each expiry up to a 100 ms bucket, so blocks written a few ms
// apart expire together.
const expiryBucketMS = 100

// deadline is when a block written at now expires.
func (p *predictedIndex) deadline(now float64) float64 {
	return float64(math.Ceil((now+p.ttl)/expiryBucketMS) * expiryBucketMS)
}

// findOverlap writes into e.overlap, by rank slot, the leading blocks of
// d's prompt each rank caches on its device (the main index) or was
// routed (the side index), whichever is more, walks the lower tiers past
// them (e.tiers), and returns the ranks any gave a match.
func (e *Engine) findOverlap(d *demand) []kvindex.RankID {
	return e.tiers.extend(e.index, d.local, d.seq, e.overlap, e.deviceOverlap(d))
}

// deviceOverlap is findOverlap's device match, from both indexes.
func (e *Engine) deviceOverlap(d *demand) []kvindex.RankID {
	e.index.FindMatches(d.local, e.overlap)
	p := e.predicted
	if p == nil {
		return e.index.Matched()
	}
	p.expire(e.now)
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
// with a fresh deadline. Blocks written again within one bucket keep
// their entry; only blocks new to the rank are stored, as a chain from the
// prompt's first block to its last new one.
func (e *Engine) predictedRecord(d *demand, r *rank) {
	p := e.predicted
	if p == nil || len(d.local) == 0 {
		return
	}
	deadline := p.deadline(e.now)
	if r.predicted == nil {
		r.predicted = map[protocol.SequenceHash]float64{}
	}
	written, newTo := 0, 0
	for i, h := range d.seq[:len(d.local)] {
		old, ok := r.predicted[h]
		if ok && old == deadline {
			continue
		}
		if !ok {
			p.live++
			newTo = i + 1
		}
		r.predicted[h] = deadline
		p.hashes = append(p.hashes, h)
		written++
	}
	if written > 0 {
		p.log = append(p.log, predictedWrite{r, deadline, written})
	}
	if newTo > 0 {
		e.blocks = e.blocks[:0]
		for i := range newTo {
			e.blocks = append(e.blocks, kvindex.Block{BlockHash: d.seq[i], TokensHash: d.local[i]})
		}
		p.index.Store(kvindex.RankID(r.slot), nil, e.blocks)
	}
	p.compact()
}

// compact drops from the log the blocks written again since (or of ranks
// gone) once they outnumber the blocks with a deadline: a prompt routed
// again and again under a long TTL costs its blocks once, not once a
// bucket, and a rebuild is paid for by the writes since the last. The log
// keeps its order, so expiry is as before.
func (p *predictedIndex) compact() {
	if len(p.hashes)-p.hashAt <= 2*p.live+64 {
		return
	}
	log, hashes, at := p.log[:0], p.hashes[:0], p.hashAt
	for _, w := range p.log[p.head:] {
		kept := 0
		for _, h := range p.hashes[at : at+w.n] {
			if d, ok := w.r.predicted[h]; ok && d == w.deadline {
				hashes = append(hashes, h) // never ahead of the reads: the log only shrinks
				kept++
			}
		}
		at += w.n
		if kept > 0 {
			log = append(log, predictedWrite{w.r, w.deadline, kept})
		}
	}
	clear(p.log[len(log):])
	p.log, p.hashes, p.head, p.hashAt = log, hashes, 0, 0
}

// expire drops the blocks whose deadline is at or before now: each write
// due, the blocks whose deadline is still its own, from ranks still up.
func (p *predictedIndex) expire(now float64) {
	for p.head < len(p.log) && p.log[p.head].deadline <= now {
		w := p.log[p.head]
		p.expired = p.expired[:0]
		for _, h := range p.hashes[p.hashAt : p.hashAt+w.n] {
			if d, ok := w.r.predicted[h]; ok && d == w.deadline {
				delete(w.r.predicted, h)
				p.expired = append(p.expired, h)
			}
		}
		if len(p.expired) > 0 {
			p.live -= len(p.expired)
			p.index.Remove(kvindex.RankID(w.r.slot), p.expired)
		}
		p.log[p.head] = predictedWrite{} // let a rank that went be collected
		p.head++
		p.hashAt += w.n
	}
	// The log's spent front is dropped once it is most of the log, so the
	// log holds about the writes of one TTL, whatever the run's length.
	if p.head > 1024 && p.head > len(p.log)/2 {
		p.log = p.log[:copy(p.log, p.log[p.head:])]
		p.hashes = p.hashes[:copy(p.hashes, p.hashes[p.hashAt:])]
		p.head, p.hashAt = 0, 0
	}
}

// forget drops the side index's blocks of a rank that goes. Its writes
// in the log find no deadline of theirs when they come due.
func (p *predictedIndex) forget(r *rank) {
	p.live -= len(r.predicted)
	r.predicted = nil
	p.index.DropRank(kvindex.RankID(r.slot))
}
