package cluster

import (
	"math"

	"github.com/offline-router/offline-router/internal/protocol"
)

// simpleWorker is a rank under the simple model: requests admitted in
// FIFO order while they fit, one prefill server that computes their
// uncached tokens at PrefillTokensPerMS, then a fixed DecodeMSPerToken
// for each output token after the first; a prefix cache of blocks
// (runCache), least recently used evicted first.
type simpleWorker struct {
	cfg *Config
	publisher
	cache         *runCache
	running       int
	backlog       uint64 // uncached tokens admitted and not yet prefilled
	prefillFreeAt float64
	waiting       []*Request  // enqueued here, not admitted yet (FIFO)
	spare         [][]heldRun // run lists of requests that ended, to reuse
	// evicted and stored hold the last removed and stored events' blocks,
	// reused: at 16-token blocks a fresh slice per event was a sixth of the
	// heap. The router is done with an event when it answers (the host
	// copies it for a pool of several replicas, whose answers can admit
	// more here before the next replica has it).
	evicted []protocol.SequenceHash
	stored  []protocol.StoredBlock
	// events and reqs back a Result's one event and one request. The host
	// sends a Result's event before anything can call the worker again (a
	// Start nested in its answer reuses events, then), and reads its
	// request after; Fire, the one that fills reqs, is never nested.
	events        [1]protocol.KVEvent
	reqs          [1]*Request
	evictedBlocks int // over the run
	kv            kvGauge
	spans         busySpans
}

func newSimpleWorker(cfg *Config, pub publisher) *simpleWorker {
	return &simpleWorker{cfg: cfg, publisher: pub, cache: newRunCache()}
}

// Enqueue queues r; the simple model runs whatever it is given.
func (w *simpleWorker) Enqueue(r *Request, outputs uint64, _ bool) bool {
	r.outputs = outputs
	w.waiting = append(w.waiting, r)
	return true
}

// Start admits the first waiting request if it fits, and starts its
// prefill when the prefill server is free.
func (w *simpleWorker) Start(t float64) (Result, bool) {
	if len(w.waiting) == 0 {
		return Result{}, false
	}
	r := w.waiting[0]
	evicted, ok := w.admit(r)
	if !ok {
		return Result{}, false
	}
	w.waiting = w.waiting[1:]
	var res Result
	if len(evicted) > 0 {
		w.events[0] = w.event(protocol.Removed{BlockHashes: evicted})
		res.Events = w.events[:]
	}
	r.PrefillStart = math.Max(t, w.prefillFreeAt)
	w.prefillFreeAt = r.PrefillStart + float64(r.Uncached)/w.cfg.PrefillTokensPerMS
	res.Timer = Timer{At: w.prefillFreeAt, Kind: PrefillDone, Req: r}
	w.kv.set(t, w.blocksInUse())
	w.spans.add(r.PrefillStart, w.prefillFreeAt+w.cfg.decodeMS(r.outputs))
	return res, true
}

// Fire ends a request's prefill (its blocks are stored, its first token
// made: prefill makes it, as in vLLM; each later one takes a decode step)
// or its decode (its blocks released).
func (w *simpleWorker) Fire(t float64, tm Timer) Result {
	r := tm.Req
	w.reqs[0] = r
	if tm.Kind == DecodeDone {
		w.release(r)
		w.kv.set(t, w.blocksInUse())
		return Result{Finished: w.reqs[:]}
	}
	r.FirstToken = t
	w.backlog -= r.Uncached
	res := Result{First: w.reqs[:], Timer: Timer{At: t + w.cfg.decodeMS(r.outputs), Kind: DecodeDone, Req: r}}
	if w.store(r) {
		res.Events = w.events[:]
	}
	return res
}

// admit tries to start r on the worker: a free sequence slot, a prefill
// backlog that stays within max_num_batched_tokens (or none at all, so that
// a long prompt still runs), and room in the cache for the blocks it lacks
// (evicting unreferenced blocks, least recently used first). It returns the
// evicted hashes, and false if r must wait. A request alone on its worker is
// always admitted; blocks that do not fit are then simply not cached.
func (w *simpleWorker) admit(r *Request) ([]protocol.SequenceHash, bool) {
	cfg := w.cfg
	if w.running >= cfg.MaxNumSeqs {
		return nil, false
	}
	c := w.cache
	hit, found := c.match(r.Seq)
	uncached := r.InputTokens - min(uint64(hit)*cfg.BlockSize, r.InputTokens)
	if w.backlog > 0 && w.backlog+uncached > cfg.MaxNumBatchedTokens {
		return nil, false
	}
	if free := cfg.TotalKVBlocks - c.used + c.idle; w.running > 0 && len(r.Seq)-found > free {
		return nil, false
	}
	r.HitBlocks, r.Uncached = hit, uncached
	w.backlog += uncached
	if r.runs == nil {
		if n := len(w.spare); n > 0 {
			r.runs, w.spare = w.spare[n-1], w.spare[:n-1]
		}
	}
	w.evicted, r.cachedBlocks = c.take(r, found, cfg.TotalKVBlocks, w.evicted[:0])
	w.evictedBlocks += len(w.evicted)
	w.running++
	return w.evicted, true
}

// Counts: the simple model never preempts.
func (w *simpleWorker) Counts() Counts {
	return Counts{Evicted: w.evictedBlocks, CacheRunOps: w.cache.ops.runs, CacheBlockOps: w.cache.ops.blocks}
}

func (w *simpleWorker) Usage() Usage {
	return Usage{BusyMS: w.spans.total(), KVArea: w.kv.area, KVPeak: w.kv.peak}
}

// blocksInUse is how many cached blocks admitted requests reference (the
// idle ones, kept for later hits, are free to evict, as in vLLM's free
// queue).
func (w *simpleWorker) blocksInUse() int { return w.cache.used - w.cache.idle }

// store marks the blocks r computed as cached and, if there are any, puts
// the stored event for the router in w.events: the chain after r's cached
// prefix, up to the first block that did not fit.
func (w *simpleWorker) store(r *Request) bool {
	if r.cachedBlocks <= r.HitBlocks {
		return false
	}
	w.cache.store(r, r.HitBlocks)
	var st protocol.Stored
	if r.HitBlocks > 0 {
		p := r.Seq[r.HitBlocks-1]
		st.ParentHash, st.Path = &p, r.Local[:r.HitBlocks]
	}
	w.stored = w.stored[:0]
	for i := r.HitBlocks; i < r.cachedBlocks; i++ {
		w.stored = append(w.stored, protocol.StoredBlock{BlockHash: r.Seq[i], TokensHash: r.Local[i]})
	}
	st.Blocks = w.stored
	w.events[0] = w.event(st)
	return true
}

// release drops r's references, so that its blocks no other request holds
// become idle, deepest first.
func (w *simpleWorker) release(r *Request) {
	w.cache.release(r)
	w.spare = append(w.spare, r.runs)
	r.runs = nil
	w.running--
}
