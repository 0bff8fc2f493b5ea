package wire

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/protocol"
)

const placeHead = `{"op":"place","id":"q","request_id":"r","input_tokens":4`

func placeWithOverride(override string) string {
	return placeHead + `,"router_config_override":` + override + `}`
}

func fp(v float64) *float64 { return &v }
func bp(v bool) *bool       { return &v }

// TestDecodeOverride: every key reads into its field, null is absent
// (at the top and inside), and the deprecated overlap_score_weight folds
// as Dynamo's apply_deprecated_overlap_score_weight_override_option does,
// whatever the key order.
func TestDecodeOverride(t *testing.T) {
	cases := []struct {
		name, override string
		want           *protocol.RouterConfigOverride
	}{
		{"every key", `{"overlap_score_credit":1.5,"prefill_load_scale":0.25,"router_temperature":0.5,"assume_kv_reuse":true,"track_prefill_tokens":true,"shared_cache_multiplier":1}`,
			&protocol.RouterConfigOverride{OverlapScoreCredit: fp(1.5), PrefillLoadScale: fp(0.25), RouterTemperature: fp(0.5),
				AssumeKVReuse: bp(true), TrackPrefillTokens: bp(true), SharedCacheMultiplier: fp(1)}},
		{"zeros", `{"overlap_score_credit":0,"prefill_load_scale":0,"router_temperature":0,"shared_cache_multiplier":0}`,
			&protocol.RouterConfigOverride{OverlapScoreCredit: fp(0), PrefillLoadScale: fp(0), RouterTemperature: fp(0), SharedCacheMultiplier: fp(0)}},
		{"the smallest temperature", `{"router_temperature":1e-6}`, &protocol.RouterConfigOverride{RouterTemperature: fp(1e-6)}},
		{"null override", `null`, nil},
		{"empty override", `{}`, &protocol.RouterConfigOverride{}},
		{"null keys", `{"overlap_score_credit":null,"prefill_load_scale":null,"router_temperature":null,"assume_kv_reuse":null,"track_prefill_tokens":null,"shared_cache_multiplier":null,"overlap_score_weight":null}`,
			&protocol.RouterConfigOverride{}},
		{"weight alone sets the scale", `{"overlap_score_weight":2}`, &protocol.RouterConfigOverride{PrefillLoadScale: fp(2)}},
		{"weight after the scale overwrites it", `{"prefill_load_scale":3,"overlap_score_weight":2}`, &protocol.RouterConfigOverride{PrefillLoadScale: fp(2)}},
		{"weight before the scale overwrites it", `{"overlap_score_weight":2,"prefill_load_scale":3}`, &protocol.RouterConfigOverride{PrefillLoadScale: fp(2)}},
		{"weight not 0 keeps the credit", `{"overlap_score_credit":0.5,"overlap_score_weight":2}`, &protocol.RouterConfigOverride{OverlapScoreCredit: fp(0.5), PrefillLoadScale: fp(2)}},
		{"weight 0 zeroes the credit, after it", `{"overlap_score_credit":0.5,"overlap_score_weight":0}`, &protocol.RouterConfigOverride{OverlapScoreCredit: fp(0), PrefillLoadScale: fp(0)}},
		{"weight 0 zeroes the credit, before it", `{"overlap_score_weight":0,"overlap_score_credit":0.5,"prefill_load_scale":3}`, &protocol.RouterConfigOverride{OverlapScoreCredit: fp(0), PrefillLoadScale: fp(0)}},
		{"weight 0 alone sets both", `{"overlap_score_weight":0}`, &protocol.RouterConfigOverride{OverlapScoreCredit: fp(0), PrefillLoadScale: fp(0)}},
		{"weight null folds nothing", `{"overlap_score_credit":0.5,"prefill_load_scale":3,"overlap_score_weight":null}`, &protocol.RouterConfigOverride{OverlapScoreCredit: fp(0.5), PrefillLoadScale: fp(3)}},
	}
	for _, c := range cases {
		d := decode(t, placeWithOverride(c.override))
		if d.Err != nil {
			t.Errorf("%s: %v", c.name, d.Err)
			continue
		}
		if diff := cmp.Diff(c.want, d.Cmd.RouterConfigOverride); diff != "" {
			t.Errorf("%s: %s (-want +got):\n%s", c.name, c.override, diff)
		}
	}
}

// TestDecodeOverrideReadsEveryKey: the decoder takes every key protocol
// lists, so a key added there and not here fails.
func TestDecodeOverrideReadsEveryKey(t *testing.T) {
	for _, k := range protocol.OverrideKeys {
		v := "1"
		if k == "assume_kv_reuse" || k == "track_prefill_tokens" {
			v = "true"
		}
		d := decode(t, placeWithOverride(`{"`+k+`":`+v+`}`))
		if d.Err != nil || d.Cmd.RouterConfigOverride == nil || *d.Cmd.RouterConfigOverride == (protocol.RouterConfigOverride{}) {
			t.Errorf("%s: err %v, override %+v", k, d.Err, d.Cmd.RouterConfigOverride)
		}
		// Interned, so a key costs no string; the deprecated spelling
		// hashes as overlap_score_credit and is left out.
		if _, ok := lookupKey(k); ok != (k != "overlap_score_weight") {
			t.Errorf("%s: interned %v", k, ok)
		}
	}
}

// TestDecodeOverrideAndDeviceTypeRefusals: each bad value is refused with
// its code and its message, naming the key inside the override as it was
// written.
func TestDecodeOverrideAndDeviceTypeRefusals(t *testing.T) {
	const at = `field "router_config_override.`
	cases := []struct{ line, code, msg string }{
		// Dynamo's RouterConfigOverride::validate, one key at a time.
		{placeWithOverride(`{"overlap_score_credit":-1}`), "invalid_field", at + `overlap_score_credit": must be a finite, non-negative number, got -1`},
		{placeWithOverride(`{"overlap_score_credit":1e16}`), "invalid_field", at + `overlap_score_credit": expected at most 9.007199254740992e+15, got 1e+16`},
		{placeWithOverride(`{"prefill_load_scale":-0.5}`), "invalid_field", at + `prefill_load_scale": must be a finite, non-negative number, got -0.5`},
		{placeWithOverride(`{"router_temperature":-1}`), "invalid_field", at + `router_temperature": must be a finite, non-negative number, got -1`},
		{placeWithOverride(`{"router_temperature":1e-7}`), "invalid_field", at + `router_temperature": expected 0, or at least 1e-6, got 1e-07`},
		{placeWithOverride(`{"shared_cache_multiplier":1.5}`), "invalid_field", at + `shared_cache_multiplier": expected at most 1, got 1.5`},
		{placeWithOverride(`{"shared_cache_multiplier":-0.1}`), "invalid_field", at + `shared_cache_multiplier": must be a finite, non-negative number, got -0.1`},
		{placeWithOverride(`{"assume_kv_reuse":false}`), "invalid_field", at + `assume_kv_reuse": false (random hashes for active blocks) has no equivalent here`},
		{placeWithOverride(`{"track_prefill_tokens":false}`), "invalid_field", at + `track_prefill_tokens": false has no equivalent here`},
		// The weight is checked as the scale it becomes, and named as written.
		{placeWithOverride(`{"overlap_score_weight":-1}`), "invalid_field", at + `overlap_score_weight": must be a finite, non-negative number, got -1`},
		{placeWithOverride(`{"prefill_load_scale":1,"overlap_score_weight":-2}`), "invalid_field", at + `overlap_score_weight": must be a finite, non-negative number, got -2`},
		// A value given is checked even when the weight would overwrite it.
		{placeWithOverride(`{"prefill_load_scale":-1,"overlap_score_weight":1}`), "invalid_field", at + `prefill_load_scale": must be a finite, non-negative number`},
		{placeWithOverride(`{"overlap_score_weight":1,"prefill_load_scale":-1}`), "invalid_field", at + `prefill_load_scale": must be a finite, non-negative number`},
		// The first bad key of the line is the one named.
		{placeWithOverride(`{"shared_cache_multiplier":2,"overlap_score_credit":-1}`), "invalid_field", at + `shared_cache_multiplier"`},
		// Types.
		{placeWithOverride(`{"overlap_score_credit":"1"}`), "invalid_field", at + `overlap_score_credit": expected a number, got a string`},
		{placeWithOverride(`{"router_temperature":1e400}`), "invalid_field", at + `router_temperature": expected a finite number, got 1e400 (out of range)`},
		{placeWithOverride(`{"assume_kv_reuse":1}`), "invalid_field", at + `assume_kv_reuse": expected true or false, got number 1`},
		{placeWithOverride(`{"track_prefill_tokens":"true"}`), "invalid_field", at + `track_prefill_tokens": expected true or false, got a string`},
		{placeWithOverride(`5`), "invalid_field", `field "router_config_override": expected an object, got number 5`},
		{placeWithOverride(`[]`), "invalid_field", `field "router_config_override": expected an object`},
		// Unknown keys are refused by name, whatever their value (Dynamo
		// ignores them), with a hint for a slip.
		{placeWithOverride(`{"bogus":1}`), "unknown_field", at + `bogus": is not a key of router_config_override (overlap_score_credit, prefill_load_scale, router_temperature, assume_kv_reuse, track_prefill_tokens, shared_cache_multiplier, overlap_score_weight)`},
		{placeWithOverride(`{"bogus":null}`), "unknown_field", at + `bogus": is not a key of router_config_override`},
		{placeWithOverride(`{"Prefill-Load-Scale":1}`), "unknown_field", `(did you mean "prefill_load_scale"?)`},
		{placeWithOverride(`{"overlap_score_decay":1}`), "unknown_field", at + `overlap_score_decay": is not a key`},
		// A key given twice, inside and outside, as for every object.
		{placeWithOverride(`{"prefill_load_scale":1,"prefill_load_scale":2}`), "invalid_field", at + `prefill_load_scale": appears more than once`},
		{placeWithOverride(`{"overlap_score_weight":null,"overlap_score_weight":1}`), "invalid_field", at + `overlap_score_weight": appears more than once`},
		{placeHead + `,"router_config_override":{},"router_config_override":{}}`, "invalid_field", `field "router_config_override": appears more than once`},
		// Ops that do not take them.
		{`{"op":"worker_ready","worker_id":1,"router_config_override":{"overlap_score_credit":-1}}`, "unknown_field", `field "router_config_override": is not a field of op "worker_ready"`},
		{placeHead + `,"device_type":"cpu"}`, "unknown_field", `field "device_type": is not a field of op "place"`},
		// device_type.
		{`{"op":"worker_ready","worker_id":1,"device_type":"gpu"}`, "invalid_field", `field "device_type": expected "cpu" or "cuda" (Dynamo's device types), got "gpu"`},
		{`{"op":"worker_ready","worker_id":1,"device_type":""}`, "invalid_field", `field "device_type": expected "cpu" or "cuda" (Dynamo's device types), got ""`},
		{`{"op":"worker_ready","worker_id":1,"device_type":"CPU"}`, "invalid_field", `got "CPU"`},
		{`{"op":"worker_ready","worker_id":1,"device_type":1}`, "invalid_field", `field "device_type": expected a string, got number 1`},
		{`{"op":"worker_ready","worker_id":1,"device_type":"cpu","device_type":"cuda"}`, "invalid_field", `field "device_type": appears more than once`},
	}
	for _, c := range cases {
		d := decode(t, c.line)
		if d.Err == nil {
			t.Errorf("%s: decoded without error", c.line)
			continue
		}
		if string(d.Err.Code) != c.code || !strings.Contains(d.Err.Message, c.msg) {
			t.Errorf("%s:\n got %s %q\nwant %s with %q", c.line, d.Err.Code, d.Err.Message, c.code, c.msg)
		}
		if d.Op == nil || (strings.Contains(c.line, `"id":"q"`) && string(d.ID) != `"q"`) {
			t.Errorf("%s: op and id not echoed: op %v, id %s", c.line, d.Op, d.ID)
		}
	}
}

func TestDecodeDeviceType(t *testing.T) {
	for _, dt := range []protocol.DeviceType{protocol.DeviceCPU, protocol.DeviceCUDA} {
		d := decode(t, `{"op":"worker_ready","worker_id":1,"device_type":"`+string(dt)+`"}`)
		if d.Err != nil || d.Cmd.DeviceType != dt {
			t.Errorf("%s: got %q, %v", dt, d.Cmd.DeviceType, d.Err)
		}
	}
	if d := decode(t, `{"op":"worker_ready","worker_id":1,"device_type":null}`); d.Err != nil || d.Cmd.DeviceType != "" {
		t.Errorf("null: got %q, %v", d.Cmd.DeviceType, d.Err)
	}
}

// TestAppendOverrideBytes: the override and device_type are written in a
// fixed order, one byte string for one command, and the folded weight is
// never written back.
func TestAppendOverrideBytes(t *testing.T) {
	u64 := func(v uint64) *uint64 { return &v }
	c := protocol.Command{Op: protocol.OpPlace, RequestID: "r", InputTokens: u64(4), PolicyClass: new(string),
		RouterConfigOverride: &protocol.RouterConfigOverride{SharedCacheMultiplier: fp(0.5), TrackPrefillTokens: bp(true),
			AssumeKVReuse: bp(true), RouterTemperature: fp(1e-6), PrefillLoadScale: fp(2), OverlapScoreCredit: fp(0)}}
	want := `{"op":"place","request_id":"r","input_tokens":4,"policy_class":"","router_config_override":{"overlap_score_credit":0,"prefill_load_scale":2,` +
		`"router_temperature":0.000001,"assume_kv_reuse":true,"track_prefill_tokens":true,"shared_cache_multiplier":0.5}}`
	if got := string(AppendCommand(nil, &c)); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	c = protocol.Command{Op: protocol.OpPlace, RequestID: "r", InputTokens: u64(4), RouterConfigOverride: &protocol.RouterConfigOverride{RouterTemperature: fp(3)}}
	if got, want := string(AppendCommand(nil, &c)), `{"op":"place","request_id":"r","input_tokens":4,"router_config_override":{"router_temperature":3}}`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	c = protocol.Command{Op: protocol.OpWorkerReady, WorkerID: u64(1), Role: protocol.RoleDecode, DeviceType: protocol.DeviceCPU, DPSize: new(uint32(2))}
	if got, want := string(AppendCommand(nil, &c)), `{"op":"worker_ready","worker_id":1,"role":"decode","device_type":"cpu","dp_size":2}`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	d := decode(t, placeWithOverride(`{"overlap_score_weight":0}`))
	if got := string(AppendCommand(nil, &d.Cmd)); strings.Contains(got, "overlap_score_weight") ||
		!strings.Contains(got, `"router_config_override":{"overlap_score_credit":0,"prefill_load_scale":0}`) {
		t.Errorf("the folded weight written as %s", got)
	}
}
