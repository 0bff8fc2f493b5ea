package wire

import (
	"strconv"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
)

// A place's router_config_override is Dynamo's RouterConfigOverride as
// serde reads it (RouterConfigOverrideSerde, at the pinned commit): an
// object of optional keys, null the same as absent. Dynamo ignores a key
// it does not know; here, as everywhere in the protocol, an unknown key is
// refused by name, since a misspelt override would otherwise change
// nothing, silently.

// overrideHints suggest the override key a mistyped one meant.
var overrideHints = NewKeyHints(protocol.OverrideKeys...)

// decodeOverride reads the override object at the scanner. Each value is
// checked as it is read, so that the error names the first bad key of the
// line, as the key the host wrote: a bad overlap_score_weight is named as
// itself, not as the prefill_load_scale it folds into. (Dynamo folds first
// and checks after, so it lets a bad prefill_load_scale pass when a good
// overlap_score_weight overwrites it; a value given is checked here
// whatever replaces it.)
func decodeOverride(s *scanner) (*protocol.RouterConfigOverride, *fieldError) {
	o := &protocol.RouterConfigOverride{}
	var weight *float64
	err := s.object(func(key string) *fieldError {
		var num **float64
		var flag **bool
		switch key {
		case "overlap_score_credit":
			num = &o.OverlapScoreCredit
		case "prefill_load_scale":
			num = &o.PrefillLoadScale
		case "router_temperature":
			num = &o.RouterTemperature
		case "shared_cache_multiplier":
			num = &o.SharedCacheMultiplier
		case "overlap_score_weight":
			num = &weight
		case "assume_kv_reuse":
			flag = &o.AssumeKVReuse
		case "track_prefill_tokens":
			flag = &o.TrackPrefillTokens
		default:
			msg := "is not a key of router_config_override (" + strings.Join(protocol.OverrideKeys, ", ") + ")"
			if name, ok := overrideHints.Suggest(key); ok {
				msg += " (did you mean " + strconv.Quote(name) + "?)"
			}
			return &fieldError{code: protocol.CodeUnknownField, path: key, msg: msg}
		}
		if s.null() {
			return nil
		}
		var err *fieldError
		if num != nil {
			*num, err = ptr(s.float())
		} else {
			*flag, err = ptr(s.boolean())
		}
		if err != nil {
			return err.within(key)
		}
		// Every key read before this one passed, so what the check finds
		// is about this one; the weight is checked as the scale it becomes.
		probe := *o
		if num == &weight {
			probe.PrefillLoadScale = weight
		}
		if _, msg := probe.Check(); msg != "" {
			return &fieldError{code: protocol.CodeInvalidField, path: key, msg: msg}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Dynamo's apply_deprecated_overlap_score_weight_override_option,
	// after every key is read, so the key order does not matter.
	if weight != nil {
		o.PrefillLoadScale = weight
		if *weight == 0 {
			zero := 0.0
			o.OverlapScoreCredit = &zero
		}
	}
	return o, nil
}

// appendOverride writes an override as an object, its keys in
// protocol.OverrideKeys' order. The deprecated overlap_score_weight is
// never written: the decoder has folded it into the keys it sets.
func appendOverride(b []byte, o *protocol.RouterConfigOverride) []byte {
	b = append(b, '{')
	key := func(k string) {
		if b[len(b)-1] != '{' {
			b = append(b, ',')
		}
		b = append(appendString(b, k), ':')
	}
	num := func(k string, v *float64) {
		if v != nil {
			key(k)
			b = protocol.AppendNum(b, *v)
		}
	}
	flag := func(k string, v *bool) {
		if v != nil {
			key(k)
			b = strconv.AppendBool(b, *v)
		}
	}
	num("overlap_score_credit", o.OverlapScoreCredit)
	num("prefill_load_scale", o.PrefillLoadScale)
	num("router_temperature", o.RouterTemperature)
	flag("assume_kv_reuse", o.AssumeKVReuse)
	flag("track_prefill_tokens", o.TrackPrefillTokens)
	num("shared_cache_multiplier", o.SharedCacheMultiplier)
	return append(b, '}')
}
