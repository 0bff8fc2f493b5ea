package wire

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/offline-router/offline-router/internal/protocol"
)

func decode(t *testing.T, line string) Decoded {
	t.Helper()
	var d Decoded
	Decode([]byte(line), &d)
	return d
}

func TestDecodePlaceKeepsEveryField(t *testing.T) {
	d := decode(t, `{"op":"place","id":"c1","now_ms":12.5,"request_id":"r","input_tokens":40,"output_tokens":7,`+
		`"block_hashes":[18446744073709551615,9007199254740993],"sequence_hashes":[1,2],"role":"prefill",`+
		`"session_id":"s","parent_session_id":"p","priority":1.5,"strict_priority":-2,"policy_class":"latency","allowed_workers":[3],"worker_id":3,"dp_rank":1}`)
	if d.Err != nil {
		t.Fatal(d.Err)
	}
	c := d.Cmd
	if c.Op != protocol.OpPlace || string(d.ID) != `"c1"` || *c.NowMS != 12.5 || c.RequestID != "r" || c.ISL() != 40 ||
		*c.OutputTokens != 7 || c.Role != protocol.RolePrefill || *c.SessionID != "s" || *c.ParentSessionID != "p" ||
		*c.Priority != 1.5 || *c.StrictPriority != -2 || *c.PolicyClass != "latency" || *c.WorkerID != 3 || *c.DPRank != 1 {
		t.Fatalf("decoded %+v", c)
	}
	if diff := cmp.Diff([]protocol.LocalBlockHash{math.MaxUint64, 1<<53 + 1}, c.BlockHashes); diff != "" {
		t.Fatalf("u64 hashes must be exact (-want +got):\n%s", diff)
	}
}

func TestDecodeEvents(t *testing.T) {
	d := decode(t, `{"op":"observe","events":[`+
		`{"worker_id":1,"storage_tier":"device","event":{"event_id":5,"dp_rank":2,"data":{"stored":{"parent_hash":7,"blocks":[{"block_hash":11,"tokens_hash":1}]}}}},`+
		`{"worker_id":1,"event":{"event_id":6,"data":{"removed":{"block_hashes":[11]}}}},`+
		`{"worker_id":1,"event":{"event_id":7,"dp_rank":null,"data":"cleared"}}]}`)
	if d.Err != nil {
		t.Fatal(d.Err)
	}
	parent := protocol.SequenceHash(7)
	want := []protocol.KVEvent{
		{WorkerID: 1, StorageTier: "device", EventID: 5, DPRank: 2, Data: protocol.Stored{ParentHash: &parent, Blocks: []protocol.StoredBlock{{BlockHash: 11, TokensHash: 1}}}},
		{WorkerID: 1, StorageTier: "device", EventID: 6, Data: protocol.Removed{BlockHashes: []protocol.SequenceHash{11}}},
		{WorkerID: 1, StorageTier: "device", EventID: 7, Data: protocol.Cleared{}},
	}
	if diff := cmp.Diff(want, d.Cmd.Events); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

// TestDecodeNastyLines: each bad line gives one error with the expected code
// whose message names the field, and decoding never panics.
func TestDecodeNastyLines(t *testing.T) {
	deep := `{"op":"inspect","id":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`
	cases := []struct {
		line, code, mention string
	}{
		{`{"op":"place","request_id":"r"`, "parse_error", "expected"},
		{`{"op":"inspect"}}`, "parse_error", "after the object"},
		{``, "parse_error", "end of line"},
		{`nul`, "parse_error", "not JSON"},
		{`{"op":"inspect","id":tru}`, "parse_error", `"id"`}, // not JSON, broken where the field's value is: named
		{`{"op":"worker_ready","worker_id":99999999999999999999999}`, "invalid_field", `"worker_id"`},
		{`{"op":"worker_ready","worker_id":1e2}`, "invalid_field", `"worker_id"`},
		{`{"op":"worker_ready","worker_id":01}`, "parse_error", `"worker_id": expected an unsigned 64-bit integer, got "01" (not a JSON number)`},
		{`{"op":"worker_ready","worker_id":-0}`, "invalid_field", `"worker_id"`},
		{`{"op":"advance_clock","now_ms":-Infinity}`, "parse_error", `"now_ms"`},
		{`{"op":"advance_clock","now_ms":"5"}`, "invalid_field", `"now_ms"`},
		{`{"op":"place","request_id":"` + strings.Repeat("x", 257) + `"}`, "invalid_field", `"request_id"`},
		{`{"op":"place","request_id":"r","tokens":[1,-2]}`, "invalid_field", `"tokens[1]"`},
		{`{"op":"place","request_id":"r","tokens":{"a":1}}`, "invalid_field", `"tokens"`},
		{`{"op":"place","request_id":"r","strict_priority":1.5}`, "invalid_field", `"strict_priority"`},
		{`{"op":"place","request_id":"r","input_tokens":1,"policy_class":7}`, "invalid_field", `"policy_class": expected a string, got number 7`},
		{"{\"op\":\"place\",\"request_id\":\"r\",\"input_tokens\":1,\"policy_class\":\"\xff\"}", "invalid_field", `"policy_class": expected a string of valid UTF-8`},
		{`{"op":"place","request_id":"r","input_tokens":1,"policy_class":"a","policy_class":"b"}`, "invalid_field", `"policy_class": appears more than once`},
		{`{"op":"inspect","policy_class":"a"}`, "unknown_field", `"policy_class": is not a field of op "inspect"`},
		{`{"op":"place","request_id":"r","input_tokens":1,"policy-class":"a"}`, "unknown_field", `did you mean "policy_class"`},
		{`{"op":"place","request_id":"r","request_id":"s"}`, "invalid_field", "more than once"},
		{`{"op":"place","request_id":"r","bogus":1}`, "unknown_field", `"bogus"`},
		{`{"op":"place","request_id":"r","OP":"x"}`, "unknown_field", `did you mean "op"`},
		{`{"op":"inspect","request_id":"r"}`, "unknown_field", `"request_id"`},
		// Inside an event a key no event struct has is skipped, as
		// Dynamo's deserializer skips it (TestDecodeIgnoresUnknownEventKeys);
		// a Dynamo storage tier is a closed set, and a malformed value of a
		// known key is still an error.
		{`{"op":"observe","events":[{"worker_id":1,"storage_tier":"host","event":{"event_id":1,"data":"cleared"}}]}`, "invalid_field", `"events[0].storage_tier": expected one of device, host_pinned, disk, external`},
		{`{"op":"observe","events":[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":-2,"x":3}]}}}}]}`, "invalid_field", `events[0].event.data.stored.blocks[0].tokens_hash`},
		{`{"op":"observe","events":[{"worker_id":1,"event":{"event_id":1,"data":{"moved":{}}}}]}`, "unknown_field", `is not an event kind`},
		{`{"op":"observe","events":[{"event":{"event_id":1,"data":"cleared"}}]}`, "invalid_field", `events[0].worker_id`},
		{`{"op":"observe","events":[{"worker_id":1,"event":{"event_id":1}}]}`, "invalid_field", `events[0].event.data`},
		{`{"op":"observe","events":[{"worker_id":1,"event":{"event_id":1,"data":{"removed":{}}}}]}`, "invalid_field", `removed.block_hashes`},
		{`{"op":"place","request_id":"a\u0000b\ud83d\ude00","input_tokens":1}`, "", ""}, // escapes decode, a surrogate pair to its character
		{`{"op":"place","request_id":"a\u0000b\ud800","input_tokens":1}`, "invalid_field", `"request_id": expected a string of valid UTF-8, got a lone surrogate escape`},
		{`{"op":"place","request_id":"r"}`, "invalid_field", `"input_tokens": required: give the prompt as tokens`},
		{`{"op":"worker_ready","worker_id":1,"events":5}`, "unknown_field", `"events": is not a field of op "worker_ready"`},
		{`{"events":5,"op":"worker_ready","worker_id":1}`, "unknown_field", `"events": is not a field of op "worker_ready"`},
		{`{"op":"inspect","request_id":{"a":1}}`, "unknown_field", `"request_id": is not a field of op "inspect"`},
		{`{"op":"teleport","events":5}`, "unknown_op", `"teleport" is not one of`},
		{`{"op":"place","request_id":7}`, "invalid_field", `"request_id": expected a string, got number 7`},
		{"{\"op\":\"advance_clock\",\"now_ms\":50}\x00 garbage {{{", "parse_error", "unexpected data after the object"},
		{`{"op":`, "parse_error", `"op": expected a string, got end of line`},
		{"{\"op\":\"advance_clock\",\"now_ms\":\x001}", "parse_error", `"now_ms"`},
		{"{\"op\":\x00\"inspect\"}", "parse_error", `"op"`},
		{`{"op":"place","request_id":`, "parse_error", `"request_id": expected a string, got end of line`},
		{`{"op":"place","request_id":"bad\x"}`, "parse_error", "escape"},
		{"{\"op\":\"place\",\"request_id\":\"a\nb\"}", "parse_error", "control character"},
		{deep, "invalid_field", `"id"`},
		// An id is echoed as written, so it must be JSON a strict reader takes.
		{`{"op":"inspect","id":"\ud800"}`, "invalid_field", `"id": expected a string of valid UTF-8, got a lone surrogate escape`},
		{`{"op":"config","id":"a\udc00b"}`, "invalid_field", `"id": expected a string of valid UTF-8, got a lone surrogate escape`},
		{`{"op":"inspect","id":"\ud83d\ude00"}`, "", ""},
		{"{\"op\":\"inspect\",\"id\":\"\xff\"}", "invalid_field", `"id": expected a string of valid UTF-8`},
		// The op decides what fields mean: a field it does not take is named,
		// not a key inside it; an unknown op is named before unknown keys.
		{`{"op":"worker_ready","worker_id":1,"events":[{"bogus":1}]}`, "unknown_field", `"events": is not a field of op "worker_ready"`},
		{`{"op":"teleport","bogus":1}`, "unknown_op", `"teleport" is not one of`},
		// A line that is not JSON is parse_error, whatever was read first.
		{`{"id":"q","op":"worker_ready","worker_id":1,"events":[1,}`, "parse_error", "the line is not JSON: it breaks at byte 56"},
		{`{"op":"nope","id":"q","bogus":{"a":[}`, "parse_error", "breaks at byte 36"},
		{"{\"op\":\"inspect\",\"id\":\"q\",\"k\xff\":1}", "invalid_field", "a key is not valid UTF-8"},
	}
	for _, c := range cases {
		d := decode(t, c.line)
		if c.code == "" {
			if d.Err != nil {
				t.Errorf("%.80s: unexpected error %v", c.line, d.Err)
			}
			continue
		}
		if d.Err == nil {
			t.Errorf("%.80s: decoded without error", c.line)
			continue
		}
		if string(d.Err.Code) != c.code || !strings.Contains(d.Err.Message, c.mention) {
			t.Errorf("%.80s: got %s %q, want %s mentioning %q", c.line, d.Err.Code, d.Err.Message, c.code, c.mention)
		}
	}
}

func TestDecodeRecoversOpAndID(t *testing.T) {
	d := decode(t, `{"id":42,"op":"place","request_id":7}`)
	if d.Err == nil || d.Op == nil || *d.Op != "place" || string(d.ID) != "42" {
		t.Fatalf("want op and id recovered, got op=%v id=%s err=%v", d.Op, d.ID, d.Err)
	}
	// A string that is not UTF-8 is a wrong value, not broken JSON: the
	// line's op is still echoed.
	d = decode(t, "{\"op\":\"place\",\"request_id\":\"\xff\"}")
	if d.Err == nil || d.Err.Code != "invalid_field" || d.Op == nil || *d.Op != "place" {
		t.Fatalf("want invalid_field with op recovered, got op=%v err=%v", d.Op, d.Err)
	}
	// A key that is not UTF-8 is a wrong key, not broken JSON; of an op or
	// id given twice, the first counts, as the decoder read it.
	d = decode(t, "{\"op\":\"inspect\",\"id\":\"q\",\"k\xff\":1}")
	if d.Op == nil || *d.Op != "inspect" || string(d.ID) != `"q"` {
		t.Fatalf("want op and id recovered past a key that is not UTF-8, got op=%v id=%s", d.Op, d.ID)
	}
	d = decode(t, `{"op":"inspect","id":1,"op":"nope","id":2}`)
	if d.Err == nil || d.Op == nil || *d.Op != "inspect" || string(d.ID) != "1" || !strings.Contains(d.Err.Message, "more than once") {
		t.Fatalf("want the first op and id, and the repeat named, got op=%v id=%s err=%v", d.Op, d.ID, d.Err)
	}
	d = decode(t, `{"id":"x","op":"place"`)
	if d.Op != nil || d.ID != nil {
		t.Fatalf("an unreadable line has no op or id, got op=%v id=%s", d.Op, d.ID)
	}
}

// TestLoneSurrogatesRefused: a string holding a surrogate escape without
// its pair is refused in every field that takes a string, on every op that
// takes the field, naming the field, with the line's op and id echoed: it
// stands for no character, and read as U+FFFD two ids differing only there
// were one request. A pair, or a lone surrogate's neighbour written
// plainly, still reads.
func TestLoneSurrogatesRefused(t *testing.T) {
	event := func(session string) string {
		return `"events":[{"worker_id":1,"session_id":` + session + `,"event":{"event_id":1,"data":"cleared"}}]`
	}
	type field struct {
		op, path string
		line     func(v string) string // the line's fields after op and id, the string field holding v
	}
	var fields []field
	for _, op := range []protocol.Op{protocol.OpPlace, protocol.OpDispatchCommitted, protocol.OpDispatchAborted,
		protocol.OpPrefillCompleted, protocol.OpRequestTerminal, protocol.OpCancelPending} {
		fields = append(fields, field{string(op), "request_id", func(v string) string { return `"request_id":` + v + `,"input_tokens":1` }})
	}
	fields = append(fields,
		field{"place", "session_id", func(v string) string { return `"request_id":"r","input_tokens":1,"session_id":` + v }},
		field{"place", "parent_session_id", func(v string) string { return `"request_id":"r","input_tokens":1,"parent_session_id":` + v }},
		field{"place", "policy_class", func(v string) string { return `"request_id":"r","input_tokens":1,"policy_class":` + v }},
		field{"place", "role", func(v string) string { return `"request_id":"r","input_tokens":1,"role":` + v }},
		field{"worker_ready", "role", func(v string) string { return `"worker_id":1,"role":` + v }},
		field{"observe", "events[0].session_id", event},
		field{"observe", "events[0].storage_tier", func(v string) string {
			return `"events":[{"worker_id":1,"storage_tier":` + v + `,"event":{"event_id":1,"data":"cleared"}}]`
		}},
		field{"observe", "events[0].medium", func(v string) string {
			return `"events":[{"worker_id":1,"medium":` + v + `,"event":{"event_id":1,"data":"cleared"}}]`
		}},
		field{"observe", "events[0].residency_domain", func(v string) string {
			return `"events":[{"worker_id":1,"residency_domain":` + v + `,"event":{"event_id":1,"data":"cleared"}}]`
		}},
		field{"observe", "events[0].event.tier", func(v string) string {
			return `"events":[{"worker_id":1,"event":{"event_id":1,"tier":` + v + `,"data":"cleared"}}]`
		}},
		field{"observe", "events[0].event.data", func(v string) string { return `"events":[{"worker_id":1,"event":{"event_id":1,"data":` + v + `}}]` }},
		field{"config", "policy", func(v string) string { return `"policy":` + v }},
		field{"config", "affinity.key", func(v string) string { return `"affinity":{"key":` + v + `}` }},
		field{"config", "policy_classes[0].name", func(v string) string { return `"policy_classes":[{"name":` + v + `,"slo_ms":1,"quantum":1}]` }},
		field{"config", "worker_selection.instances[0].type", func(v string) string {
			return `"worker_selection":{"instances":[{"name":"i","type":` + v + `}]}`
		}},
	)
	for _, f := range fields {
		for _, v := range []string{`"\ud800"`, `"\udc00"`, `"a\ud800b"`, `"a\udbff\u0041"`, `"\udc00\ud800"`} {
			line := `{"op":"` + f.op + `","id":"q",` + f.line(v) + `}`
			d := decode(t, line)
			if d.Err == nil || d.Err.Code != protocol.CodeInvalidField || !strings.Contains(d.Err.Message, `field "`+f.path+`": expected a string of valid UTF-8, got a lone surrogate escape`) {
				t.Errorf("%s: got %v, want invalid_field naming %q and the lone surrogate", line, d.Err, f.path)
			}
			if d.Op == nil || *d.Op != f.op || string(d.ID) != `"q"` {
				t.Errorf("%s: op and id not echoed: op %v, id %s", line, d.Op, d.ID)
			}
		}
	}
	// The same keys, whose strings read well: what refuses above is the
	// surrogate alone.
	d := decode(t, `{"op":"place","id":"q","request_id":"\ud83d\ude00","input_tokens":1,"session_id":"\uD83D\uDE00x","parent_session_id":"\u0041"}`)
	if d.Err != nil || d.Cmd.RequestID != "😀" || *d.Cmd.SessionID != "😀x" || *d.Cmd.ParentSessionID != "A" {
		t.Errorf("surrogate pairs: %v, %+v", d.Err, d.Cmd)
	}
	d = decode(t, `{"op":"observe",`+event(`"\ud83d\ude00"`)+`}`)
	if d.Err != nil {
		t.Errorf("an event's session_id with a pair: %v", d.Err)
	}
	// A key: refused as one that is not UTF-8, saying why.
	d = decode(t, `{"op":"inspect","id":"q","k\ud800":1}`)
	if d.Err == nil || d.Err.Code != protocol.CodeInvalidField || !strings.Contains(d.Err.Message, "a key is not valid UTF-8: it holds a lone surrogate escape") || d.Op == nil || string(d.ID) != `"q"` {
		t.Errorf("a key with a lone surrogate: op %v, id %s, %v", d.Op, d.ID, d.Err)
	}
}

func TestRequestIDEscapesAreDecoded(t *testing.T) {
	d := decode(t, `{"op":"place","request_id":"caf\u00e9 \ud83d\ude00 \"q\"","input_tokens":1}`)
	if d.Err != nil || d.Cmd.RequestID != "café 😀 \"q\"" {
		t.Fatalf("got %q, %v", d.Cmd.RequestID, d.Err)
	}
}

func TestNumFormatting(t *testing.T) {
	for v, want := range map[float64]string{0: "0", math.Copysign(0, -1): "0", 1500: "1500", 0.1: "0.1", 1e21: "1000000000000000000000", 4.125: "4.125"} {
		if got := string(protocol.AppendNum(nil, v)); got != want {
			t.Errorf("protocol.AppendNum(%v) = %s, want %s", v, got, want)
		}
	}
}

// TestDecodeKeysAllocateNothing: decoding allocates for values that are
// kept, never for the protocol's keys. Each added event below carries every
// event key (13 of them) and 5 values that must be allocated (its blocks,
// parent hash, removed hashes, and each event's data boxed in its
// EventData; the "device" tier is interned); a key that is not interned
// would add one allocation per event.
func TestDecodeKeysAllocateNothing(t *testing.T) {
	event := `{"worker_id":1,"storage_tier":"device","event":{"event_id":5,"dp_rank":2,"data":{"stored":{"parent_hash":7,"blocks":[{"block_hash":11,"tokens_hash":1}]}}}},` +
		`{"worker_id":1,"storage_tier":"device","event":{"event_id":6,"data":{"removed":{"block_hashes":[11]}}}}`
	allocs := func(events int) float64 {
		line := []byte(`{"op":"observe","events":[` + strings.Repeat(event+",", events-1) + event + `]}`)
		var d Decoded
		return testing.AllocsPerRun(20, func() { Decode(line, &d) })
	}
	const events = 64
	perEvent := (allocs(events+1) - allocs(1)) / events
	if perEvent > 5.2 {
		t.Fatalf("%.1f allocations per added event pair; want at most 5 (its values), keys must not allocate", perEvent)
	}
}

// TestDecodeIgnoresUnknownEventKeys: keys inside an event that no event
// struct has (an engine's moe_metadata on a block, a newer field on the
// router event) are skipped and listed by path, arrays as [], once per
// occurrence; residency_domain null or not a string marks the event
// invalid instead of failing the line. Catches an unknown key refused, a
// key kept without its path, or null taken as the legacy domain.
func TestDecodeIgnoresUnknownEventKeys(t *testing.T) {
	d := decode(t, `{"op":"observe","events":[{"worker_id":1,"future":{"a":[1]},"residency_domain":null,"event":{"event_id":1,"x":1,"data":{"stored":{"parent_hash":null,"y":2,`+
		`"blocks":[{"block_hash":1,"tokens_hash":2,"moe_metadata":{"experts":[3]}},{"block_hash":3,"tokens_hash":4,"moe_metadata":null,"mm_extra_info":{"z":1}}]}}}},`+
		`{"worker_id":1,"residency_domain":7,"event":{"event_id":2,"data":{"removed":{"block_hashes":[1],"w":0}}}},`+
		`{"worker_id":1,"residency_domain":"worker","event":{"event_id":3,"data":"cleared"}}]}`)
	if d.Err != nil {
		t.Fatal(d.Err)
	}
	evs := d.Cmd.Events
	want := [][]string{
		{"future", "event.x", "event.data.stored.y", "event.data.stored.blocks[].moe_metadata", "event.data.stored.blocks[].moe_metadata", "event.data.stored.blocks[].mm_extra_info.z"},
		{"event.data.removed.w"},
		nil,
	}
	for i, ev := range evs {
		if diff := cmp.Diff(want[i], ev.IgnoredKeys, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("event %d: ignored keys (-want +got):\n%s", i, diff)
		}
	}
	if !evs[0].ResidencyInvalid || !evs[1].ResidencyInvalid || evs[2].ResidencyInvalid || evs[2].ResidencyDomain != "worker" {
		t.Errorf("residency: null %v, 7 %v, \"worker\" %v %q", evs[0].ResidencyInvalid, evs[1].ResidencyInvalid, evs[2].ResidencyInvalid, evs[2].ResidencyDomain)
	}
	if b := evs[0].Data.(protocol.Stored).Blocks; len(b) != 2 || b[1].TokensHash != 4 {
		t.Errorf("the blocks around the skipped keys: %+v", b)
	}
}

// TestDecodeMedium: an engine's medium maps to its tier as Dynamo's
// from_kv_medium does (exact, case-sensitive), null is the device, an
// unknown one marks the event, and one that disagrees with storage_tier
// fails the line, whichever key comes first. Catches a lowercased match,
// null taken as unknown, and a disagreement let through.
func TestDecodeMedium(t *testing.T) {
	for _, c := range []struct {
		medium, tier string
		unknown      bool
	}{
		{`"GPU"`, "device", false}, {`"DEVICE"`, "device", false}, {`null`, "device", false},
		{`"CPU"`, "host_pinned", false}, {`"CPU_PINNED"`, "host_pinned", false}, {`"CPU_TIER1"`, "host_pinned", false},
		{`"CPU_TIER2"`, "disk", false}, {`"DISK"`, "disk", false}, {`"NVME"`, "disk", false}, {`"STORAGE"`, "disk", false},
		{`"EXTERNAL"`, "external", false}, {`"NETWORK"`, "external", false}, {`"REMOTE"`, "external", false}, {`"SHARED"`, "external", false},
		{`"cpu"`, "device", true}, {`"Gpu"`, "device", true}, {`""`, "device", true},
	} {
		d := decode(t, `{"op":"observe","events":[{"worker_id":1,"medium":`+c.medium+`,"event":{"event_id":1,"data":"cleared"}}]}`)
		if d.Err != nil {
			t.Fatalf("medium %s: %v", c.medium, d.Err)
		}
		if ev := d.Cmd.Events[0]; ev.StorageTier != c.tier || ev.UnknownMedium != c.unknown {
			t.Errorf("medium %s: tier %q unknown %v, want %q %v", c.medium, ev.StorageTier, ev.UnknownMedium, c.tier, c.unknown)
		}
	}
	for _, line := range []string{
		`{"op":"observe","events":[{"worker_id":1,"medium":"DISK","storage_tier":"host_pinned","event":{"event_id":1,"data":"cleared"}}]}`,
		`{"op":"observe","events":[{"worker_id":1,"storage_tier":"device","medium":"CPU","event":{"event_id":1,"data":"cleared"}}]}`,
	} {
		if d := decode(t, line); d.Err == nil || !strings.Contains(d.Err.Message, `"events[0].medium"`) {
			t.Errorf("%s: got %v, want an error naming events[0].medium", line, d.Err)
		}
	}
	if d := decode(t, `{"op":"observe","events":[{"worker_id":1,"medium":"DISK","storage_tier":"disk","event":{"event_id":1,"data":"cleared"}}]}`); d.Err != nil {
		t.Errorf("medium and storage_tier alike: %v", d.Err)
	}
}
