package protocol

import (
	"math"
	"strings"
	"testing"
)

// The keys of Dynamo's whole cost and load-only modes keep Dynamo's
// ranges and rules between keys; each case names the key its message must.
func TestWholeCostKeys(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Config)
		want string // "" when valid
	}{
		{"decay", func(c *Config) { c.OverlapScoreCreditDecay = 1 }, ""},
		{"negative decay", func(c *Config) { c.OverlapScoreCreditDecay = -0.5 }, "overlap_score_credit_decay"},
		{"decay past 2^53", func(c *Config) { c.OverlapScoreCreditDecay = 1e300 }, "overlap_score_credit_decay"},
		{"negative request weight", func(c *Config) { c.DecodeActiveRequestWeight = -1 }, "decode_active_request_weight"},
		{"host weight above 1", func(c *Config) { c.HostCacheHitWeight = 1.5 }, "host_cache_hit_weight"},
		{"negative disk weight", func(c *Config) { c.DiskCacheHitWeight = -0.1 }, "disk_cache_hit_weight"},
		{"NaN host weight", func(c *Config) { c.HostCacheHitWeight = math.NaN() }, "host_cache_hit_weight"},
		{"predicted ttl 0", func(c *Config) { c.PredictedTTLMS = ptr(0.0) }, ""},
		{"negative predicted ttl", func(c *Config) { c.PredictedTTLMS = ptr(-1.0) }, "predicted_ttl_ms"},
		{"predicted without kv events", func(c *Config) { c.PredictedTTLMS, c.KVEvents = ptr(1000.0), false }, "predicted_ttl_ms: requires kv_events true"},
		{"ratio 0", func(c *Config) { c.EncoderCudaToCPURatio = 0 }, "encoder_cuda_to_cpu_ratio"},
		{"lmetric", func(c *Config) { c.Policy = "lmetric" }, "pull request #11028"},
		{"lmetric instance", func(c *Config) {
			c.WorkerSelection = WorkerSelection{Default: "l", Instances: []SelectionInstance{{Name: "l", Type: "lmetric"}}}
		}, "pull request #11028"},
		{"power_of_two", func(c *Config) { c.Policy = PolicyPowerOfTwo }, ""},
	} {
		cfg := DefaultConfig()
		c.set(&cfg)
		err := cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
