package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/offline-router/offline-router/internal/protocol"
)

// TestConfigFlagDefaultsAreTheContract: every config flag set explicitly to
// the default it shows in --help loads as protocol.DefaultConfig. A flag
// whose shown default drifted from the contract's, or whose type does not
// fit its key, fails here.
func TestConfigFlagDefaultsAreTheContract(t *testing.T) {
	cmd := &cobra.Command{Use: "x"}
	var o serveOptions
	o.bindConfig(cmd)
	var args []string
	for _, cf := range configFlags {
		fl := cmd.Flags().Lookup(flagName(cf.key))
		if fl == nil {
			t.Fatalf("no flag for %s", cf.key)
		}
		if optional := fl.DefValue == "0" && cf.key != "seed"; optional {
			continue // an unset optional key: setting it to 0 would set it
		}
		args = append(args, "--"+fl.Name+"="+fl.DefValue)
	}
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.loadConfig(cmd.Flags())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(protocol.DefaultConfig(), cfg); diff != "" {
		t.Fatalf("flags at their shown defaults (-contract +flags):\n%s", diff)
	}
}

// loadFlags loads the config the config flags args give, as serve and
// replay do.
func loadFlags(t *testing.T, args ...string) (protocol.Config, error) {
	t.Helper()
	cmd := &cobra.Command{Use: "x"}
	var o serveOptions
	o.bindConfig(cmd)
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return o.loadConfig(cmd.Flags())
}

// TestDynamoFlagsOfTheWholeCost: Dynamo's names for the cost's knobs,
// predict-on-route and the load-only modes set their keys, converted (seconds
// to ms), as this router's own flags do; each flag Dynamo has and this
// router leaves out is refused saying why.
func TestDynamoFlagsOfTheWholeCost(t *testing.T) {
	ms := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		args []string
		want func(*protocol.Config)
	}{
		{[]string{"--router-kv-overlap-score-credit-decay=0.5"}, func(c *protocol.Config) { c.OverlapScoreCreditDecay = 0.5 }},
		{[]string{"--overlap-score-credit-decay=2"}, func(c *protocol.Config) { c.OverlapScoreCreditDecay = 2 }},
		{[]string{"--router-decode-active-request-weight=3"}, func(c *protocol.Config) { c.DecodeActiveRequestWeight = 3 }},
		{[]string{"--decode-active-request-weight=0.25"}, func(c *protocol.Config) { c.DecodeActiveRequestWeight = 0.25 }},
		{[]string{"--router-predicted-ttl-secs=1.5"}, func(c *protocol.Config) { c.PredictedTTLMS = ms(1500) }},
		// Dynamo's Some(0): on, each entry expiring at once; not unset.
		{[]string{"--router-predicted-ttl-secs=0"}, func(c *protocol.Config) { c.PredictedTTLMS = ms(0) }},
		{[]string{"--predicted-ttl-ms=250"}, func(c *protocol.Config) { c.PredictedTTLMS = ms(250) }},
		{[]string{"--encoder-cuda-to-cpu-ratio=3"}, func(c *protocol.Config) { c.EncoderCudaToCPURatio = 3 }},
		{[]string{"--router-mode=power-of-two"}, func(c *protocol.Config) { c.Policy = protocol.PolicyPowerOfTwo }},
		{[]string{"--router-mode=direct"}, func(c *protocol.Config) { c.Policy = protocol.PolicyDirect }},
		{[]string{"--router-mode=device-aware-weighted"}, func(c *protocol.Config) { c.Policy = protocol.PolicyDeviceAwareWeighted }},
		// ttl is what approximate mode always does here.
		{[]string{"--router-approximate-cache-policy=ttl"}, func(*protocol.Config) {}},
		// Seconds to the nanosecond: 16.1 s is 16100 ms, not 16100.000000000002.
		{[]string{"--router-predicted-ttl-secs=16.1"}, func(c *protocol.Config) { c.PredictedTTLMS = ms(16100) }},
		// Output blocks off, Dynamo's default, in each of its spellings.
		{[]string{"--router-track-output-blocks=false"}, func(*protocol.Config) {}},
		{[]string{"--no-router-track-output-blocks"}, func(*protocol.Config) {}},
	} {
		got, err := loadFlags(t, c.args...)
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		want := protocol.DefaultConfig()
		c.want(&want)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", c.args, diff)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--router-approximate-cache-policy=lru"}, "--router-approximate-cache-policy lru (a Dynamo router flag) arrived in Dynamo after the commit this router follows (pull request #13701); approximate mode here expires blocks by TTL (--approx-ttl-ms)"},
		{[]string{"--router-approximate-cache-policy=LRU"}, `--router-approximate-cache-policy "LRU" (a Dynamo router flag): expected one of ttl, lru, as in Dynamo`},
		{[]string{"--router-track-output-blocks"}, "--router-track-output-blocks true (a Dynamo router flag) is left out: decode progress does not reach the router here (docs/PROTOCOL.md §5, output blocks)"},
		{[]string{"--track-output-blocks"}, "--track-output-blocks true (a Dynamo router flag) is left out: decode progress does not reach the router here (docs/PROTOCOL.md §5, output blocks)"},
		{[]string{"--router-selection-policy=lmetric"}, "--router-selection-policy (a Dynamo router flag) is not in the Dynamo release this router follows: lmetric is an open proposal there, pull request #11028"},
		{[]string{"--router-mode=lmetric"}, `"lmetric" is not in the Dynamo release this router follows`},
		{[]string{"--router-kv-overlap-score-credit-decay=1", "--overlap-score-credit-decay=1"}, "--overlap-score-credit-decay and --router-kv-overlap-score-credit-decay both set overlap_score_credit_decay: give one"},
		{[]string{"--router-decode-active-request-weight=1", "--decode-active-request-weight=1"}, "both set decode_active_request_weight"},
		{[]string{"--router-predicted-ttl-secs=1", "--predicted-ttl-ms=5"}, "both set predicted_ttl_ms"},
		{[]string{"--router-predicted-ttl-secs=1", "--no-kv-events"}, "--router-predicted-ttl-secs (config predicted_ttl_ms): requires kv_events true"},
		{[]string{"--router-predicted-ttl-secs=-1"}, "--router-predicted-ttl-secs -1 (a Dynamo router flag): expected a number >= 0"},
		{[]string{"--router-kv-overlap-score-credit-decay=-1"}, "--router-kv-overlap-score-credit-decay -1 (a Dynamo router flag): expected a number >= 0"},
		{[]string{"--router-predicted-ttl-secs=1e300"}, "--router-predicted-ttl-secs (config predicted_ttl_ms): expected a finite number, got +Inf"},
		{[]string{"--encoder-cuda-to-cpu-ratio=0"}, "--encoder-cuda-to-cpu-ratio (config encoder_cuda_to_cpu_ratio): expected 1 to 9007199254740992, got 0"},
	} {
		if _, err := loadFlags(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.args, err, c.want)
		}
	}
}
