package cluster

import "fmt"

// Hardware is one pool of an aggregated cluster's workers on hardware of
// their own (a cluster file's pool): its engine profile, its count and
// each worker's KV cache and limits, as the one-pool fields give them for
// a homogeneous cluster.
type Hardware struct {
	Name                 string      `json:"name"`
	Workers              int         `json:"workers"`
	Profile              *Profile    `json:"profile"`
	KVTokens             uint64      `json:"worker_kv_tokens"`
	KVSizing             string      `json:"worker_kv_sizing"`
	TotalKVBlocks        int         `json:"worker_kv_blocks"`
	GPUMemoryUtilization float64     `json:"gpu_memory_utilization,omitempty"`
	MaxNumSeqs           int         `json:"worker_max_num_seqs"`
	MaxNumBatchedTokens  uint64      `json:"worker_max_num_batched_tokens"`
	HostTier             *TierConfig `json:"host_tier,omitempty"`
	DiskTier             *TierConfig `json:"disk_tier,omitempty"`
	// RelativeSpeed is the pool's speed against the cluster's fastest (1):
	// the fastest pool's prefill step of speedStepTokens tokens (base_ms +
	// per_prefill_token_ms × 8192) over this pool's, whatever each pool's
	// batch limit. It is what a per-worker device weight is made from.
	RelativeSpeed float64 `json:"relative_speed"`

	line int // where the cluster file gives it, for errors found as it is sized
}

// speedStepTokens is the prefill step relative speeds compare: vLLM's
// default max_num_batched_tokens for online serving.
const speedStepTokens = 8192

// WorkerPool is a pool of identical workers and the configuration each
// runs under: the cluster's one, or a hardware pool's.
type WorkerPool struct {
	Name    string // "" for a homogeneous cluster
	Workers int
	Config  *Config
}

// WorkerPools are the cluster's pools of identical workers, in worker id
// order: the whole cluster, or its hardware pools, each its own Config
// (the cluster's, with the pool's profile, sizes and tiers). Each call
// makes new Configs: a caller keeps the ones its workers run under.
func (c *Config) WorkerPools() []WorkerPool {
	if len(c.Hardware) == 0 {
		return []WorkerPool{{Workers: c.Workers, Config: c}}
	}
	out := make([]WorkerPool, len(c.Hardware))
	for i := range c.Hardware {
		p := c.hardwareConfig(i)
		out[i] = WorkerPool{c.Hardware[i].Name, p.Workers, &p}
	}
	return out
}

// hardwareConfig is the Config hardware pool i's workers run under.
func (c *Config) hardwareConfig(i int) Config {
	h := &c.Hardware[i]
	p := *c
	p.Hardware, p.Pools = nil, nil
	p.Workers, p.Profile, p.Engine = h.Workers, h.Profile, EngineIteration
	p.KVTokens, p.KVSizing, p.TotalKVBlocks, p.GPUMemoryUtilization = h.KVTokens, h.KVSizing, h.TotalKVBlocks, h.GPUMemoryUtilization
	p.MaxNumSeqs, p.MaxNumBatchedTokens = h.MaxNumSeqs, h.MaxNumBatchedTokens
	p.HostTier, p.DiskTier = cloneTier(h.HostTier), cloneTier(h.DiskTier)
	return p
}

func cloneTier(t *TierConfig) *TierConfig {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

// sizeHardware sizes each hardware pool's cache and tiers at BlockSize, as
// SizeKV sizes a homogeneous cluster's, checks each pool's configuration,
// and sets the pools' relative speeds and the cluster's Workers, their
// sum. Errors name the pool.
func (c *Config) sizeHardware() error {
	fastest := 0.0
	c.Workers = 0
	for i := range c.Hardware {
		c.Workers += c.Hardware[i].Workers
		h := &c.Hardware[i]
		p := c.hardwareConfig(i)
		if err := p.SizeKV(); err != nil {
			return hardwareError(h, err)
		}
		if err := p.Check(); err != nil {
			return hardwareError(h, err)
		}
		h.KVTokens, h.TotalKVBlocks, h.HostTier, h.DiskTier = p.KVTokens, p.TotalKVBlocks, p.HostTier, p.DiskTier
		h.RelativeSpeed = 1 / speedStepMS(&p)
		fastest = max(fastest, h.RelativeSpeed)
	}
	for i := range c.Hardware {
		c.Hardware[i].RelativeSpeed /= fastest
	}
	return nil
}

// speedStepMS is a step that prefills speedStepTokens tokens.
func speedStepMS(c *Config) float64 {
	s := c.Profile.Step
	return s.BaseMS + float64(s.PerPrefillTokenMS*speedStepTokens)
}

// hardwareError names the hardware pool a field error is about, and its
// line in the cluster file.
func hardwareError(h *Hardware, err error) error {
	where := fmt.Sprintf("pool %q", h.Name)
	if h.line > 0 {
		where = fmt.Sprintf("line %d: %s", h.line, where)
	}
	if fe, ok := err.(*FieldError); ok {
		return &FieldError{Field: where + ": " + fe.Field, Value: fe.Value, Want: fe.Want}
	}
	return fmt.Errorf("%s: %w", where, err)
}
