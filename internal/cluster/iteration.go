package cluster

import (
	"math"

	"github.com/offline-router/offline-router/internal/protocol"
)

// iterEngine is a worker as vLLM's V1 scheduler runs it, one iteration
// (step) at a time: each step first serves the running requests in order
// (a decode token each, or the next chunk of an unfinished prefill), then
// admits waiting ones, under a budget of max_num_batched_tokens tokens and
// at most max_num_seqs running. A waiting request's prompt blocks already
// in the cache are not computed again. KV blocks are taken per request as
// its tokens need them, and a full prompt block is cached (hashed) as soon
// as the step that fills it is scheduled, so a request admitted later in
// the same step already finds it. Blocks given back join the tail of one
// free queue, a request's last block first; a new block comes from its
// head, evicting the cached one found there. A running request that cannot
// get a block preempts the last running one, which gives its blocks back
// and is computed again from the start (prompt and outputs so far) when it
// is admitted anew. A request whose prompt and output could never fit the
// cache is refused when it is dispatched (vLLM refuses it at validation).
//
// As in vLLM, at most (prompt - 1) / block_size blocks are a hit, so a
// prompt found whole in the cache computes its last block again.
//
// What it leaves out: blocks of generated tokens are never cached (the
// trace has no hashes for them; vLLM caches them), there is no priority
// order among waiting requests, and long_prefill_token_threshold is off
// (vLLM's default).
type iterEngine struct {
	cfg   *Config
	model *StepModel
	publisher
	waiting []*iterSeq // FIFO; a preempted request goes back to the front
	running []*iterSeq
	// blocks are the worker's blocks used so far, by index; cached finds
	// the hashed ones, held or free. Written out rather than a Go map of
	// pointers and a container/list, which allocated per block: the same
	// slice-and-table shape as the simple model's cache.
	blocks []kvBlock
	cached hashTable
	fresh  int // never-used blocks, at the free queue's head
	// freeHead and freeTail are the blocks given back, in the order they
	// were: the rest of the free queue (noBlock when empty), freeLen long.
	freeHead, freeTail int32
	freeLen            int
	live               int         // blocks held by at least one request
	batch              []scheduled // the step under way
	busy               bool        // a step is under way
	// A run of steps under way: steps equal decode-only steps from start,
	// each step ms long (see startRun).
	steps       int
	start, step float64
	preempted   bool                    // the step under way preempted (so it admitted none)
	sink        int32                   // where admit leaves the slots it warms, so that the loads stay
	removed     []protocol.SequenceHash // evicted in the step under way
	stored      []protocol.Stored       // cached in the step under way
	// preemptions and evicted are counted over the run, for the report.
	preemptions, evicted int
	kv                   kvGauge
	busyMS               float64
	// off is the rank's lower tiers, nil without; meta holds, by block
	// index, each cached block's parent and id for its offload (with off
	// only).
	off  *offload
	meta []tierBlock
	now  float64 // the step's start, as it is chosen
	// lostMS is, in a lockstep worker, the step time this rank waited on
	// its slowest sibling (lockstep.go).
	lostMS float64
}

// kvBlock is one block of a worker's KV cache: 24 bytes, for the
// millions of a cluster's caches at 16-token blocks.
type kvBlock struct {
	hash       protocol.SequenceHash
	refs       int32
	prev, next int32 // neighbours in the free queue while on it
	cached     bool  // hashed, findable by hash
	onFree     bool  // in the free queue (so unreferenced)
}

// noBlock is "none" for a block index.
const noBlock int32 = -1

// iterSeq is a request on an iteration-level worker.
type iterSeq struct {
	r        *Request
	outputs  uint64  // tokens it makes here: all, or 1 on a prefill worker
	received bool    // its prompt's KV came from a prefill worker: nothing to prefill
	target   uint64  // tokens to prefill: the prompt, or prompt and outputs after a preemption
	computed uint64  // of target, in the KV cache
	kv       uint64  // tokens in the KV cache (computed, then one more per decode step)
	out      uint64  // output tokens made
	blocks   []int32 // its blocks' indices in the engine's
	admitted bool    // scheduled at least once (its queue wait has ended)
	// genCached is the index past the last output block cacheGenerated
	// looked at.
	genCached int
	done      bool // made its last token
}

// scheduled is one request's share of a step.
type scheduled struct {
	s       *iterSeq
	prefill uint64 // prompt tokens computed this step; 0 for a decode token
}

func newIterEngine(cfg *Config, model *StepModel, pub publisher) *iterEngine {
	return &iterEngine{cfg: cfg, model: model, publisher: pub, fresh: cfg.TotalKVBlocks, freeHead: noBlock, freeTail: noBlock,
		off: newOffload(cfg)}
}

// Enqueue adds a dispatched request to the waiting queue, or reports that
// its prompt and output could never fit the cache.
func (e *iterEngine) Enqueue(r *Request, outputs uint64, received bool) bool {
	if e.blocksFor(max(r.InputTokens, 1)+outputs) > e.cfg.TotalKVBlocks {
		return false
	}
	e.waiting = append(e.waiting, &iterSeq{r: r, outputs: max(outputs, 1), received: received, target: max(r.InputTokens, 1)})
	return true
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
	e.now = t
	if e.off != nil {
		e.off.begin(t)
	}
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
			e.cacheFull(s, s.computed+tokens)
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
		e.cacheFull(s, s.computed+tokens)
		budget -= tokens
	}
	e.preempted = preempted
	if len(e.batch) == 0 {
		return false
	}
	e.busy = true
	e.steps, e.start, e.step = 1, t, e.stepTime()
	if e.off != nil {
		// Its loads before it; its end no earlier than its writes'.
		e.step += e.off.restoreMS
		if stall := e.off.writeEnd - (t + e.step); stall > 0 {
			e.step += stall
			e.off.tiers[0].counts.StallMS += stall
		}
	}
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
	// A step that queued KV events publishes them at its own end.
	if e.preempted || e.model.PerKVTokenReadMS != 0 || len(e.removed) > 0 || len(e.stored) > 0 || (e.off != nil && e.off.busy()) {
		return
	}
	n := math.MaxInt
	for _, b := range e.batch {
		if b.prefill > 0 {
			return
		}
		s := b.s
		n = min(n, int(s.outputs-s.out), len(s.blocks)*int(e.cfg.BlockSize)-int(s.kv))
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
	if s.received {
		return e.receive(s, t)
	}
	r := s.r
	full := min(int(r.InputTokens/e.cfg.BlockSize), len(r.Seq)) // only full prompt blocks are ever cached
	e.sink = e.cached.warm(r.Seq[:full])
	// hits holds the hit blocks' indices, in the space s.blocks will take.
	hits := s.blocks[:0]
	for len(hits) < full {
		b := e.cached.find(r.Seq[len(hits)])
		if b == noBlock {
			break
		}
		hits = append(hits, b)
	}
	hit := len(hits)
	// lower[i]: the blocks tier i holds past those above it, to restore.
	var lower [len(tierNames)]int
	if e.off != nil {
		pos := hit
		for i, t := range e.off.tiers {
			lower[i] = t.match(r.Seq, pos, full)
			pos += lower[i]
		}
	}
	restored := lower[0] + lower[1]
	hitTokens := min(uint64(hit+restored)*e.cfg.BlockSize, s.target)
	if hitTokens == s.target { // at least one token is computed: the deepest hit block is not one
		switch {
		case lower[1] > 0:
			lower[1]--
		case lower[0] > 0:
			lower[0]--
		default:
			hit--
		}
		restored = lower[0] + lower[1]
		hitTokens = uint64(hit+restored) * e.cfg.BlockSize
	}
	chunk := min(s.target-hitTokens, budget)
	fromFree := 0 // hit blocks in the free queue: taking them leaves fewer to allocate from
	for _, b := range hits[:hit] {
		if e.blocks[b].refs == 0 {
			fromFree++
		}
	}
	need := e.blocksFor(hitTokens+chunk) - hit
	if need > e.available()-fromFree {
		return false
	}
	for _, b := range hits[:hit] {
		e.hold(b)
	}
	s.blocks = hits[:hit]
	if restored > 0 {
		e.restore(s, lower)
	}
	s.computed, s.kv = hitTokens, hitTokens
	if !s.admitted {
		s.admitted = true
		r.HitBlocks, r.LowerHits, r.Uncached, r.PrefillStart = hit, lower, r.InputTokens-hitTokens, t
	}
	return e.grow(s, chunk)
}

// restore loads the blocks of s's prompt found in the lower tiers (lower,
// by tier, past its GPU hits in s.blocks) into new GPU blocks, cached
// there as they are, and queues their stored event, as one run after its
// GPU hits. The step waits for the loads.
func (e *iterEngine) restore(s *iterSeq, lower [len(tierNames)]int) {
	r := s.r
	from := len(s.blocks)
	pos := from
	for i, t := range e.off.tiers {
		e.off.restoreMS += t.restore(r.Seq, pos, lower[i])
		pos += lower[i]
	}
	var run protocol.Stored
	if from > 0 {
		p := r.Seq[from-1]
		run.ParentHash, run.Path = &p, r.Local[:from]
	}
	for i := from; i < pos; i++ {
		b := e.take()
		s.blocks = append(s.blocks, b)
		if e.cached.find(r.Seq[i]) != noBlock {
			continue // cached on the GPU past a gap, by another request: this copy stays its own
		}
		x := &e.blocks[b]
		x.cached, x.hash = true, r.Seq[i]
		e.cached.insert(x.hash, b)
		e.noteBlock(b, r, i, len(r.Seq))
		run.Blocks = append(run.Blocks, protocol.StoredBlock{BlockHash: r.Seq[i], TokensHash: r.Local[i]})
	}
	if len(run.Blocks) > 0 {
		e.stored = append(e.stored, run)
	}
}

// noteBlock keeps what block b's offload will name: its hash, parent and
// id, position i of r's prompt.
func (e *iterEngine) noteBlock(b int32, r *Request, i, full int) {
	seq, local := r.block(i, full)
	m := tierBlock{hash: seq, local: local, rooted: i == 0}
	if i > 0 {
		m.parent, _ = r.block(i-1, full)
	}
	e.meta[b] = m
}

// receive admits a request whose prompt's KV a prefill worker sent: it
// takes blocks for the prompt and its next token, caches the prompt's full
// blocks, and decodes from its second token on.
func (e *iterEngine) receive(s *iterSeq, t float64) bool {
	if !e.grow(s, s.target+1) {
		return false
	}
	e.cacheFull(s, s.target)
	s.computed, s.kv, s.out = s.target, s.target, 1
	s.admitted, s.r.AdmittedAt = true, t
	return true
}

// available is how many blocks can be had: the free queue's.
func (e *iterEngine) available() int { return e.fresh + e.freeLen }

// grow gives s the blocks its next tokens need; false, taking nothing,
// when there are not enough.
func (e *iterEngine) grow(s *iterSeq, tokens uint64) bool {
	need := e.blocksFor(s.kv+tokens) - len(s.blocks)
	if need > e.available() {
		return false
	}
	for range need {
		s.blocks = append(s.blocks, e.take())
	}
	return true
}

// take pops the free queue's head: a never-used block, else the one given
// back longest ago, evicted from the cache if it was cached.
func (e *iterEngine) take() int32 {
	e.live++
	if e.fresh > 0 {
		e.fresh--
		e.blocks = append(e.blocks, kvBlock{refs: 1, prev: noBlock, next: noBlock})
		if e.off != nil {
			e.meta = append(e.meta, tierBlock{})
		}
		return int32(len(e.blocks) - 1)
	}
	b := e.freeHead
	e.unlinkFree(b)
	x := &e.blocks[b]
	if x.cached {
		e.cached.remove(x.hash)
		e.removed = append(e.removed, x.hash)
		e.evicted++
		if e.off != nil {
			e.off.evicted(e.now, e.meta[b])
		}
	}
	*x = kvBlock{refs: 1, prev: noBlock, next: noBlock}
	return b
}

// hold takes a reference to a cached block.
func (e *iterEngine) hold(b int32) {
	x := &e.blocks[b]
	if x.refs == 0 {
		e.unlinkFree(b)
		e.live++
	}
	x.refs++
}

// unlinkFree takes block b out of the free queue.
func (e *iterEngine) unlinkFree(b int32) {
	x := &e.blocks[b]
	if x.prev != noBlock {
		e.blocks[x.prev].next = x.next
	} else {
		e.freeHead = x.next
	}
	if x.next != noBlock {
		e.blocks[x.next].prev = x.prev
	} else {
		e.freeTail = x.prev
	}
	x.prev, x.next, x.onFree = noBlock, noBlock, false
	e.freeLen--
}

// release gives back s's blocks, last first, so that of a request's blocks
// its tail is reused (and, cached, evicted) before its head.
func (e *iterEngine) release(s *iterSeq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		b := s.blocks[i]
		x := &e.blocks[b]
		if x.refs--; x.refs > 0 {
			continue
		}
		x.prev, x.next, x.onFree = e.freeTail, noBlock, true
		if e.freeTail != noBlock {
			e.blocks[e.freeTail].next = b
		} else {
			e.freeHead = b
		}
		e.freeTail = b
		e.freeLen++
		e.live--
	}
	s.blocks = s.blocks[:0]
}

// preempt takes the last running request out, to be computed again: its
// prompt, or, once decoding, its prompt and every output token so far
// (vLLM's num_tokens: the last sampled one is not in the cache yet).
func (e *iterEngine) preempt(s *iterSeq) {
	e.preemptions++
	s.r.Preemptions++
	e.release(s)
	e.running = e.running[:len(e.running)-1]
	if s.computed >= s.target {
		s.target = s.kv + 1
	}
	// Its KV is gone: a request received from a prefill worker is computed
	// again here, like any other.
	s.computed, s.kv, s.received, s.genCached = 0, 0, false, 0
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

// Start starts the next step at t, if there is work and none is under
// way; with a run of decode steps under way, it cuts the run short after
// the step under way, for a request enqueued at t to join the next.
func (e *iterEngine) Start(t float64) (Result, bool) {
	if e.busy {
		if e.cut(t) {
			return Result{Timer: Timer{At: e.end(), Kind: StepDone}}, false
		}
		return Result{}, false
	}
	started := e.startStep(t)
	e.kv.set(t, e.live)
	if !started {
		return Result{}, false
	}
	e.startRun()
	return Result{Timer: Timer{At: e.end(), Kind: StepDone}}, false
}

// Fire ends the step (or run of steps) under way at t: its KV events,
// queued as the step ran, are published at its end, as vLLM does
// (evictions, then blocks cached); its requests whose prefill ended made
// their first token, and some ended.
func (e *iterEngine) Fire(t float64, _ Timer) Result {
	e.busyMS += t - e.start
	res := e.endStep(t)
	e.kv.set(t, e.live)
	return res
}

// Restart restarts the engine at t, as far as its events tell: its
// prefix cache is reset (every cached block forgotten; the blocks running
// requests hold stay theirs, and they run on), its lower tiers emptied, the
// events queued for the step under way dropped, and its events numbered
// afresh from a cleared event, 1.
func (e *iterEngine) Restart(float64) Result {
	for i := range e.blocks {
		if x := &e.blocks[i]; x.cached {
			e.cached.remove(x.hash)
			x.cached = false
		}
	}
	if e.off != nil {
		kept := e.off
		e.off = newOffload(e.cfg)
		for i, t := range kept.tiers {
			e.off.tiers[i].counts = t.counts
		}
	}
	e.removed, e.stored = nil, e.stored[:0]
	e.eventID = 0
	return Result{Events: []protocol.KVEvent{e.event(protocol.Cleared{})}}
}

func (e *iterEngine) Counts() Counts {
	n := Counts{Preemptions: e.preemptions, Evicted: e.evicted, LockstepWaitMS: e.lostMS}
	if e.off != nil {
		for _, t := range e.off.tiers {
			n.Tiers = append(n.Tiers, t.counts)
		}
	}
	return n
}

func (e *iterEngine) Usage() Usage {
	return Usage{BusyMS: e.busyMS, KVArea: e.kv.area, KVPeak: e.kv.peak}
}

// endStep applies the step's tokens, made at t, and says what came of
// them.
func (e *iterEngine) endStep(t float64) Result {
	var res Result
	for _, b := range e.batch {
		s, r := b.s, b.s.r
		if b.prefill > 0 {
			s.computed += b.prefill
			s.kv = s.computed
			if s.computed < s.target {
				continue
			}
			// The step that ends a prefill samples a token: the first, or
			// the next one after a recomputation.
			if s.out++; s.out == 1 {
				r.FirstToken, r.LastToken = t, t
				res.First = append(res.First, r)
			} else {
				r.tokenAt(t)
			}
		} else { // decode: one token a step, the run's steps apart
			k := uint64(e.steps)
			s.kv += k
			s.out += k
			e.cacheGenerated(s)
			r.tokenAt(e.start + e.step)
			r.tokensEvery(e.step, e.steps-1)
		}
		if s.out >= s.outputs {
			res.Finished = append(res.Finished, r)
			s.done = true
		}
	}
	e.busy = false
	if len(res.Finished) > 0 {
		e.dropFinished()
	}
	if len(e.removed) > 0 {
		res.Events = append(res.Events, e.event(protocol.Removed{BlockHashes: e.removed}))
	}
	if e.off != nil {
		for _, ev := range e.off.events {
			res.Events = append(res.Events, e.eventOn(ev.tier, ev.data))
		}
		e.off.events = e.off.events[:0]
	}
	for _, st := range e.stored {
		res.Events = append(res.Events, e.event(st))
	}
	e.removed, e.stored = nil, e.stored[:0]
	return res
}

// cacheFull caches the blocks that s's first upto tokens fill (its
// prompt's, and its output's that a next turn names: Request.Generated),
// as vLLM does when it schedules them, and queues their stored events: one
// per run of blocks that chain on each other (a block another request
// cached first breaks the run, and stays this request's own).
func (e *iterEngine) cacheFull(s *iterSeq, upto uint64) {
	e.cacheBlocks(s, int(s.computed/e.cfg.BlockSize), upto)
}

// cacheGenerated caches the output blocks a decode filled, from where the
// last call stopped (a decode comes a token a step: walking from the
// prompt's end each time would cost the output's square).
func (e *iterEngine) cacheGenerated(s *iterSeq) {
	if len(s.r.Generated) > 0 {
		s.genCached = e.cacheBlocks(s, max(s.genCached, int(s.computed/e.cfg.BlockSize)), s.kv)
	}
}

// cacheBlocks caches s's blocks from the one at index from to those its
// first upto tokens fill, and returns the index past the last.
func (e *iterEngine) cacheBlocks(s *iterSeq, from int, upto uint64) int {
	r, bs := s.r, e.cfg.BlockSize
	full := min(int(r.InputTokens/bs), len(r.Seq))
	last := min(int(upto/bs), full+len(r.Generated))
	var run protocol.Stored
	flush := func() {
		if len(run.Blocks) > 0 {
			e.stored = append(e.stored, run)
			run = protocol.Stored{}
		}
	}
	for i := from; i < last; i++ {
		seq, local := r.block(i, full)
		b := &e.blocks[s.blocks[i]]
		if b.cached || e.cached.find(seq) != noBlock {
			flush()
			continue
		}
		b.cached, b.hash = true, seq
		e.cached.insert(b.hash, s.blocks[i])
		if e.off != nil {
			e.noteBlock(s.blocks[i], r, i, full)
		}
		if len(run.Blocks) == 0 && i > 0 {
			p, _ := r.block(i-1, full)
			run.ParentHash, run.Path = &p, r.path(i, full)
		}
		run.Blocks = append(run.Blocks, protocol.StoredBlock{BlockHash: b.hash, TokensHash: local})
	}
	flush()
	return max(from, last)
}

// dropFinished takes the ended requests out of the running list, in one
// pass, giving their blocks back in running order.
func (e *iterEngine) dropFinished() {
	kept := e.running[:0]
	for _, s := range e.running {
		if s.done {
			e.release(s)
			continue
		}
		kept = append(kept, s)
	}
	clear(e.running[len(kept):])
	e.running = kept
}
