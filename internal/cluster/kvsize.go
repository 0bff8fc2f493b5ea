package cluster

import (
	"fmt"
	"math"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
)

// How a worker's KV capacity is given (Config.KVSizing).
const (
	KVSizingTokens  = "tokens"  // worker_kv_tokens given
	KVSizingProfile = "profile" // worker_kv_tokens auto: the profile's memory, as vLLM sizes its cache
	KVSizingBlocks  = "blocks"  // worker_kv_blocks given, an override
)

// DefaultKVTokens is a worker's KV capacity unless told otherwise: 912
// blocks of 512 tokens, the cache BLIS gives Llama-3.1-8B on one H100
// (29,205 blocks of 16 tokens) in whole 512-token blocks. It is counted in
// tokens so that another --block-size keeps the same cluster.
const DefaultKVTokens = 912 * 512

// DefaultGPUMemoryUtilization is vLLM's --gpu-memory-utilization default.
const DefaultGPUMemoryUtilization = 0.9

// SizeKV makes each worker's blocks from its capacity at BlockSize: the
// whole blocks its tokens hold, floor(tokens / block size). Tokens past
// the last whole block are left unused, as vLLM leaves the memory past its
// last whole block. With blocks given (KVSizingBlocks), KVTokens becomes
// what they hold. An error is a *FieldError.
func (c *Config) SizeKV() error {
	const maxTokens = protocol.MaxNumber // what the router and a report hold exactly
	if len(c.Hardware) > 0 {
		return c.sizeHardware()
	}
	switch c.KVSizing {
	case KVSizingBlocks:
		if c.TotalKVBlocks < 1 || uint64(c.TotalKVBlocks) > maxTokens/c.BlockSize {
			return &FieldError{"worker_kv_blocks", c.TotalKVBlocks, fmt.Sprintf("1 to %d blocks at a block size of %d (at most 2^53 tokens)", maxTokens/c.BlockSize, c.BlockSize)}
		}
		c.KVTokens = uint64(c.TotalKVBlocks) * c.BlockSize
	case KVSizingProfile:
		if c.Profile == nil {
			return &FieldError{"worker_kv_tokens", "auto", "a number of tokens: auto sizes the cache from the engine profile, which the simple engine has none of"}
		}
		if u := c.GPUMemoryUtilization; !(u > 0 && u <= 1) {
			return &FieldError{"gpu_memory_utilization", u, "a share above 0 and at most 1"}
		}
		tokens, err := c.Profile.KVTokens(c.GPUMemoryUtilization)
		if err != nil {
			return &FieldError{"worker_kv_tokens", "auto", fmt.Sprintf("a profile that sizes the cache at a memory utilization of %v: the engine profile's %v", c.GPUMemoryUtilization, err)}
		}
		if tokens < c.BlockSize {
			return &FieldError{"worker_kv_tokens", "auto", fmt.Sprintf("room for a block of %d tokens: the profile's memory leaves room for %d tokens of KV", c.BlockSize, tokens)}
		}
		c.KVTokens = min(tokens, maxTokens)
	case KVSizingTokens:
		if c.KVTokens < c.BlockSize || c.KVTokens > maxTokens {
			return &FieldError{"worker_kv_tokens", c.KVTokens, fmt.Sprintf("one block (%d tokens at a block size of %d) to 2^53 tokens, or auto", c.BlockSize, c.BlockSize)}
		}
	default:
		return &FieldError{"worker_kv_sizing", fmt.Sprintf("%q", c.KVSizing), fmt.Sprintf("%s, %s or %s", KVSizingTokens, KVSizingProfile, KVSizingBlocks)}
	}
	c.TotalKVBlocks = int(c.KVTokens / c.BlockSize)
	if err := c.sizeTiers(); err != nil {
		return err
	}
	return c.checkTiers()
}

// Memory is what a worker's GPU holds besides its KV cache, in bytes, as
// vLLM's profile run measures it and logs it at start-up (model loading;
// "Memory profiling takes ...": weights, peak activation, non-torch).
type Memory struct {
	Source          string `json:"source,omitempty"` // where the numbers come from
	GPUBytes        uint64 `json:"gpu_bytes"`        // the GPU's total memory
	WeightBytes     uint64 `json:"weight_bytes"`
	ActivationBytes uint64 `json:"activation_bytes"` // peak activation of a step at max_num_batched_tokens
	NonTorchBytes   uint64 `json:"non_torch_bytes"`  // CUDA context, NCCL and other memory outside PyTorch's allocator
}

// KVTokens is the KV cache the profile's GPU holds at the utilisation
// share util, as vLLM (v1 gpu_worker.determine_available_memory) sizes it:
// gpu × util − (weights + peak activation + non-torch), over the KV bytes
// a token takes (model shape), rounded down.
func (p Profile) KVTokens(util float64) (uint64, error) {
	if !(util > 0 && util <= 1) {
		return 0, fmt.Errorf("memory utilization %v: expected a share above 0 and at most 1", util)
	}
	if err := p.CheckModel(); err != nil {
		return 0, err
	}
	if p.Memory == nil {
		return 0, fmt.Errorf("field \"memory\": required (%s)", strings.Join(dotted("memory", memoryKeys), ", "))
	}
	m := p.Memory
	taken := float64(m.WeightBytes) + float64(m.ActivationBytes) + float64(m.NonTorchBytes)
	free := float64(float64(m.GPUBytes)*util) - taken // the product rounded alone: no fused multiply-add
	if !(free > 0) {
		return 0, fmt.Errorf("field \"memory\": %.0f of its %d GPU bytes leave nothing for the KV cache after %.0f bytes of weights, activation and non-torch memory",
			float64(float64(m.GPUBytes)*util), m.GPUBytes, taken)
	}
	return uint64(math.Floor(free / float64(p.Model.KVBytesPerToken()))), nil
}
