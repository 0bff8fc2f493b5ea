package protocol

import (
	"fmt"
	"math"
)

// RouterConfigOverride is Dynamo's per-request override of the selector's
// knobs (lib/kv-router scheduling/config.rs, RouterConfigOverride, at the
// pinned commit): each field given replaces the config's for this request
// alone. The two switches are Dynamo's too, but this router has only one
// side of each (it always counts prefill tokens, and always hashes real
// blocks), so only that side is taken; shared_cache_multiplier weighs a
// shared cache tier, which this router does not index yet, so it is
// checked and changes nothing (PROTOCOL.md §4).
type RouterConfigOverride struct {
	OverlapScoreCredit    *float64
	PrefillLoadScale      *float64
	RouterTemperature     *float64
	AssumeKVReuse         *bool
	TrackPrefillTokens    *bool
	SharedCacheMultiplier *float64
}

// OverrideKeys are the override's keys, as Dynamo spells them;
// overlap_score_weight is Dynamo's deprecated input, folded into the other
// two as it does (it sets prefill_load_scale, and 0 also zeroes the
// credit).
var OverrideKeys = []string{"overlap_score_credit", "prefill_load_scale", "router_temperature",
	"assume_kv_reuse", "track_prefill_tokens", "shared_cache_multiplier", "overlap_score_weight"}

// Check is what is wrong with the override (msg "" when nothing is), with
// Dynamo's rules, and the key it is about.
func (o *RouterConfigOverride) Check() (key, msg string) {
	finite := func(v *float64, hi float64) string {
		switch {
		case v == nil:
			return ""
		case math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0:
			return fmt.Sprintf("must be a finite, non-negative number, got %v", *v)
		case *v > hi:
			return fmt.Sprintf("expected at most %v, got %v", hi, *v)
		}
		return ""
	}
	for _, c := range []struct {
		key string
		v   *float64
		hi  float64
	}{
		{"overlap_score_credit", o.OverlapScoreCredit, MaxNumber},
		{"prefill_load_scale", o.PrefillLoadScale, MaxNumber},
		{"router_temperature", o.RouterTemperature, MaxNumber},
		{"shared_cache_multiplier", o.SharedCacheMultiplier, 1},
	} {
		if msg := finite(c.v, c.hi); msg != "" {
			return c.key, msg
		}
	}
	if t := o.RouterTemperature; t != nil && *t != 0 && *t < 1e-6 {
		return "router_temperature", fmt.Sprintf("expected 0, or at least 1e-6, got %v", *t)
	}
	if v := o.AssumeKVReuse; v != nil && !*v {
		return "assume_kv_reuse", "false (random hashes for active blocks) has no equivalent here: blocks are always hashed from the prompt"
	}
	if v := o.TrackPrefillTokens; v != nil && !*v {
		return "track_prefill_tokens", "false has no equivalent here: a request's prefill tokens are always booked"
	}
	return "", ""
}

// DeviceType is the device a worker runs on, as Dynamo's discovery names
// it; device_aware_weighted weighs CPU workers against the others.
type DeviceType string

// Device types.
const (
	DeviceCPU  DeviceType = "cpu"
	DeviceCUDA DeviceType = "cuda"
)

// Valid reports whether d is a device type.
func (d DeviceType) Valid() bool { return d == DeviceCPU || d == DeviceCUDA }
