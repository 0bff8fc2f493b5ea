package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/offline-router/offline-router/internal/selector"
	"github.com/offline-router/offline-router/internal/wire"
)

// dynamoFlag is one of Dynamo's KV router flags (python -m dynamo.frontend,
// lib/kv-router's config), as a Dynamo user would type it. It is an alias
// of config keys here, with its value converted (to sets them), or, where
// this router has no equivalent, refused with what to use instead (refuse).
// The table is in the README; the flags are hidden from --help, which
// points there. Dynamo's flags for keys that have no flag of their own here
// (--router-policy-config, --router-prefill-policy, --router-decode-policy)
// are not aliases: serve.go binds them, shown in --help.
type dynamoFlag struct {
	name   string
	kind   string // "float", "string", "bool" or "uint": how the value parses (a string by default)
	to     func(v any) []wire.Override
	refuse string
	// refuseValues are values of the flag with no equivalent here, with
	// what to say.
	refuseValues map[string]string
	// choices, when set, are the values Dynamo's flag takes: any other is
	// refused, as Dynamo's argparse does.
	choices []string
}

// set is a conversion to one key, unchanged.
func set(key string) func(any) []wire.Override {
	return func(v any) []wire.Override { return []wire.Override{{Key: key, Value: v}} }
}

// secondsTo converts Dynamo's seconds to a key in ms, to the nanosecond
// as Dynamo's Duration::from_secs_f64 keeps it: 16.1 s is 16100 ms, not
// the 16100.000000000002 a float product gives, which a 100 ms expiry
// bucket would round up to the next.
func secondsTo(key string) func(any) []wire.Override {
	return func(v any) []wire.Override {
		return []wire.Override{{Key: key, Value: math.Round(v.(float64)*1e9) / 1e6}}
	}
}

var dynamoFlags = []dynamoFlag{
	{name: "router-mode", kind: "string", to: func(v any) []wire.Override {
		// Dynamo's names (round-robin, least-loaded) are in the policy
		// table; any other goes as it is, for the config to check.
		mode := v.(string)
		if p, ok := selector.OfDynamo(mode); ok {
			return []wire.Override{{Key: "policy", Value: string(p)}}
		}
		return []wire.Override{{Key: "policy", Value: mode}}
	}},
	{name: "kv-cache-block-size", kind: "uint", to: set("block_size")},
	{name: "router-block-size", kind: "uint", to: set("block_size")},
	{name: "router-temperature", kind: "float", to: set("temperature")},
	{name: "router-kv-overlap-score-credit", kind: "float", to: set("overlap_score_credit")},
	{name: "router-prefill-load-scale", kind: "float", to: set("prefill_load_scale")},
	{name: "router-kv-overlap-score-credit-decay", kind: "float", to: set("overlap_score_credit_decay")},
	{name: "router-decode-active-request-weight", kind: "float", to: set("decode_active_request_weight")},
	{name: "router-host-cache-hit-weight", kind: "float", to: set("host_cache_hit_weight")},
	{name: "router-disk-cache-hit-weight", kind: "float", to: set("disk_cache_hit_weight")},
	// Dynamo's deprecated weight became the prefill scale; 0 also zeroes
	// the credit (lib/kv-router scheduling config).
	{name: "kv-overlap-score-weight", kind: "float", to: overlapWeight},
	{name: "router-kv-overlap-score-weight", kind: "float", to: overlapWeight},
	{name: "router-kv-events", kind: "bool", to: set("kv_events")},
	{name: "no-kv-events", kind: "bool", to: negated("kv_events")},
	{name: "no-router-kv-events", kind: "bool", to: negated("kv_events")},
	{name: "router-ttl-secs", kind: "float", to: secondsTo("approx_ttl_ms")},
	{name: "router-ttl", kind: "float", to: secondsTo("approx_ttl_ms")},
	{name: "router-predicted-ttl-secs", kind: "float", to: secondsTo("predicted_ttl_ms")},
	// Dynamo's flag came after the pinned commit (pull request #13701,
	// with its lru policy); its default, ttl, is the only behaviour here,
	// so it is taken and changes nothing.
	{name: "router-approximate-cache-policy", kind: "string", to: noOp,
		choices: []string{"ttl", "lru"}, refuseValues: map[string]string{
			"lru": "arrived in Dynamo after the commit this router follows (pull request #13701); approximate mode here expires blocks by TTL (--approx-ttl-ms)",
		}},
	{name: "router-queue-threshold", kind: "float", to: set("queue_threshold")},
	{name: "router-queue-policy", kind: "string", to: set("queue_policy")},
	{name: "router-prefill-load-model", kind: "string", to: set("prefill_load_model")},
	{name: "router-session-affinity-mode", kind: "string", to: set("affinity.mode")},
	{name: "router-session-affinity-ttl-secs", kind: "float", to: secondsTo("affinity.ttl_ms")},
	{name: "busy-threshold", refuse: "was replaced in Dynamo by --active-decode-blocks-threshold (a fraction of the KV blocks) and --active-prefill-tokens-threshold; use those"},
	{name: "load-aware", kind: "bool", refuse: "is a Dynamo preset; here give --policy kv --overlap-score-credit 0 --kv-events=false"},
	{name: "admission-control", kind: "bool", refuse: "does nothing in Dynamo now; the busy thresholds turn on one by one (--active-decode-blocks-threshold, --active-prefill-tokens-threshold)"},
	{name: "router-replica-sync", kind: "bool", refuse: "is replay's --router-replicas N with --replica-sync-rate 1 (serve is one router instance)"},
	{name: "router-reset-states", kind: "bool", refuse: "has no equivalent: the router starts empty on every run"},
	{name: "router-snapshot-threshold", refuse: "has no equivalent: there is no durable event stream to snapshot"},
	{name: "router-track-active-blocks", kind: "bool", refuse: "has no equivalent: active blocks are always tracked"},
	// Output blocks are left out: asking for them is refused, asking for
	// Dynamo's default (off) does nothing.
	{name: "router-track-output-blocks", kind: "bool", to: noOp, refuseValues: map[string]string{"true": outputBlocksLeftOut}},
	{name: "track-output-blocks", kind: "bool", to: noOp, refuseValues: map[string]string{"true": outputBlocksLeftOut}},
	{name: "no-router-track-output-blocks", kind: "bool", to: noOp},
	{name: "router-selection-policy", refuse: "is not in the Dynamo release this router follows: lmetric is an open proposal there, pull request #11028"},
	{name: "router-assume-kv-reuse", kind: "bool", refuse: "has no equivalent"},
	{name: "router-track-prefill-tokens", kind: "bool", refuse: "has no equivalent: prefill tokens are always counted (--prefill-load-scale weighs them)"},
	{name: "router-min-initial-workers", refuse: "has no equivalent: the host announces workers with worker_ready (replay: --workers)"},
}

// noOp is a flag whose accepted values are this router's one behaviour.
func noOp(any) []wire.Override { return nil }

const outputBlocksLeftOut = "is left out: decode progress does not reach the router here (docs/PROTOCOL.md §5, output blocks)"

func overlapWeight(v any) []wire.Override {
	if w := v.(float64); w != 0 {
		return []wire.Override{{Key: "prefill_load_scale", Value: w}}
	}
	return []wire.Override{{Key: "prefill_load_scale", Value: 0.0}, {Key: "overlap_score_credit", Value: 0.0}}
}

func negated(key string) func(any) []wire.Override {
	return func(v any) []wire.Override { return []wire.Override{{Key: key, Value: !v.(bool)}} }
}

// bindDynamoFlags adds Dynamo's flag names, hidden from --help.
func bindDynamoFlags(f *pflag.FlagSet) {
	for _, d := range dynamoFlags {
		switch d.kind {
		case "float":
			f.Float64(d.name, 0, "")
		case "uint":
			f.Uint64(d.name, 0, "")
		case "bool":
			f.Bool(d.name, false, "")
		default:
			f.String(d.name, "", "")
		}
		if err := f.MarkHidden(d.name); err != nil {
			panic(err)
		}
	}
}

// dynamoOverrides are the config keys the Dynamo flags given set, and the
// defaults they change (under the config file), or an error for one that
// has no equivalent here.
func dynamoOverrides(f *pflag.FlagSet) (out, defaults []wire.Override, err error) {
	for _, d := range dynamoFlags {
		fl := f.Lookup(d.name)
		if fl == nil || !fl.Changed {
			continue
		}
		if d.refuse != "" {
			return nil, nil, fmt.Errorf("--%s (a Dynamo router flag) %s", d.name, d.refuse)
		}
		var v any
		switch d.kind {
		case "float":
			v, err = f.GetFloat64(d.name)
		case "uint":
			v, err = f.GetUint64(d.name)
		case "bool":
			v, err = f.GetBool(d.name)
		default:
			v, err = f.GetString(d.name)
		}
		if err != nil {
			return nil, nil, err
		}
		// Every number Dynamo's router flags take is >= 0; saying so here
		// names the flag and its value as given (seconds, not the ms a
		// key holds).
		if x, ok := v.(float64); ok && !(x >= 0) {
			return nil, nil, fmt.Errorf("--%s %v (a Dynamo router flag): expected a number >= 0", d.name, x)
		}
		if why, ok := d.refuseValues[fmt.Sprint(v)]; ok {
			return nil, nil, fmt.Errorf("--%s %v (a Dynamo router flag) %s", d.name, v, why)
		}
		if d.choices != nil && !slices.Contains(d.choices, fmt.Sprint(v)) {
			return nil, nil, fmt.Errorf("--%s %q (a Dynamo router flag): expected one of %s, as in Dynamo", d.name, v, strings.Join(d.choices, ", "))
		}
		for _, o := range d.to(v) {
			o.Flag = "--" + d.name
			out = append(out, o)
		}
	}
	// Setting the TTL turns affinity on in Dynamo, hard unless a mode is
	// given: here a mode the file or a flag gives wins over that default.
	if f.Changed("router-session-affinity-ttl-secs") {
		defaults = append(defaults, wire.Override{Key: "affinity.mode", Value: "hard"})
	}
	return out, defaults, nil
}
