package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/offline-router/offline-router/internal/engine"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/selector"
	"github.com/offline-router/offline-router/internal/wire"
)

// serveOptions are the flags of serving: framing, and the config file with
// one flag per scalar config key (a flag overrides the file).
type serveOptions struct {
	configFile   string
	policyConfig string // --router-policy-config: Dynamo's YAML
	maxLineBytes int
	failFast     bool
	verbose      bool
	cpuProfile   string
}

// policyNames joins policies, in the order given, for help texts.
func policyNames(ps []protocol.Policy) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}

// replayPolicyList names every policy in protocol.Policies' order (a policy
// added there is named here too) but direct, which replay refuses.
func replayPolicyList() string {
	return policyNames(slices.DeleteFunc(slices.Clone(protocol.Policies), func(p protocol.Policy) bool { return p == protocol.PolicyDirect }))
}

// policyHelp says, for --policy, how each policy picks (its entry in the
// selector's policy table) and its name among Dynamo's router modes.
func policyHelp() string {
	parts := make([]string, len(protocol.Policies))
	for i, p := range protocol.Policies {
		spec := selector.Of(p)
		parts[i] = string(p) + ": " + spec.Picks
		if spec.Dynamo != "" {
			parts[i] += " (Dynamo's --router-mode " + spec.Dynamo + ")"
		}
	}
	return strings.Join(parts, "; ")
}

// configFlags are the config keys that have a flag, with its usage; the
// flag's type and default come from the key's field in
// protocol.DefaultConfig, so the two cannot disagree.
var configFlags = []struct{ key, usage string }{
	{"policy", "placement policy: " + policyHelp()},
	{"block_size", "tokens per KV block (Mooncake traces use 512)"},
	{"seed", "seed of the one deterministic random stream (ties, softmax)"},
	{"temperature", "0 = cheapest rank; > 0 = softmax over range-normalised costs"},
	{"overlap_score_credit", "blocks of prefill credited per cached block (Dynamo's default 1; above 1 favours cache over load)"},
	{"prefill_load_scale", "weight of the prefill term of the cost"},
	{"overlap_score_credit_decay", "credit shrinks on ranks with more prefill booked than the least loaded candidate: credit/(1+d*excess/request_blocks), excess in blocks; 0 = off (Dynamo's default, --router-kv-overlap-score-credit-decay); 1 halves the credit at one request's worth of excess; >= 0"},
	{"decode_active_request_weight", "blocks of cost added per request already active on a rank (Dynamo's --router-decode-active-request-weight, experimental there); 0 = off (Dynamo's default); >= 0"},
	{"host_cache_hit_weight", "blocks of prefill credited per block a rank's host tier (host_pinned KV events) holds past its device prefix (Dynamo's --router-host-cache-hit-weight, default 0.75); 0 to 1"},
	{"disk_cache_hit_weight", "the same for its disk and external tiers, past its host blocks (Dynamo's --router-disk-cache-hit-weight, default 0.25); 0 to 1"},
	{"kv_events", "false = approximate mode: the index learns from placements"},
	{"dedupe_event_ids", "skip a KV event whose event_id is not above the last applied on its rank (for at-least-once delivery); off: apply in arrival order, as Dynamo"},
	{"approx_ttl_ms", "lifetime of an approximate-mode block, refreshed when routed again"},
	{"predicted_ttl_ms", "predict-on-route: each placement's blocks also go to a side index for this many virtual ms, and a rank's overlap is the larger of the two indexes (Dynamo's --router-predicted-ttl-secs, in ms here); unset = off (Dynamo's default); >= 0; needs kv_events true"},
	{"encoder_cuda_to_cpu_ratio", "device_aware_weighted: throughput of one accelerator worker over one CPU worker (device_type \"cpu\"); the least loaded CPU worker is picked while CPU in-flight requests are below accelerators' × CPU workers / (ratio × accelerator workers) (Dynamo's DYN_ENCODER_CUDA_TO_CPU_RATIO, default 8); 1 to 2^53"},
	{"active_decode_blocks_threshold", "busy filter: fraction of total_kv_blocks (unset = off)"},
	{"active_prefill_tokens_threshold", "busy filter: absolute prefill tokens (unset = off)"},
	{"active_prefill_tokens_threshold_frac", "busy filter: fraction of max_num_batched_tokens (unset = off)"},
	{"evidence", "placement evidence: none, summary or full"},
	{"queue_threshold", "enable the policy queue: a rank is busy above this × max_num_batched_tokens prefill tokens (unset = no queue); with policy_classes, each class's own thresholds apply instead, as in Dynamo"},
	{"queue_policy", "queue order: fcfs, wspt or lcfs; with policy_classes, each class orders by deadline instead, as in Dynamo"},
	{"queue_timeout_ms", "reject a request that waited this long (unset = never)"},
	{"prefill_load_model", "none, or linear: booked prefill decays at prefill_tokens_per_ms"},
	{"prefill_tokens_per_ms", "prefill rate of the linear model"},
	{"affinity.mode", "session affinity: off, hard or soft"},
	{"affinity.ttl_ms", "idle lifetime of a session binding, in virtual ms"},
	{"affinity.key", "affinity key: session, or sibling_group (parent_session_id)"},
	{"sglang.cache_threshold", "sglang_cache_aware: route by the routed-prefix match when it covers more than this fraction of the prompt"},
	{"sglang.balance_abs_threshold", "sglang_cache_aware: loads are imbalanced when max - min is above this (in-flight requests)..."},
	{"sglang.balance_rel_threshold", "sglang_cache_aware: ...and max is above min times this; then the least loaded wins"},
	{"sglang.eviction_interval_ms", "sglang_cache_aware: trim each rank's routed tree this often, in virtual ms (0 = never)"},
	{"sglang.max_tree_size", "sglang_cache_aware: blocks each rank's routed tree keeps at a trim (SGLang counts characters)"},
	{"llmd.prefix_cache_scorer_weight", "llmd: weight of the precise prefix-cache scorer (KV events)"},
	{"llmd.queue_scorer_weight", "llmd: weight of the queue scorer (requests not past prefill)"},
	{"llmd.kv_cache_utilization_scorer_weight", "llmd: weight of the KV-cache utilisation scorer (needs total_kv_blocks)"},
}

// configDefault is the default of a dotted config key, as a string, uint64,
// float64 or bool (an optional key that is unset by default gives its zero).
func configDefault(key string) any {
	v := reflect.ValueOf(protocol.DefaultConfig())
	for _, part := range strings.Split(key, ".") {
		t := v.Type()
		found := false
		for i := range t.NumField() {
			if strings.Split(t.Field(i).Tag.Get("json"), ",")[0] == part {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			panic("no config key " + key)
		}
	}
	if v.Kind() == reflect.Pointer {
		v = reflect.Zero(v.Type().Elem())
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Uint64:
		return v.Uint()
	case reflect.Float64:
		return v.Float()
	case reflect.Bool:
		return v.Bool()
	}
	panic("config key " + key + " has no flag type")
}

func flagName(key string) string {
	b := []byte(key)
	for i, c := range b {
		if c == '_' || c == '.' {
			b[i] = '-'
		}
	}
	return string(b)
}

// bind adds the serving flags and the router config flags.
func (o *serveOptions) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&o.maxLineBytes, "max-line-bytes", wire.DefaultMaxLineBytes, "longer command lines get line_too_long and are discarded")
	f.BoolVar(&o.failFast, "fail-fast", false, "exit 1 at the first error response")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log a summary to stderr at the end")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile (pprof) of the run to this file")
	o.bindConfig(cmd)
}

// bindConfig adds --config and one flag per scalar config key.
func (o *serveOptions) bindConfig(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.configFile, "config", "", "JSON config file (keys of docs/PROTOCOL.md §2; unknown keys are an error); Dynamo's router flag names (--router-temperature, --kv-cache-block-size, --no-kv-events, ...) are accepted too, see the README")
	f.StringVar(&o.policyConfig, "router-policy-config", "", "Dynamo's router policy config, a YAML `FILE` (as Dynamo's flag at the pinned commit): default_policy_class, policy_classes and worker_selection (no per-model profiles), read strictly and applied over --config as flags are")
	for _, rf := range roleSelectionFlags {
		f.String(rf.name, "", "the worker_selection instance `NAME` "+rf.role+" requests place with (config "+rf.key+"; unset: worker_selection.default's; \"default\": Dynamo's built-in selector, the config's own policy); Dynamo's flag from after the pinned commit")
	}
	for _, cf := range configFlags {
		usage := "config " + cf.key + ": " + cf.usage
		switch d := configDefault(cf.key).(type) {
		case string:
			f.String(flagName(cf.key), d, usage)
		case uint64:
			f.Uint64(flagName(cf.key), d, usage)
		case float64:
			f.Float64(flagName(cf.key), d, usage)
		case bool:
			f.Bool(flagName(cf.key), d, usage)
		}
	}
	bindDynamoFlags(f)
}

// roleSelectionFlags are Dynamo's flags naming the worker_selection
// instance of one role. They came after the pinned commit (there one
// instance served every role), and are taken here because a disaggregated
// setup wants them and they change nothing when not given.
var roleSelectionFlags = []struct{ name, key, role string }{
	{"router-prefill-policy", "worker_selection.prefill", "prefill"},
	{"router-decode-policy", "worker_selection.decode", "decode"},
}

// loadConfig reads the config file, then applies the flags that were set.
func (o *serveOptions) loadConfig(flags *pflag.FlagSet) (protocol.Config, error) {
	src, err := o.configSource(flags)
	if err != nil {
		return protocol.Config{}, err
	}
	return src.Load()
}

// readConfigFile reads the config file flag names, refusing one past
// wire.MaxConfigFileBytes.
func readConfigFile(flag, path string) ([]byte, error) {
	data, err := wire.ReadBounded(path)
	var pe *fs.PathError
	switch {
	case errors.Is(err, wire.ErrTooLarge):
		return nil, fmt.Errorf("%s %s: larger than %d bytes, which no config needs (is it the right file?)", flag, path, wire.MaxConfigFileBytes)
	case errors.As(err, &pe) && pe.Op == "open": // the path names itself
		return nil, fmt.Errorf("%s: %w", flag, err)
	case err != nil:
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return data, nil
}

func (o *serveOptions) configSource(flags *pflag.FlagSet) (wire.ConfigSource, error) {
	src := wire.ConfigSource{FileName: o.configFile}
	if o.configFile != "" {
		var err error
		if src.File, err = readConfigFile("--config", o.configFile); err != nil {
			return src, err
		}
	}
	if o.policyConfig != "" {
		data, err := readConfigFile("--router-policy-config", o.policyConfig)
		if err != nil {
			return src, err
		}
		// Its keys go first among the overrides: over the file, under
		// nothing (no flag sets them).
		if src.Overrides, err = wire.PolicyConfigOverrides(o.policyConfig, data); err != nil {
			return src, err
		}
	}
	for _, rf := range roleSelectionFlags {
		if fl := flags.Lookup(rf.name); fl != nil && fl.Changed {
			src.Overrides = append(src.Overrides, wire.Override{Key: rf.key, Value: fl.Value.String(), Flag: "--" + rf.name})
		}
	}
	for _, cf := range configFlags {
		fl := flags.Lookup(flagName(cf.key))
		if fl == nil || !fl.Changed {
			continue
		}
		var v any
		var err error
		switch configDefault(cf.key).(type) {
		case string:
			v, err = flags.GetString(fl.Name)
		case uint64:
			v, err = flags.GetUint64(fl.Name)
		case float64:
			v, err = flags.GetFloat64(fl.Name)
		case bool:
			v, err = flags.GetBool(fl.Name)
		}
		if err != nil {
			return src, err
		}
		src.Overrides = append(src.Overrides, wire.Override{Key: cf.key, Value: v, Flag: "--" + fl.Name})
	}
	aliases, defaults, err := dynamoOverrides(flags)
	if err != nil {
		return src, err
	}
	src.Overrides = append(src.Overrides, aliases...)
	src.Defaults = append(src.Defaults, defaults...)
	// A key set by two flags (one of them Dynamo's name for it) must be
	// set once.
	by := map[string]string{}
	for _, o := range src.Overrides {
		if other, ok := by[o.Key]; ok && other != o.Flag {
			return src, fmt.Errorf("%s and %s both set %s: give one", other, o.Flag, o.Key)
		}
		by[o.Key] = o.Flag
	}
	return src, nil
}

func runServe(cmd *cobra.Command, o *serveOptions, log *zerolog.Logger) error {
	src, err := o.configSource(cmd.Flags())
	if err != nil {
		return &exitError{2, err}
	}
	if o.maxLineBytes < 1 {
		return &exitError{2, fmt.Errorf("--max-line-bytes %d: expected at least 1 byte", o.maxLineBytes)}
	}
	cfg, err := src.Load()
	if err != nil {
		return &exitError{2, err}
	}
	eng, err := engine.New(cfg)
	if err != nil {
		return &exitError{2, err}
	}
	if o.cpuProfile != "" {
		stopProfile, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			return &exitError{2, err}
		}
		defer stopProfile()
	}
	stopper, err := wire.NewStopper(os.Stdin)
	if err != nil {
		return &exitError{2, err}
	}
	ctx := cmd.Context()
	stdout := &watchedWriter{w: os.Stdout}
	stop.setForcedNote(stdout.forcedNote)
	defer stop.setForcedNote(nil)
	go func() {
		// Serve stops before it reads more input: every command it read
		// is answered, and one blocked on input stops at once.
		<-ctx.Done()
		stopper.Stop()
	}()
	st, err := wire.Serve(os.Stdin, stdout, eng, wire.ServeOptions{MaxLineBytes: o.maxLineBytes, FailFast: o.failFast,
		Stopper: stopper, Configure: src.Configure(newEngine)})
	if o.verbose {
		info := log.Level(zerolog.InfoLevel)
		info.Info().Int("commands", st.Commands).Int("errors", st.Errors).Msg("served")
	}
	if errors.Is(err, wire.ErrStopped) {
		sig := signalOf(ctx)
		return &exitError{exitCodeFor(sig), fmt.Errorf("%v: stopped after %d commands, all answered", sig, st.Commands)}
	}
	if errors.Is(err, wire.ErrFailFast) {
		return &exitError{1, err}
	}
	if err != nil {
		return &exitError{1, err}
	}
	return nil
}

// watchedWriter is stdout, telling whether a write is under way: a forced
// exit (a stop signal, and a reader that does not drain stdout) then says
// the last response line may be cut.
type watchedWriter struct {
	w       io.Writer
	writing atomic.Bool
}

func (w *watchedWriter) Write(p []byte) (int, error) {
	w.writing.Store(true)
	defer w.writing.Store(false)
	return w.w.Write(p)
}

func (w *watchedWriter) forcedNote() string {
	if w.writing.Load() {
		return "stdout was not drained: the last response line may be cut, and responses not yet written are dropped"
	}
	return "responses not yet written are dropped"
}

// newEngine builds the engine a stream's config command asks for.
func newEngine(cfg protocol.Config) (wire.Stepper, error) { return engine.New(cfg) }
