package replay

import (
	"container/list"
	"fmt"
	"io"

	"github.com/offline-router/offline-router/internal/protocol"
)

// ClusterConfig is the simulated cluster: identical workers, each with a
// prefix KV cache and one prefill server.
type ClusterConfig struct {
	Workers int `json:"workers"` // of the aggregated cluster
	// PrefillWorkers and DecodeWorkers, when set, disaggregate the cluster
	// into a prefill pool and a decode pool, each behind its own router.
	PrefillWorkers int `json:"prefill_workers,omitempty"`
	DecodeWorkers  int `json:"decode_workers,omitempty"`
	// KVTransferGBps is the bandwidth a prompt's KV crosses from its
	// prefill worker to its decode worker at, in GB/s.
	KVTransferGBps      float64 `json:"kv_transfer_gbps,omitempty"`
	DPSize              int     `json:"dp_size"` // attention data-parallel ranks per worker, each its own cache and batch
	BlockSize           uint64  `json:"block_size"`
	TotalKVBlocks       int     `json:"worker_kv_blocks"`              // cache capacity per worker, in blocks
	MaxNumSeqs          int     `json:"worker_max_num_seqs"`           // requests running at once per worker
	MaxNumBatchedTokens uint64  `json:"worker_max_num_batched_tokens"` // prefill backlog a worker takes on; also reported to the router
	PrefillTokensPerMS  float64 `json:"worker_prefill_tokens_per_ms"`  // prefill speed of uncached tokens
	DecodeMSPerToken    float64 `json:"worker_decode_ms_per_token"`    // decode time per output token after the first, which prefill makes
	// Engine is the worker model: iteration (vLLM's scheduler, step by
	// step, timed by Profile) or simple (one FIFO prefill server at
	// PrefillTokensPerMS, DecodeMSPerToken a token).
	Engine  string   `json:"engine"`
	Profile *Profile `json:"profile,omitempty"` // the iteration engine's
}

// Disaggregated reports whether prefill and decode run in pools of their own.
func (c *ClusterConfig) Disaggregated() bool { return c.PrefillWorkers > 0 }

// poolSpec is one pool to bring up: its role, its workers, its streams.
type poolSpec struct {
	role                protocol.Role
	workers             int
	commands, responses io.Writer
}

// pools are the pools the cluster runs: the whole cluster, or a prefill
// pool (on opt's streams) and a decode pool (on its decode streams).
func (c *ClusterConfig) pools(opt Options) []poolSpec {
	if !c.Disaggregated() {
		return []poolSpec{{"", c.Workers, opt.Commands, opt.Responses}}
	}
	return []poolSpec{{protocol.RolePrefill, c.PrefillWorkers, opt.Commands, opt.Responses},
		{protocol.RoleDecode, c.DecodeWorkers, opt.DecodeCommands, opt.DecodeResponses}}
}

// transferMS is how long a prompt of n tokens' KV takes to reach its
// decode worker. The product is rounded alone: the same on every platform.
func (c *ClusterConfig) transferMS(n uint64) float64 {
	bytes := float64(float64(n) * float64(c.Profile.Model.kvBytesPerToken()))
	return bytes / float64(c.KVTransferGBps*1e6) // GB/s is 1e6 bytes a ms
}

// Worker models.
const (
	EngineIteration = "iteration"
	EngineSimple    = "simple"
)

// Check says what is wrong with the cluster, naming the flag.
func (c *ClusterConfig) Check() error {
	switch {
	case c.Workers < 1 || c.Workers > protocol.MaxRanks:
		return fmt.Errorf("--workers %d: expected 1 to %d (the router holds at most %d ranks)", c.Workers, protocol.MaxRanks, protocol.MaxRanks)
	case c.DPSize < 1 || c.DPSize > protocol.MaxRanks/c.Workers:
		return fmt.Errorf("--dp-size %d: expected 1 to %d (the router holds at most %d ranks, %d workers × dp size)", c.DPSize, protocol.MaxRanks/c.Workers, protocol.MaxRanks, c.Workers)
	case c.TotalKVBlocks < 1:
		return fmt.Errorf("--worker-kv-blocks %d: expected at least 1", c.TotalKVBlocks)
	case c.MaxNumSeqs < 1:
		return fmt.Errorf("--worker-max-num-seqs %d: expected at least 1", c.MaxNumSeqs)
	// Simulated times must stay within what the router takes (2^53 ms).
	case !(c.PrefillTokensPerMS >= 1e-6 && c.PrefillTokensPerMS <= protocol.MaxNumber):
		return fmt.Errorf("--worker-prefill-tokens-per-ms %v: expected 1e-6 to 2^53", c.PrefillTokensPerMS)
	case !(c.DecodeMSPerToken >= 0 && c.DecodeMSPerToken <= 1e6):
		return fmt.Errorf("--worker-decode-ms-per-token %v: expected a finite number from 0 to 1e6", c.DecodeMSPerToken)
	}
	return nil
}

// DefaultCluster is the cluster replay uses unless told otherwise: the
// iteration engine with the shipped profile.
func DefaultCluster(workers int) ClusterConfig {
	p := DefaultProfile()
	// 912 blocks of 512 tokens is the KV cache of the shipped profile's
	// hardware: BLIS gives 29205 blocks of 16 tokens for Llama-3.1-8B on
	// one H100.
	return ClusterConfig{Workers: workers, DPSize: 1, BlockSize: 512, TotalKVBlocks: 912, MaxNumSeqs: 64,
		MaxNumBatchedTokens: 8192, PrefillTokensPerMS: 20, DecodeMSPerToken: 15, Engine: EngineIteration, Profile: &p}
}

// SimpleCluster is DefaultCluster under the simple worker model.
func SimpleCluster(workers int) ClusterConfig {
	c := DefaultCluster(workers)
	c.Engine, c.Profile = EngineSimple, nil
	return c
}

// cacheBlock is one block in a worker's KV cache, by sequence hash.
type cacheBlock struct {
	hash   protocol.SequenceHash
	local  protocol.LocalBlockHash
	refs   int
	stored bool          // computed: visible to later requests and to the router
	lru    *list.Element // position among unreferenced blocks; nil while referenced
}

// simWorker is one worker of the simulated cluster.
type simWorker struct {
	id            uint64
	blocks        map[protocol.SequenceHash]*cacheBlock
	idle          *list.List // unreferenced blocks, least recently used first
	running       int
	backlog       uint64 // uncached tokens admitted and not yet prefilled
	prefillFreeAt float64
	waiting       []*simRequest // placed here, not admitted yet (FIFO)
	eventID       uint64
	iter          *iterEngine // the iteration engine; nil under the simple model
	idx           int32       // in (pool, id, rank) order
	dpRank        uint32
	pool          *pool
}

func newWorker(id uint64) *simWorker {
	return &simWorker{id: id, blocks: map[protocol.SequenceHash]*cacheBlock{}, idle: list.New()}
}

// cachedPrefix is how many leading blocks of seq the worker has computed.
func (w *simWorker) cachedPrefix(seq []protocol.SequenceHash) int {
	n := 0
	for n < len(seq) {
		b := w.blocks[seq[n]]
		if b == nil || !b.stored {
			break
		}
		n++
	}
	return n
}

// admit tries to start r on the worker: a free sequence slot, a prefill
// backlog that stays within max_num_batched_tokens (or none at all, so that
// a long prompt still runs), and room in the cache for the blocks it lacks
// (evicting unreferenced blocks, least recently used first). It returns the
// evicted hashes, and false if r must wait. A request alone on its worker is
// always admitted; blocks that do not fit are then simply not cached.
func (w *simWorker) admit(r *simRequest, cfg *ClusterConfig) ([]protocol.SequenceHash, bool) {
	if w.running >= cfg.MaxNumSeqs {
		return nil, false
	}
	hit := w.cachedPrefix(r.seq)
	uncached := r.InputTokens - min(uint64(hit)*cfg.BlockSize, r.InputTokens)
	if w.backlog > 0 && w.backlog+uncached > cfg.MaxNumBatchedTokens {
		return nil, false
	}
	missing := 0
	for _, h := range r.seq {
		if w.blocks[h] == nil {
			missing++
		}
	}
	free := cfg.TotalKVBlocks - len(w.blocks) + w.idle.Len()
	if missing > free && w.running > 0 {
		return nil, false
	}
	r.hitBlocks, r.uncached = hit, uncached
	w.backlog += uncached
	var evicted []protocol.SequenceHash
	for _, h := range r.seq {
		if b := w.blocks[h]; b != nil {
			w.ref(b)
		}
	}
	for i, h := range r.seq {
		if w.blocks[h] != nil {
			continue
		}
		for len(w.blocks) >= cfg.TotalKVBlocks && w.idle.Len() > 0 {
			evicted = append(evicted, w.evictOne())
		}
		if len(w.blocks) >= cfg.TotalKVBlocks {
			break // the rest of the prompt is not cached
		}
		b := &cacheBlock{hash: h, local: r.local[i], refs: 1}
		w.blocks[h] = b
		r.owned = append(r.owned, b)
	}
	w.running++
	return evicted, true
}

func (w *simWorker) ref(b *cacheBlock) {
	if b.refs == 0 && b.lru != nil {
		w.idle.Remove(b.lru)
		b.lru = nil
	}
	b.refs++
}

// evictOne drops the least recently used unreferenced block.
func (w *simWorker) evictOne() protocol.SequenceHash {
	b := w.idle.Remove(w.idle.Front()).(*cacheBlock)
	delete(w.blocks, b.hash)
	return b.hash
}

// store marks the blocks r computed as cached and returns the stored event
// for the router: the chain after r's cached prefix.
func (w *simWorker) store(r *simRequest) *protocol.KVEvent {
	var st protocol.Stored
	if r.hitBlocks > 0 {
		p := r.seq[r.hitBlocks-1]
		st.ParentHash = &p
	}
	for i := r.hitBlocks; i < len(r.seq); i++ {
		b := w.blocks[r.seq[i]]
		if b == nil {
			break // not cached (no room): the chain stops here
		}
		b.stored = true
		st.Blocks = append(st.Blocks, protocol.StoredBlock{BlockHash: b.hash, TokensHash: b.local})
	}
	if len(st.Blocks) == 0 {
		return nil
	}
	w.eventID++
	return &protocol.KVEvent{WorkerID: w.id, DPRank: w.dpRank, StorageTier: "device", EventID: w.eventID, Data: st}
}

// release drops r's references, deepest block first, so that among blocks
// freed together a child is evicted before its parent.
func (w *simWorker) release(r *simRequest) {
	for i := len(r.seq) - 1; i >= 0; i-- {
		b := w.blocks[r.seq[i]]
		if b == nil {
			continue
		}
		if b.refs--; b.refs == 0 {
			if !b.stored {
				delete(w.blocks, b.hash) // never computed: nothing to keep
				continue
			}
			b.lru = w.idle.PushBack(b)
		}
	}
	w.running--
}

// removedEvent reports evicted blocks to the router.
func (w *simWorker) removedEvent(hashes []protocol.SequenceHash) *protocol.KVEvent {
	w.eventID++
	return &protocol.KVEvent{WorkerID: w.id, DPRank: w.dpRank, StorageTier: "device", EventID: w.eventID, Data: protocol.Removed{BlockHashes: hashes}}
}
