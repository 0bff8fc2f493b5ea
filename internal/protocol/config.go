package protocol

import (
	"fmt"
	"math"
	"strings"
)

// Config is the router configuration of PROTOCOL.md §2.
type Config struct {
	Policy                           Policy           `json:"policy"`
	BlockSize                        uint64           `json:"block_size"`
	Seed                             uint64           `json:"seed"`
	Temperature                      float64          `json:"temperature"`
	OverlapScoreCredit               float64          `json:"overlap_score_credit"`
	OverlapScoreCreditDecay          float64          `json:"overlap_score_credit_decay"`
	PrefillLoadScale                 float64          `json:"prefill_load_scale"`
	DecodeActiveRequestWeight        float64          `json:"decode_active_request_weight"`
	HostCacheHitWeight               float64          `json:"host_cache_hit_weight"`
	DiskCacheHitWeight               float64          `json:"disk_cache_hit_weight"`
	KVEvents                         bool             `json:"kv_events"`
	DedupeEventIDs                   bool             `json:"dedupe_event_ids"`
	ApproxTTLMS                      float64          `json:"approx_ttl_ms"`
	PredictedTTLMS                   *float64         `json:"predicted_ttl_ms" jsonschema:"nullable"`
	EncoderCudaToCPURatio            uint64           `json:"encoder_cuda_to_cpu_ratio"`
	QueueThreshold                   *float64         `json:"queue_threshold" jsonschema:"nullable"`
	QueuePolicy                      QueuePolicy      `json:"queue_policy"`
	QueueTimeoutMS                   *float64         `json:"queue_timeout_ms" jsonschema:"nullable"`
	ActiveDecodeBlocksThreshold      *float64         `json:"active_decode_blocks_threshold" jsonschema:"nullable"`
	ActivePrefillTokensThreshold     *float64         `json:"active_prefill_tokens_threshold" jsonschema:"nullable"`
	ActivePrefillTokensThresholdFrac *float64         `json:"active_prefill_tokens_threshold_frac" jsonschema:"nullable"`
	PrefillLoadModel                 PrefillLoadModel `json:"prefill_load_model"`
	PrefillTokensPerMS               *float64         `json:"prefill_tokens_per_ms" jsonschema:"nullable"`
	Affinity                         AffinityConfig   `json:"affinity"`
	// DefaultPolicyClass and PolicyClasses are Dynamo's router policy
	// config (--router-policy-config's root profile): without them every
	// request is in one synthetic class that queue_threshold and
	// queue_policy describe.
	DefaultPolicyClass string          `json:"default_policy_class"`
	PolicyClasses      []PolicyClass   `json:"policy_classes" jsonschema:"nullable"`
	WorkerSelection    WorkerSelection `json:"worker_selection"`
	Evidence           Evidence        `json:"evidence"`
	SGLang             SGLangConfig    `json:"sglang"`
	LLMD               LLMDConfig      `json:"llmd"`
	WorkerDefaults     WorkerDefaults  `json:"worker_defaults"`
}

// SGLangConfig holds the knobs of policy sglang_cache_aware, with the
// defaults of SGLang's router command line (sglang_router.launch_router).
type SGLangConfig struct {
	// CacheThreshold: a prompt whose best routed-prefix match covers more
	// than this fraction of its blocks goes to the rank that matched.
	CacheThreshold float64 `json:"cache_threshold"`
	// BalanceAbsThreshold and BalanceRelThreshold: the ranks' loads (router
	// in-flight requests) are imbalanced when max - min exceeds the first
	// and max exceeds min times the second; then the least loaded rank wins.
	BalanceAbsThreshold uint64  `json:"balance_abs_threshold"`
	BalanceRelThreshold float64 `json:"balance_rel_threshold"`
	// EvictionIntervalMS is how often each rank's routed tree is trimmed to
	// MaxTreeSize blocks, least recently routed leaves first (0: never).
	EvictionIntervalMS float64 `json:"eviction_interval_ms"`
	MaxTreeSize        uint64  `json:"max_tree_size"`
}

// LLMDConfig holds the scorer weights of policy llmd, with the defaults of
// llm-d's inference scheduler profile for precise prefix-cache routing.
type LLMDConfig struct {
	PrefixCacheScorerWeight        float64 `json:"prefix_cache_scorer_weight"`
	QueueScorerWeight              float64 `json:"queue_scorer_weight"`
	KVCacheUtilizationScorerWeight float64 `json:"kv_cache_utilization_scorer_weight"`
}

// AffinityConfig configures session affinity.
type AffinityConfig struct {
	Mode  AffinityMode `json:"mode"`
	TTLMS float64      `json:"ttl_ms"`
	Key   AffinityKey  `json:"key"`
}

// PolicyClass is one of Dynamo's policy classes (lib/kv-router
// scheduling/policy_config.rs at the pinned commit): its own queue, ordered
// by deadline (arrival + slo_ms), its share of dispatches by deficit round
// robin (quantum, in uncached prompt tokens), its busy test and its queue
// limits, each per worker.
type PolicyClass struct {
	Name                           string   `json:"name"`
	SLOMS                          uint64   `json:"slo_ms"`
	Quantum                        uint64   `json:"quantum"`
	PrefillBusyThreshold           *uint64  `json:"prefill_busy_threshold" jsonschema:"nullable"`
	PrefillBusyThresholdFrac       *float64 `json:"prefill_busy_threshold_frac" jsonschema:"nullable"`
	RequestQueueLimitPerWorker     *uint64  `json:"request_queue_limit_per_worker" jsonschema:"nullable"`
	RawISLTokenQueueLimitPerWorker *uint64  `json:"raw_isl_token_queue_limit_per_worker" jsonschema:"nullable"`
	CachedTokenQueueLimitPerWorker *uint64  `json:"cached_token_queue_limit_per_worker" jsonschema:"nullable"`
}

// WorkerSelection is Dynamo's worker_selection block: named instances, each
// a policy with its selector parameters, and which one each role uses.
// Default is every role's unless Prefill or Decode names another ("": the
// policy and knobs of the config itself).
type WorkerSelection struct {
	Default   string              `json:"default"`
	Prefill   string              `json:"prefill"`
	Decode    string              `json:"decode"`
	Instances []SelectionInstance `json:"instances" jsonschema:"nullable"`
}

// SelectionInstance is one named worker-selection instance: a policy (its
// type) and the selector knobs it sets over the config's.
type SelectionInstance struct {
	Name       string              `json:"name"`
	Type       Policy              `json:"type"`
	Parameters SelectionParameters `json:"parameters"`
}

// SelectionParameters are the knobs an instance may set; one it leaves
// out is the config's.
type SelectionParameters struct {
	Temperature        *float64 `json:"temperature" jsonschema:"nullable"`
	OverlapScoreCredit *float64 `json:"overlap_score_credit" jsonschema:"nullable"`
	PrefillLoadScale   *float64 `json:"prefill_load_scale" jsonschema:"nullable"`
}

// WorkerDefaults fills worker_ready fields a command leaves out.
type WorkerDefaults struct {
	Role                Role    `json:"role"`
	DPSize              *uint32 `json:"dp_size" jsonschema:"nullable"`
	DPStart             *uint32 `json:"dp_start" jsonschema:"nullable"`
	TotalKVBlocks       *uint64 `json:"total_kv_blocks" jsonschema:"nullable"`
	MaxNumBatchedTokens *uint64 `json:"max_num_batched_tokens" jsonschema:"nullable"`
	MaxNumSeqs          *uint64 `json:"max_num_seqs" jsonschema:"nullable"`
}

// Policy is how a rank is chosen among the candidates.
type Policy string

// Policies.
const (
	PolicyKV          Policy = "kv"
	PolicyRoundRobin  Policy = "round_robin"
	PolicyRandom      Policy = "random"
	PolicyLeastLoaded Policy = "least_loaded"
	PolicySessionHash Policy = "session_hash"
	PolicySGLang      Policy = "sglang_cache_aware"
	PolicyLLMD        Policy = "llmd"
	// Dynamo's load-only router modes.
	PolicyPowerOfTwo          Policy = "power_of_two"
	PolicyDirect              Policy = "direct"
	PolicyDeviceAwareWeighted Policy = "device_aware_weighted"
)

// Policies lists every policy, in the order help texts name them.
var Policies = []Policy{PolicyKV, PolicyRoundRobin, PolicyRandom, PolicyLeastLoaded, PolicyPowerOfTwo,
	PolicyDirect, PolicyDeviceAwareWeighted, PolicySessionHash, PolicySGLang, PolicyLLMD}

// LaterPolicies are selection policies proposed for Dynamo that are not
// in the commit this router follows, with where they stand: asked for by
// name, they are refused saying so, not as a typo.
var LaterPolicies = map[Policy]string{
	"lmetric": "is not in the Dynamo release this router follows: it is an open proposal there (pull request #11028)",
}

// checkPolicy is oneOf for a policy, naming a later Dynamo's policy as one.
func checkPolicy(key string, p Policy) error {
	if why, ok := LaterPolicies[p]; ok {
		return fmt.Errorf("config %s: %q %s", key, p, why)
	}
	return oneOf(key, p, Policies...)
}

// QueuePolicy orders the policy queue.
type QueuePolicy string

// Queue policies.
const (
	QueueFCFS QueuePolicy = "fcfs"
	QueueWSPT QueuePolicy = "wspt"
	QueueLCFS QueuePolicy = "lcfs"
)

// PrefillLoadModel is how booked prefill tokens age.
type PrefillLoadModel string

// Prefill load models.
const (
	PrefillLoadNone   PrefillLoadModel = "none"
	PrefillLoadLinear PrefillLoadModel = "linear"
)

// AffinityMode is how strongly a session sticks to its rank.
type AffinityMode string

// Affinity modes.
const (
	AffinityOff  AffinityMode = "off"
	AffinityHard AffinityMode = "hard"
	AffinitySoft AffinityMode = "soft"
)

// AffinityKey is what a binding is keyed by.
type AffinityKey string

// Affinity keys.
const (
	AffinityKeySession      AffinityKey = "session"
	AffinityKeySiblingGroup AffinityKey = "sibling_group"
)

// Evidence is how much of a placement's reasoning a response carries.
type Evidence string

// Evidence levels.
const (
	EvidenceNone    Evidence = "none"
	EvidenceSummary Evidence = "summary"
	EvidenceFull    Evidence = "full"
)

// DefaultConfig returns the configuration with every default of §2. The
// CLI's flags take their defaults from it.
func DefaultConfig() Config {
	return Config{
		Policy:             PolicyKV,
		BlockSize:          16,
		OverlapScoreCredit: 1,
		PrefillLoadScale:   1,
		// Dynamo's defaults (--router-host-cache-hit-weight,
		// --router-disk-cache-hit-weight): a host block is worth three
		// quarters of a device block, a disk block a quarter.
		HostCacheHitWeight: 0.75,
		DiskCacheHitWeight: 0.25,
		KVEvents:           true,
		ApproxTTLMS:        120000,
		// DYN_ENCODER_CUDA_TO_CPU_RATIO's default.
		EncoderCudaToCPURatio: 8,
		QueuePolicy:           QueueFCFS,
		PrefillLoadModel:      PrefillLoadNone,
		Affinity:              AffinityConfig{Mode: AffinityOff, TTLMS: 3600000, Key: AffinityKeySession},
		Evidence:              EvidenceSummary,
		SGLang: SGLangConfig{CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5,
			EvictionIntervalMS: 120000, MaxTreeSize: 1 << 26},
		LLMD: LLMDConfig{PrefixCacheScorerWeight: 3, QueueScorerWeight: 2, KVCacheUtilizationScorerWeight: 2},
	}
}

func oneOf[T ~string](key string, v T, allowed ...T) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	return fmt.Errorf("config %s: %q is not one of %s", key, v, strings.Join(names, ", "))
}

// Validate checks every key's range and the rules between keys.
func (c *Config) Validate() error {
	nonNeg := func(key string, v *float64) error {
		if v != nil && (*v < 0 || math.IsNaN(*v) || math.IsInf(*v, 0)) {
			return fmt.Errorf("config %s: expected a finite number >= 0, got %v", key, *v)
		}
		return nil
	}
	fraction := func(key string, v float64) error {
		if !(v >= 0 && v <= 1) { // NaN too
			return fmt.Errorf("config %s: expected a fraction from 0 to 1 (Dynamo's range), got %v", key, v)
		}
		return nil
	}
	positive := func(key string, v *float64) error {
		if v != nil && !(*v > 0 && !math.IsInf(*v, 0)) {
			return fmt.Errorf("config %s: expected a finite number > 0, got %v", key, *v)
		}
		return nil
	}
	errs := []error{
		checkPolicy("policy", c.Policy),
		oneOf("queue_policy", c.QueuePolicy, QueueFCFS, QueueWSPT, QueueLCFS),
		oneOf("prefill_load_model", c.PrefillLoadModel, PrefillLoadNone, PrefillLoadLinear),
		oneOf("affinity.mode", c.Affinity.Mode, AffinityOff, AffinityHard, AffinitySoft),
		oneOf("affinity.key", c.Affinity.Key, AffinityKeySession, AffinityKeySiblingGroup),
		oneOf("evidence", c.Evidence, EvidenceNone, EvidenceSummary, EvidenceFull),
		nonNeg("temperature", &c.Temperature),
		nonNeg("overlap_score_credit", &c.OverlapScoreCredit),
		nonNeg("prefill_load_scale", &c.PrefillLoadScale),
		nonNeg("overlap_score_credit_decay", &c.OverlapScoreCreditDecay),
		nonNeg("decode_active_request_weight", &c.DecodeActiveRequestWeight),
		fraction("host_cache_hit_weight", c.HostCacheHitWeight),
		fraction("disk_cache_hit_weight", c.DiskCacheHitWeight),
		nonNeg("predicted_ttl_ms", c.PredictedTTLMS),
		positive("approx_ttl_ms", &c.ApproxTTLMS),
		nonNeg("queue_threshold", c.QueueThreshold),
		positive("queue_timeout_ms", c.QueueTimeoutMS),
		nonNeg("active_decode_blocks_threshold", c.ActiveDecodeBlocksThreshold),
		nonNeg("active_prefill_tokens_threshold", c.ActivePrefillTokensThreshold),
		nonNeg("active_prefill_tokens_threshold_frac", c.ActivePrefillTokensThresholdFrac),
		positive("prefill_tokens_per_ms", c.PrefillTokensPerMS),
		nonNeg("affinity.ttl_ms", &c.Affinity.TTLMS),
		nonNeg("sglang.cache_threshold", &c.SGLang.CacheThreshold),
		nonNeg("sglang.balance_rel_threshold", &c.SGLang.BalanceRelThreshold),
		nonNeg("sglang.eviction_interval_ms", &c.SGLang.EvictionIntervalMS),
		nonNeg("llmd.prefix_cache_scorer_weight", &c.LLMD.PrefixCacheScorerWeight),
		nonNeg("llmd.queue_scorer_weight", &c.LLMD.QueueScorerWeight),
		nonNeg("llmd.kv_cache_utilization_scorer_weight", &c.LLMD.KVCacheUtilizationScorerWeight),
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	for _, kv := range []struct {
		key string
		v   *float64
	}{{"temperature", &c.Temperature}, {"overlap_score_credit", &c.OverlapScoreCredit}, {"prefill_load_scale", &c.PrefillLoadScale}, {"approx_ttl_ms", &c.ApproxTTLMS},
		{"overlap_score_credit_decay", &c.OverlapScoreCreditDecay}, {"decode_active_request_weight", &c.DecodeActiveRequestWeight}, {"predicted_ttl_ms", c.PredictedTTLMS},
		{"queue_threshold", c.QueueThreshold}, {"queue_timeout_ms", c.QueueTimeoutMS},
		{"active_decode_blocks_threshold", c.ActiveDecodeBlocksThreshold}, {"active_prefill_tokens_threshold", c.ActivePrefillTokensThreshold},
		{"active_prefill_tokens_threshold_frac", c.ActivePrefillTokensThresholdFrac}, {"prefill_tokens_per_ms", c.PrefillTokensPerMS},
		{"affinity.ttl_ms", &c.Affinity.TTLMS}, {"sglang.balance_rel_threshold", &c.SGLang.BalanceRelThreshold},
		{"sglang.eviction_interval_ms", &c.SGLang.EvictionIntervalMS}, {"llmd.prefix_cache_scorer_weight", &c.LLMD.PrefixCacheScorerWeight},
		{"llmd.queue_scorer_weight", &c.LLMD.QueueScorerWeight}, {"llmd.kv_cache_utilization_scorer_weight", &c.LLMD.KVCacheUtilizationScorerWeight}} {
		if kv.v != nil && *kv.v > MaxNumber {
			return fmt.Errorf("config %s: expected at most %d, got %v", kv.key, uint64(MaxNumber), *kv.v)
		}
	}
	// A softmax over costs divided by a temperature, and a decay divided by
	// a rate, must not underflow to a division by zero.
	if t := c.Temperature; t != 0 && t < 1e-6 {
		return fmt.Errorf("config temperature: expected 0, or at least 1e-6, got %v", t)
	}
	if r := c.PrefillTokensPerMS; r != nil && *r < 1e-6 {
		return fmt.Errorf("config prefill_tokens_per_ms: expected at least 1e-6, got %v", *r)
	}
	if v := c.SGLang.CacheThreshold; v > 1 {
		return fmt.Errorf("config sglang.cache_threshold: expected a fraction from 0 to 1, got %v", v)
	}
	if c.BlockSize == 0 || c.BlockSize > 1<<20 {
		return fmt.Errorf("config block_size: expected 1 to %d tokens, got %d", 1<<20, c.BlockSize)
	}
	if c.PredictedTTLMS != nil && !c.KVEvents {
		// Dynamo: "router_predicted_ttl_secs requires use_kv_events=true"
		// (approximate mode already learns from placements).
		return fmt.Errorf("config predicted_ttl_ms: requires kv_events true (approximate mode already learns every placement, for approx_ttl_ms)")
	}
	if v := c.EncoderCudaToCPURatio; v == 0 || v > MaxNumber {
		return fmt.Errorf("config encoder_cuda_to_cpu_ratio: expected 1 to %d, got %d", uint64(MaxNumber), v)
	}
	if c.PrefillLoadModel == PrefillLoadLinear && c.PrefillTokensPerMS == nil {
		return fmt.Errorf("config prefill_tokens_per_ms: required by prefill_load_model \"linear\"")
	}
	if c.WorkerDefaults.Role != "" && !c.WorkerDefaults.Role.Valid() {
		return fmt.Errorf("config worker_defaults.role: %q is not one of aggregated, prefill, decode", c.WorkerDefaults.Role)
	}
	if v := c.WorkerDefaults.DPSize; v != nil && (*v == 0 || *v > MaxDPSize) {
		return fmt.Errorf("config worker_defaults.dp_size: expected 1 to %d ranks, got %d", MaxDPSize, *v)
	}
	if err := c.validatePolicyClasses(); err != nil {
		return err
	}
	return c.validateWorkerSelection()
}
