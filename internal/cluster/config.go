// Package cluster is the simulated cluster's workers: how each worker model
// (iteration, simple) runs the requests dispatched to it, what it caches,
// and the KV events it publishes. A model knows nothing of the replay host
// that drives it: it takes a Request view, and reports what it did in a
// Result.
package cluster

import (
	"fmt"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Config is the simulated cluster: identical workers, each with a prefix
// KV cache, run by one worker model. Its JSON is a replay report's
// "cluster".
type Config struct {
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
	KVTransferGBps float64 `json:"kv_transfer_gbps,omitempty"`
	DPSize         int     `json:"dp_size"` // attention data-parallel ranks per worker, each its own cache and batch
	// DPAttention steps a worker's DP ranks together, each step as long as
	// its slowest rank's (lockstep.go): DP attention over an
	// expert-parallel MoE. Off, the ranks are independent workers.
	DPAttention         bool    `json:"dp_attention,omitempty"`
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
	// HostTier and DiskTier, when set, are each rank's lower tiers of KV
	// cache (offload.go).
	HostTier *TierConfig `json:"host_tier,omitempty"`
	DiskTier *TierConfig `json:"disk_tier,omitempty"`
	// Hardware, when set (a cluster file), are the aggregated cluster's
	// pools, each on its own hardware (hardware.go): Workers is their sum,
	// and the per-worker fields above are each pool's instead.
	Hardware []Hardware `json:"hardware,omitempty"`
	// Description is the cluster file's, when it gives one.
	Description string `json:"description,omitempty"`
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
func (c *Config) PoolSizes() []PoolSize {
	dp := max(c.DPSize, 1)
	if !c.Disaggregated() {
		return []PoolSize{{string(protocol.RoleAggregated), c.Workers, dp}}
	}
	return []PoolSize{{string(protocol.RolePrefill), c.PrefillWorkers, dp}, {string(protocol.RoleDecode), c.DecodeWorkers, dp}}
}

// Disaggregated reports whether prefill and decode run in pools of their own.
func (c *Config) Disaggregated() bool { return c.PrefillWorkers > 0 }

// decodeMS is the simple model's decode time of a request of outputs
// tokens: prefill made the first. The product is rounded alone (no fused
// multiply-add), so that every platform replays to the same numbers.
func (c *Config) decodeMS(outputs uint64) float64 {
	return float64(float64(max(outputs, 1)-1) * c.DecodeMSPerToken)
}

// TransferMS is how long a prompt of n tokens' KV takes to reach its
// decode worker. The product is rounded alone: the same on every platform.
func (c *Config) TransferMS(n uint64) float64 {
	bytes := float64(float64(n) * float64(c.Profile.Model.KVBytesPerToken()))
	return bytes / float64(c.KVTransferGBps*1e6) // GB/s is 1e6 bytes a ms
}

// LoRACapacity is the adapters a worker holds at once: MaxGPULoRACount,
// else Dynamo's default.
func (c *Config) LoRACapacity() uint32 {
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

// FieldError is a Config field out of its range: Field is its JSON key,
// which a command line translates into its flag.
type FieldError struct {
	Field string
	Value any
	Want  string // what the field takes
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s %v: expected %s", e.Field, e.Value, e.Want)
}

// Check says what is wrong with the cluster, as a *FieldError.
func (c *Config) Check() error {
	switch {
	case c.Workers < 1 || c.Workers > protocol.MaxRanks:
		return &FieldError{"workers", c.Workers, fmt.Sprintf("1 to %d (the router holds at most %d ranks)", protocol.MaxRanks, protocol.MaxRanks)}
	case c.DPSize < 1 || c.DPSize > min(protocol.MaxDPSize, protocol.MaxRanks/c.Workers):
		return &FieldError{"dp_size", c.DPSize, fmt.Sprintf("1 to %d (a worker has at most %d DP ranks, and the router holds at most %d ranks, %d workers × dp size)",
			min(protocol.MaxDPSize, protocol.MaxRanks/c.Workers), protocol.MaxDPSize, protocol.MaxRanks, c.Workers)}
	case c.DPAttention && (c.DPSize < 2 || c.Engine != EngineIteration):
		return &FieldError{"dp_attention", true, "DP ranks to step together (--dp-size 2 or more) under the iteration engine"}
	case len(c.Hardware) > 0:
		return nil // each pool's is checked as it is sized
	case c.TotalKVBlocks < 1:
		return &FieldError{"worker_kv_blocks", c.TotalKVBlocks, "at least 1"}
	case c.MaxNumSeqs < 1:
		return &FieldError{"worker_max_num_seqs", c.MaxNumSeqs, "at least 1"}
	// Simulated times must stay within what the router takes (2^53 ms).
	case !(c.PrefillTokensPerMS >= 1e-6 && c.PrefillTokensPerMS <= protocol.MaxNumber):
		return &FieldError{"worker_prefill_tokens_per_ms", c.PrefillTokensPerMS, "1e-6 to 2^53"}
	case !(c.DecodeMSPerToken >= 0 && c.DecodeMSPerToken <= 1e6):
		return &FieldError{"worker_decode_ms_per_token", c.DecodeMSPerToken, "a finite number from 0 to 1e6"}
	case c.MaxGPULoRACount != nil && (*c.MaxGPULoRACount < 0 || *c.MaxGPULoRACount > protocol.MaxLoRACount):
		return &FieldError{"max_gpu_lora_count", *c.MaxGPULoRACount, fmt.Sprintf("0 to %d adapters a worker holds at once", protocol.MaxLoRACount)}
	}
	return nil
}

// Default is the cluster replay uses unless told otherwise: the iteration
// engine with the shipped profile.
func Default(workers int) Config {
	p := DefaultProfile()
	return Config{Workers: workers, DPSize: 1, BlockSize: 512, KVTokens: DefaultKVTokens, KVSizing: KVSizingTokens,
		TotalKVBlocks: DefaultKVTokens / 512, MaxNumSeqs: 64,
		MaxNumBatchedTokens: 8192, PrefillTokensPerMS: 20, DecodeMSPerToken: 15, Engine: EngineIteration, Profile: &p}
}

// Simple is Default under the simple worker model.
func Simple(workers int) Config {
	c := Default(workers)
	c.Engine, c.Profile = EngineSimple, nil
	return c
}
