package replay

import (
	"fmt"
	"io"

	"github.com/offline-router/offline-router/internal/protocol"
)

// ClusterConfig is the simulated cluster: identical workers, each with a
// prefix KV cache and one prefill server.
type ClusterConfig struct {
	// Workers are the aggregated cluster's; disaggregated, the larger
	// pool's (what the router's rank checks take). Pools gives each pool's
	// size.
	Workers int `json:"workers"`
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

	// KVTokens is each worker's KV cache capacity in tokens, and
	// TotalKVBlocks the blocks of BlockSize it makes (SizeKV), by KVSizing:
	// tokens (the tokens given), profile (the engine profile's memory at
	// GPUMemoryUtilization, as vLLM sizes its cache) or blocks (the blocks
	// given, an override; KVTokens is then what they hold).
	KVTokens             uint64  `json:"worker_kv_tokens"`
	KVSizing             string  `json:"worker_kv_sizing"`
	GPUMemoryUtilization float64 `json:"gpu_memory_utilization,omitempty"` // the share of GPU memory vLLM takes (profile sizing only)

	// Engine is the worker model: iteration (vLLM's scheduler, step by
	// step, timed by Profile) or simple (one FIFO prefill server at
	// PrefillTokensPerMS, DecodeMSPerToken a token).
	Engine string `json:"engine"`
	// MaxGPULoRACount is how many LoRA adapters a worker holds at once
	// (vLLM's --max-loras), which its worker_ready says when a request
	// runs under an adapter; nil for Dynamo's default (LoRACapacity).
	MaxGPULoRACount *int     `json:"max_gpu_lora_count,omitempty"`
	Profile         *Profile `json:"profile,omitempty"` // the iteration engine's
	// Pools are the pools the cluster runs, as a report states them (from
	// the fields above): the aggregated one, or prefill then decode.
	Pools []PoolSize `json:"pools,omitempty"`
}

// PoolSize is one pool of workers: its role (aggregated, prefill or
// decode), its workers and each worker's DP ranks.
type PoolSize struct {
	Role    string `json:"role"`
	Workers int    `json:"workers"`
	DPSize  int    `json:"dp_size"`
}

// PoolSizes are the cluster's pools.
func (c *ClusterConfig) PoolSizes() []PoolSize {
	dp := max(c.DPSize, 1)
	if !c.Disaggregated() {
		return []PoolSize{{PoolAggregated, c.Workers, dp}}
	}
	return []PoolSize{{PoolPrefill, c.PrefillWorkers, dp}, {PoolDecode, c.DecodeWorkers, dp}}
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

// decodeMS is the simple model's decode time of a request of outputs
// tokens: prefill made the first. The product is rounded alone (no fused
// multiply-add), so that every platform replays to the same numbers.
func (c *ClusterConfig) decodeMS(outputs uint64) float64 {
	return float64(float64(max(outputs, 1)-1) * c.DecodeMSPerToken)
}

// transferMS is how long a prompt of n tokens' KV takes to reach its
// decode worker. The product is rounded alone: the same on every platform.
func (c *ClusterConfig) transferMS(n uint64) float64 {
	bytes := float64(float64(n) * float64(c.Profile.Model.kvBytesPerToken()))
	return bytes / float64(c.KVTransferGBps*1e6) // GB/s is 1e6 bytes a ms
}

// LoRACapacity is the adapters a worker holds at once: MaxGPULoRACount,
// else Dynamo's default.
func (c *ClusterConfig) LoRACapacity() uint32 {
	if c.MaxGPULoRACount == nil {
		return protocol.DefaultLoRACapacity
	}
	return uint32(*c.MaxGPULoRACount)
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
	case c.DPSize < 1 || c.DPSize > min(protocol.MaxDPSize, protocol.MaxRanks/c.Workers):
		return fmt.Errorf("--dp-size %d: expected 1 to %d (a worker has at most %d DP ranks, and the router holds at most %d ranks, %d workers × dp size)",
			c.DPSize, min(protocol.MaxDPSize, protocol.MaxRanks/c.Workers), protocol.MaxDPSize, protocol.MaxRanks, c.Workers)
	case c.TotalKVBlocks < 1:
		return fmt.Errorf("--worker-kv-blocks %d: expected at least 1", c.TotalKVBlocks)
	case c.MaxNumSeqs < 1:
		return fmt.Errorf("--worker-max-num-seqs %d: expected at least 1", c.MaxNumSeqs)
	// Simulated times must stay within what the router takes (2^53 ms).
	case !(c.PrefillTokensPerMS >= 1e-6 && c.PrefillTokensPerMS <= protocol.MaxNumber):
		return fmt.Errorf("--worker-prefill-tokens-per-ms %v: expected 1e-6 to 2^53", c.PrefillTokensPerMS)
	case !(c.DecodeMSPerToken >= 0 && c.DecodeMSPerToken <= 1e6):
		return fmt.Errorf("--worker-decode-ms-per-token %v: expected a finite number from 0 to 1e6", c.DecodeMSPerToken)
	case c.MaxGPULoRACount != nil && (*c.MaxGPULoRACount < 0 || *c.MaxGPULoRACount > protocol.MaxLoRACount):
		return fmt.Errorf("--max-gpu-lora-count %d: expected 0 to %d adapters a worker holds at once", *c.MaxGPULoRACount, protocol.MaxLoRACount)
	}
	return nil
}

// DefaultCluster is the cluster replay uses unless told otherwise: the
// iteration engine with the shipped profile.
func DefaultCluster(workers int) ClusterConfig {
	p := DefaultProfile()
	return ClusterConfig{Workers: workers, DPSize: 1, BlockSize: 512, KVTokens: DefaultKVTokens, KVSizing: KVSizingTokens,
		TotalKVBlocks: DefaultKVTokens / 512, MaxNumSeqs: 64,
		MaxNumBatchedTokens: 8192, PrefillTokensPerMS: 20, DecodeMSPerToken: 15, Engine: EngineIteration, Profile: &p}
}

// SimpleCluster is DefaultCluster under the simple worker model.
func SimpleCluster(workers int) ClusterConfig {
	c := DefaultCluster(workers)
	c.Engine, c.Profile = EngineSimple, nil
	return c
}

// simWorker is one worker of the simulated cluster.
type simWorker struct {
	id            uint64
	cache         *runCache // the simple model's; nil under the iteration engine
	running       int
	backlog       uint64 // uncached tokens admitted and not yet prefilled
	prefillFreeAt float64
	waiting       []*simRequest // placed here, not admitted yet (FIFO)
	eventID       uint64
	iter          *iterEngine // the iteration engine; nil under the simple model
	idx           int32       // in (pool, id, rank) order
	dpRank        uint32
	pool          *pool
	spare         [][]heldRun // run lists of requests that ended, to reuse
	// evicted and stored hold the last removed and stored events' blocks,
	// reused: at 16-token blocks a fresh slice per event was a sixth of the
	// heap. The router is done with an event when it answers (observe
	// copies it for a pool of several replicas, whose answers can admit
	// more here before the next replica has it).
	evicted []protocol.SequenceHash
	stored  []protocol.StoredBlock
	// evictedBlocks counts the simple model's evictions over the run.
	evictedBlocks int
	util          workerUtil // what its busy share and KV cache usage are made from
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
	c := w.cache
	hit, found := c.match(r.seq)
	uncached := r.InputTokens - min(uint64(hit)*cfg.BlockSize, r.InputTokens)
	if w.backlog > 0 && w.backlog+uncached > cfg.MaxNumBatchedTokens {
		return nil, false
	}
	if free := cfg.TotalKVBlocks - c.used + c.idle; w.running > 0 && len(r.seq)-found > free {
		return nil, false
	}
	r.hitBlocks, r.uncached = hit, uncached
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

// counts are the preemptions the worker made and the cached blocks it
// evicted, over the run (the simple model never preempts).
func (w *simWorker) counts() (preemptions, evicted int) {
	if w.iter != nil {
		return w.iter.preemptions, w.iter.evicted
	}
	return 0, w.evictedBlocks
}

// blocksInUse is how many of the simple model's cached blocks admitted
// requests reference (the idle ones, kept for later hits, are free to
// evict, as in vLLM's free queue).
func (w *simWorker) blocksInUse() int { return w.cache.used - w.cache.idle }

// store marks the blocks r computed as cached and returns the stored event
// for the router: the chain after r's cached prefix, up to the first block
// that did not fit.
func (w *simWorker) store(r *simRequest) *protocol.KVEvent {
	if r.cachedBlocks <= r.hitBlocks {
		return nil
	}
	w.cache.store(r, r.hitBlocks)
	var st protocol.Stored
	if r.hitBlocks > 0 {
		p := r.seq[r.hitBlocks-1]
		st.ParentHash, st.Path = &p, r.local[:r.hitBlocks]
	}
	w.stored = w.stored[:0]
	for i := r.hitBlocks; i < r.cachedBlocks; i++ {
		w.stored = append(w.stored, protocol.StoredBlock{BlockHash: r.seq[i], TokensHash: r.local[i]})
	}
	st.Blocks = w.stored
	w.eventID++
	return &protocol.KVEvent{WorkerID: w.id, DPRank: w.dpRank, StorageTier: "device", EventID: w.eventID, Data: st}
}

// release drops r's references, so that its blocks no other request holds
// become idle, deepest first.
func (w *simWorker) release(r *simRequest) {
	w.cache.release(r)
	w.spare = append(w.spare, r.runs)
	r.runs = nil
	w.running--
}

// removedEvent reports evicted blocks to the router.
func (w *simWorker) removedEvent(hashes []protocol.SequenceHash) *protocol.KVEvent {
	w.eventID++
	return &protocol.KVEvent{WorkerID: w.id, DPRank: w.dpRank, StorageTier: "device", EventID: w.eventID, Data: protocol.Removed{BlockHashes: hashes}}
}
