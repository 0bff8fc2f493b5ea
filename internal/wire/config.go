package wire

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"github.com/goccy/go-json"
)

// Config is the router configuration of PROTOCOL.md §2.
type Config struct {
	Policy                           string         `json:"policy"`
	BlockSize                        uint64         `json:"block_size"`
	Seed                             uint64         `json:"seed"`
	Temperature                      float64        `json:"temperature"`
	OverlapScoreCredit               float64        `json:"overlap_score_credit"`
	PrefillLoadScale                 float64        `json:"prefill_load_scale"`
	KVEvents                         bool           `json:"kv_events"`
	ApproxTTLMS                      float64        `json:"approx_ttl_ms"`
	QueueThreshold                   *float64       `json:"queue_threshold"`
	QueuePolicy                      string         `json:"queue_policy"`
	QueueTimeoutMS                   *float64       `json:"queue_timeout_ms"`
	ActiveDecodeBlocksThreshold      *float64       `json:"active_decode_blocks_threshold"`
	ActivePrefillTokensThreshold     *float64       `json:"active_prefill_tokens_threshold"`
	ActivePrefillTokensThresholdFrac *float64       `json:"active_prefill_tokens_threshold_frac"`
	PrefillLoadModel                 string         `json:"prefill_load_model"`
	PrefillTokensPerMS               *float64       `json:"prefill_tokens_per_ms"`
	Affinity                         AffinityConfig `json:"affinity"`
	Evidence                         string         `json:"evidence"`
	WorkerDefaults                   WorkerDefaults `json:"worker_defaults"`
}

// AffinityConfig configures session affinity.
type AffinityConfig struct {
	Mode  string  `json:"mode"`
	TTLMS float64 `json:"ttl_ms"`
	Key   string  `json:"key"`
}

// WorkerDefaults fills worker_ready fields a command leaves out.
type WorkerDefaults struct {
	Role                Role    `json:"role"`
	DPSize              *uint32 `json:"dp_size"`
	DPStart             *uint32 `json:"dp_start"`
	TotalKVBlocks       *uint64 `json:"total_kv_blocks"`
	MaxNumBatchedTokens *uint64 `json:"max_num_batched_tokens"`
	MaxNumSeqs          *uint64 `json:"max_num_seqs"`
}

// Policy names.
const (
	PolicyKV          = "kv"
	PolicyRoundRobin  = "round_robin"
	PolicyRandom      = "random"
	PolicyLeastLoaded = "least_loaded"
)

// Evidence levels.
const (
	EvidenceNone    = "none"
	EvidenceSummary = "summary"
	EvidenceFull    = "full"
)

// DefaultConfig returns the configuration with every default of §2.
func DefaultConfig() Config {
	return Config{
		Policy:             PolicyKV,
		BlockSize:          16,
		OverlapScoreCredit: 1,
		PrefillLoadScale:   1,
		KVEvents:           true,
		ApproxTTLMS:        120000,
		QueuePolicy:        "fcfs",
		PrefillLoadModel:   "none",
		Affinity:           AffinityConfig{Mode: "off", TTLMS: 3600000, Key: "session"},
		Evidence:           EvidenceSummary,
	}
}

// Override sets one config key (dotted for nested keys, as in
// "affinity.mode") from a flag; it is applied after the file.
type Override struct {
	Key   string
	Value any
}

// LoadConfig builds a Config from the defaults, then the JSON file contents
// (may be empty), then the overrides, and validates the result.
func LoadConfig(file []byte, overrides []Override) (Config, error) {
	c := DefaultConfig()
	if len(bytes.TrimSpace(file)) > 0 {
		if err := decodeStrict(file, &c); err != nil {
			return c, fmt.Errorf("config file: %w", err)
		}
	}
	for _, o := range overrides {
		v, err := json.Marshal(o.Value)
		if err != nil {
			return c, fmt.Errorf("config %s: %w", o.Key, err)
		}
		doc := string(v)
		parts := strings.Split(o.Key, ".")
		for i := len(parts) - 1; i >= 0; i-- {
			doc = fmt.Sprintf("{%q:%s}", parts[i], doc)
		}
		if err := decodeStrict([]byte(doc), &c); err != nil {
			return c, fmt.Errorf("config %s: %w", o.Key, err)
		}
	}
	return c, c.Validate()
}

func decodeStrict(data []byte, c *Config) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(c); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("unexpected data after the config object")
	}
	return nil
}

// Validate checks every key's range and the rules between keys.
func (c *Config) Validate() error {
	oneOf := func(key, v string, allowed ...string) error {
		for _, a := range allowed {
			if v == a {
				return nil
			}
		}
		return fmt.Errorf("config %s: %q is not one of %s", key, v, strings.Join(allowed, ", "))
	}
	nonNeg := func(key string, v *float64) error {
		if v != nil && (*v < 0 || math.IsNaN(*v) || math.IsInf(*v, 0)) {
			return fmt.Errorf("config %s: expected a finite number >= 0, got %v", key, *v)
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
		oneOf("policy", c.Policy, PolicyKV, PolicyRoundRobin, PolicyRandom, PolicyLeastLoaded),
		oneOf("queue_policy", c.QueuePolicy, "fcfs", "wspt", "lcfs"),
		oneOf("prefill_load_model", c.PrefillLoadModel, "none", "linear"),
		oneOf("affinity.mode", c.Affinity.Mode, "off", "hard", "soft"),
		oneOf("affinity.key", c.Affinity.Key, "session", "sibling_group"),
		oneOf("evidence", c.Evidence, EvidenceNone, EvidenceSummary, EvidenceFull),
		nonNeg("temperature", &c.Temperature),
		nonNeg("prefill_load_scale", &c.PrefillLoadScale),
		positive("approx_ttl_ms", &c.ApproxTTLMS),
		nonNeg("queue_threshold", c.QueueThreshold),
		positive("queue_timeout_ms", c.QueueTimeoutMS),
		nonNeg("active_decode_blocks_threshold", c.ActiveDecodeBlocksThreshold),
		nonNeg("active_prefill_tokens_threshold", c.ActivePrefillTokensThreshold),
		nonNeg("active_prefill_tokens_threshold_frac", c.ActivePrefillTokensThresholdFrac),
		positive("prefill_tokens_per_ms", c.PrefillTokensPerMS),
		nonNeg("affinity.ttl_ms", &c.Affinity.TTLMS),
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	if c.BlockSize == 0 || c.BlockSize > 1<<20 {
		return fmt.Errorf("config block_size: expected 1 to %d tokens, got %d", 1<<20, c.BlockSize)
	}
	if c.OverlapScoreCredit < 0 || c.OverlapScoreCredit > 1 || math.IsNaN(c.OverlapScoreCredit) {
		return fmt.Errorf("config overlap_score_credit: expected a number in [0,1], got %v", c.OverlapScoreCredit)
	}
	if c.PrefillLoadModel == "linear" && c.PrefillTokensPerMS == nil {
		return fmt.Errorf("config prefill_tokens_per_ms: required by prefill_load_model \"linear\"")
	}
	switch c.WorkerDefaults.Role {
	case "", RoleAggregated, RolePrefill, RoleDecode:
	default:
		return fmt.Errorf("config worker_defaults.role: %q is not one of aggregated, prefill, decode", c.WorkerDefaults.Role)
	}
	if c.WorkerDefaults.DPSize != nil && *c.WorkerDefaults.DPSize == 0 {
		return fmt.Errorf("config worker_defaults.dp_size: expected at least 1, got 0")
	}
	return nil
}
