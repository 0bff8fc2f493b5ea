package replay

import (
	"container/list"
	"math"

	"github.com/offline-router/offline-router/internal/protocol"
)

// iterEngine is a worker as vLLM's V1 scheduler runs it, one iteration
// (step) at a time: each step first serves the running requests in order
// (a decode token each, or the next chunk of an unfinished prefill), then
// admits waiting ones, under a budget of max_num_batched_tokens tokens and
// at most max_num_seqs running. A waiting request's prompt blocks already
// in the cache are not computed again. KV blocks are taken per request as
// its tokens need them and given back when it ends; a full prompt block is
// then kept in the cache, hashed, until evicted (least recently freed
// first) for a block someone needs. A running request that cannot get a
// block preempts the last running one, which gives its blocks back and is
// computed again from its first token when it is admitted anew.
//
// As in vLLM, at most (prompt - 1) / block_size blocks are a hit, so a
// prompt found whole in the cache computes its last block again.
//
// What it leaves out: blocks of generated tokens are never cached (the
// trace has no hashes for them; vLLM caches them), there is no priority
// order among waiting requests, and long_prefill_token_threshold is off
// (vLLM's default).
type iterEngine struct {
	cfg     *ClusterConfig
	model   *StepModel
	waiting []*iterSeq // FIFO; a preempted request goes back to the front
	running []*iterSeq
	cached  map[protocol.SequenceHash]*kvBlock // hashed blocks, held or free
	free    *list.List                         // cached blocks no one holds, least recently freed first
	live    int                                // blocks held by at least one request
	batch   []scheduled                        // the step under way
	busy    bool                               // a step is under way
	// A run of steps under way: steps equal decode-only steps from start,
	// each step ms long (see startRun).
	steps       int
	start, step float64
	preempted   bool                    // the step under way preempted (so it admitted none)
	endSeq      uint64                  // the host's event for the end under way
	removed     []protocol.SequenceHash // evicted since the last call to takeRemoved
	dropped     []*simRequest           // could never run, since the last call to takeDropped
}

// kvBlock is one block of a worker's KV cache.
type kvBlock struct {
	hash   protocol.SequenceHash // 0 while it is not (or cannot be) cached
	local  protocol.LocalBlockHash
	refs   int
	onFree *list.Element // its place among the free cached blocks; nil while held
}

// iterSeq is a request on an iteration-level worker.
type iterSeq struct {
	r        *simRequest
	target   uint64 // tokens to prefill: the prompt, or prompt and outputs after a preemption
	computed uint64 // of target, in the KV cache
	kv       uint64 // tokens in the KV cache (computed, then one more per decode step)
	out      uint64 // output tokens made
	blocks   []*kvBlock
	admitted bool // scheduled at least once (its queue wait has ended)
}

// scheduled is one request's share of a step.
type scheduled struct {
	s       *iterSeq
	prefill uint64 // prompt tokens computed this step; 0 for a decode token
}

// stepResult is what a step's end brings the host.
type stepResult struct {
	firstTokens []*simRequest      // prefill ended: the first output token
	finished    []*simRequest      // the last output token
	stored      []protocol.KVEvent // full prompt blocks now cached, one event per request
}

func newIterEngine(cfg *ClusterConfig, model *StepModel) *iterEngine {
	return &iterEngine{cfg: cfg, model: model, cached: map[protocol.SequenceHash]*kvBlock{}, free: list.New()}
}

// enqueue adds a dispatched request to the waiting queue.
func (e *iterEngine) enqueue(r *simRequest) {
	e.waiting = append(e.waiting, &iterSeq{r: r, target: max(r.InputTokens, 1)})
}

// idle reports whether the engine has nothing to run.
func (e *iterEngine) idle() bool { return len(e.running) == 0 && len(e.waiting) == 0 }

// blocksFor is how many blocks n tokens take.
func (e *iterEngine) blocksFor(n uint64) int {
	return int((n + e.cfg.BlockSize - 1) / e.cfg.BlockSize)
}

// startStep chooses the step's batch at t, taking the blocks it needs (and
// evicting cached ones); false when there is nothing to run. end() says
// when the step ends.
func (e *iterEngine) startStep(t float64) bool {
	e.batch = e.batch[:0]
	budget := e.cfg.MaxNumBatchedTokens
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		tokens := uint64(1)
		if s.computed < s.target {
			tokens = min(s.target-s.computed, budget)
		}
		for !e.grow(s, tokens) {
			// No block for it: the last running request gives its own back.
			victim := e.running[len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == s {
				break
			}
		}
		if i >= len(e.running) || e.running[i] != s {
			break // s itself was preempted
		}
		if s.computed < s.target {
			e.batch = append(e.batch, scheduled{s: s, prefill: tokens})
		} else {
			e.batch = append(e.batch, scheduled{s: s})
		}
		budget -= tokens
	}
	// As vLLM: no admission in a step that had to preempt.
	for !preempted && len(e.waiting) > 0 && len(e.running) < e.cfg.MaxNumSeqs && budget > 0 {
		s := e.waiting[0]
		if !e.admit(s, t, budget) {
			break
		}
		e.waiting = e.waiting[1:]
		e.running = append(e.running, s)
		tokens := min(s.target-s.computed, budget)
		e.batch = append(e.batch, scheduled{s: s, prefill: tokens})
		budget -= tokens
	}
	e.preempted = preempted
	if len(e.batch) == 0 {
		if len(e.running) == 0 && len(e.waiting) > 0 {
			// Alone, and still no room: its prompt is larger than the
			// cache. It can never run; the next one may.
			e.dropped = append(e.dropped, e.waiting[0].r)
			e.waiting = e.waiting[1:]
			return e.startStep(t)
		}
		return false
	}
	e.busy = true
	e.steps, e.start, e.step = 1, t, e.stepTime()
	return true
}

// startRun lengthens the step just started into the run of equal steps
// that follows it: decode in aggregate.
// While every scheduled request decodes, none finishes before the run's
// last step and none needs a new block, each step is the one before it
// with one more token per request; and the waiting requests that could not
// be admitted still cannot (no block is freed, no seat either). The steps
// are equal in time only when the profile reads no KV term, so a run needs
// per_kv_token_read_ms 0 (the shipped profile's).
func (e *iterEngine) startRun() {
	if e.preempted || e.model.PerKVTokenReadMS != 0 {
		return
	}
	n := math.MaxInt
	for _, b := range e.batch {
		if b.prefill > 0 {
			return
		}
		s := b.s
		n = min(n, int(max(s.r.OutputTokens, 1)-s.out), len(s.blocks)*int(e.cfg.BlockSize)-int(s.kv))
	}
	e.steps = max(n, 1)
}

// end is when the run under way ends. The product is rounded alone: the
// same on every platform.
func (e *iterEngine) end() float64 { return e.start + float64(float64(e.steps)*e.step) }

// cut shortens the run under way to the step under way at t, for a request
// dispatched at t to join the next one, and reports whether it changed.
func (e *iterEngine) cut(t float64) bool {
	if e.steps <= 1 {
		return false
	}
	n := max(int(math.Ceil((t-e.start)/e.step)), 1)
	for n > 1 && e.start+float64(float64(n-1)*e.step) >= t {
		n--
	}
	for e.start+float64(float64(n)*e.step) < t {
		n++
	}
	if n >= e.steps {
		return false
	}
	e.steps = n
	return true
}

// admit takes a waiting request's cached prefix and the blocks its first
// chunk needs, if there is room; budget bounds the chunk.
func (e *iterEngine) admit(s *iterSeq, t float64, budget uint64) bool {
	r := s.r
	full := min(int(r.InputTokens/e.cfg.BlockSize), len(r.seq)) // only full prompt blocks are ever cached
	hit := 0
	for hit < full && e.cached[r.seq[hit]] != nil {
		hit++
	}
	hitTokens := min(uint64(hit)*e.cfg.BlockSize, s.target)
	if hitTokens == s.target { // at least one token is computed
		hit--
		hitTokens = uint64(hit) * e.cfg.BlockSize
	}
	chunk := min(s.target-hitTokens, budget)
	fromFree := 0
	for _, h := range r.seq[:hit] {
		if e.cached[h].refs == 0 {
			fromFree++
		}
	}
	need := e.blocksFor(hitTokens+chunk) - hit
	if need > e.cfg.TotalKVBlocks-e.live-fromFree {
		return false
	}
	for _, h := range r.seq[:hit] {
		s.blocks = append(s.blocks, e.hold(e.cached[h]))
	}
	s.computed, s.kv = hitTokens, hitTokens
	if !s.admitted {
		s.admitted = true
		r.hitBlocks, r.uncached, r.prefillStart = hit, r.InputTokens-hitTokens, t
	}
	return e.grow(s, chunk)
}

// grow gives s the blocks its next tokens need; false, taking nothing,
// when there are not enough.
func (e *iterEngine) grow(s *iterSeq, tokens uint64) bool {
	need := e.blocksFor(s.kv+tokens) - len(s.blocks)
	if need > e.cfg.TotalKVBlocks-e.live {
		return false
	}
	for range need {
		if e.cfg.TotalKVBlocks-e.live-e.free.Len() == 0 {
			e.evict()
		}
		e.live++
		s.blocks = append(s.blocks, &kvBlock{refs: 1})
	}
	return true
}

// hold takes a reference to a cached block.
func (e *iterEngine) hold(b *kvBlock) *kvBlock {
	if b.refs == 0 {
		e.free.Remove(b.onFree)
		b.onFree = nil
		e.live++
	}
	b.refs++
	return b
}

// evict drops the least recently freed cached block.
func (e *iterEngine) evict() {
	b := e.free.Remove(e.free.Front()).(*kvBlock)
	delete(e.cached, b.hash)
	e.removed = append(e.removed, b.hash)
}

// release gives back s's blocks, last first, so that of a request's cached
// blocks its tail is evicted before its head.
func (e *iterEngine) release(s *iterSeq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		b := s.blocks[i]
		if b.refs--; b.refs > 0 {
			continue
		}
		if b.hash == 0 {
			e.live-- // never cached: simply free
			continue
		}
		b.onFree = e.free.PushBack(b)
		e.live--
	}
	s.blocks = s.blocks[:0]
}

// preempt takes the last running request out, to be computed again.
func (e *iterEngine) preempt(s *iterSeq) {
	e.release(s)
	e.running = e.running[:len(e.running)-1]
	s.target, s.computed, s.kv = s.kv, 0, 0
	e.waiting = append([]*iterSeq{s}, e.waiting...)
}

// stepTime is the step's duration by the profile: linear in the prefill
// tokens, the decode sequences and the KV tokens the step reads.
func (e *iterEngine) stepTime() float64 {
	var prefill, decodes, read float64
	for _, b := range e.batch {
		if b.prefill > 0 {
			prefill += float64(b.prefill)
		} else {
			decodes++
		}
		read += float64(b.s.kv)
	}
	m := e.model
	// Each product rounded alone: the same on every platform.
	return m.BaseMS + float64(m.PerPrefillTokenMS*prefill) + float64(m.PerDecodeSeqMS*decodes) + float64(m.PerKVTokenReadMS*read)
}

// endStep applies the step's tokens, made at t, and says what came of
// them.
func (e *iterEngine) endStep(w *simWorker, t float64) stepResult {
	var res stepResult
	for _, b := range e.batch {
		s, r := b.s, b.s.r
		if b.prefill > 0 {
			before := s.computed
			s.computed += b.prefill
			s.kv = s.computed
			res.stored = e.store(w, s, before, res.stored)
			if s.computed < s.target {
				continue
			}
			// The step that ends a prefill samples a token: the first, or
			// the next one after a recomputation.
			if s.out++; s.out == 1 {
				res.firstTokens = append(res.firstTokens, r)
			} else {
				r.tokenAt(t)
			}
		} else { // decode: one token a step, the run's steps apart
			k := uint64(e.steps)
			s.kv += k
			s.out += k
			r.tokenAt(e.start + e.step)
			r.tokensEvery(e.step, e.steps-1)
		}
		if s.out >= max(r.OutputTokens, 1) {
			res.finished = append(res.finished, r)
		}
	}
	e.busy = false
	for _, r := range res.finished {
		e.finish(r)
	}
	return res
}

// store caches the full prompt blocks s completed since it had before
// tokens, and appends their stored events to out: one per run of blocks
// that chain on each other (a block another request cached first breaks
// the run, and stays this request's own).
func (e *iterEngine) store(w *simWorker, s *iterSeq, before uint64, out []protocol.KVEvent) []protocol.KVEvent {
	r, bs := s.r, e.cfg.BlockSize
	first, last := int(before/bs), min(int(s.computed/bs), int(r.InputTokens/bs), len(r.seq))
	var run protocol.Stored
	flush := func() {
		if len(run.Blocks) > 0 {
			w.eventID++
			out = append(out, protocol.KVEvent{WorkerID: w.id, DPRank: w.dpRank, StorageTier: "device", EventID: w.eventID, Data: run})
			run = protocol.Stored{}
		}
	}
	for i := first; i < last; i++ {
		b := s.blocks[i]
		if b.hash != 0 || e.cached[r.seq[i]] != nil {
			flush()
			continue
		}
		b.hash, b.local = r.seq[i], r.local[i]
		e.cached[b.hash] = b
		if len(run.Blocks) == 0 && i > 0 {
			p := r.seq[i-1]
			run.ParentHash = &p
		}
		run.Blocks = append(run.Blocks, protocol.StoredBlock{BlockHash: b.hash, TokensHash: b.local})
	}
	flush()
	return out
}

// finish takes an ended request out of the running list.
func (e *iterEngine) finish(r *simRequest) {
	for i, s := range e.running {
		if s.r == r {
			e.release(s)
			e.running = append(e.running[:i], e.running[i+1:]...)
			return
		}
	}
}

// takeDropped returns the requests dropped since the last call.
func (e *iterEngine) takeDropped() []*simRequest {
	out := e.dropped
	e.dropped = nil
	return out
}

// takeRemoved returns the hashes evicted since the last call.
func (e *iterEngine) takeRemoved() []protocol.SequenceHash {
	out := e.removed
	e.removed = nil
	return out
}
