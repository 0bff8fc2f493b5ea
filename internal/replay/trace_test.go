package replay

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/costtest"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

var sharedTrace = filepath.Join("..", "..", "..", "shared", "traces", "synthetic_trace.jsonl")

// line is a valid trace line with extra fields appended.
func line(extra string) string {
	return `{"timestamp": 1, "input_length": 1024, "output_length": 3, "hash_ids": [1, 2]` + extra + "}"
}

func readOne(t *testing.T, trace string) Request {
	t.Helper()
	reqs, err := ReadMooncake(strings.NewReader(trace), 512)
	if err != nil {
		t.Fatalf("%.80s: %v", trace, err)
	}
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	return reqs[0]
}

// wantErr checks that trace is refused with an error holding each of want.
func wantErr(t *testing.T, trace string, want ...string) {
	t.Helper()
	_, err := ReadMooncake(strings.NewReader(trace), 512)
	if err == nil {
		t.Errorf("%.100s: read without error, want %q", trace, want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%.100s: got %q, want it to mention %q", trace, err, w)
		}
	}
}

func TestMooncakeReadsEveryField(t *testing.T) {
	got := readOne(t, `{"timestamp": 12.5, "input_length": 1025, "output_length": 7, "hash_ids": [18446744073709551615, 9007199254740993, 0],`+
		`"session_id": "s\u00e9", "parent_session_id": 9007199254740993, "priority": -2.5, "strict_priority": -9223372036854775808, "policy_class": "premium", "role": "prefill", "lora_name": "sql-\u00e9"}`)
	prio, strict := -2.5, int64(math.MinInt64)
	want := Request{ID: "r0", Arrival: 12.5, InputTokens: 1025, OutputTokens: 7,
		HashIDs: []protocol.LocalBlockHash{math.MaxUint64, 1<<53 + 1, 0}, Session: "sé", ParentSession: "9007199254740993",
		Priority: &prio, StrictPriority: &strict, PolicyClass: "premium", Role: protocol.RolePrefill, LoRAName: "sql-é"}
	if diff := cmp.Diff(want, got, allowPacked); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	// Absent and null are the same: none.
	for _, extra := range []string{"", `, "session_id": null, "parent_session_id": null, "priority": null, "strict_priority": null, "policy_class": null, "role": null, "delay": null, "delay_ms": null, "lora_name": null`, `, "lora_name": ""`} {
		got := readOne(t, line(extra))
		if got.Session != "" || got.ParentSession != "" || got.Priority != nil || got.StrictPriority != nil || got.PolicyClass != "" || got.Role != "" || got.DelayMS != nil || got.LoRAName != "" {
			t.Errorf("%s: want no optional field, got %+v", extra, got)
		}
	}
	for _, role := range []protocol.Role{protocol.RoleAggregated, protocol.RolePrefill, protocol.RoleDecode} {
		if got := readOne(t, line(`, "role": "`+string(role)+`"`)); got.Role != role {
			t.Errorf("role %s read as %q", role, got.Role)
		}
	}
	if long := strings.Repeat("x", protocol.MaxLoRANameBytes); readOne(t, line(`, "lora_name": "`+long+`"`)).LoRAName != long {
		t.Error("a lora_name of the longest length place takes is not read whole")
	}
}

// TestMooncakeSessionIDs: a session id is a string, or an integer kept as
// written, whatever its size; a later turn's delay is delay or delay_ms.
func TestMooncakeSessionIDs(t *testing.T) {
	for v, want := range map[string]string{`42`: "42", `-7`: "-7", `123456789012345678901234567890`: "123456789012345678901234567890",
		`"abc"`: "abc", `""`: ""} {
		if got := readOne(t, line(`, "session_id": `+v)); got.Session != want {
			t.Errorf("session_id %s read as %q, want %q", v, got.Session, want)
		}
		if got := readOne(t, line(`, "parent_session_id": `+v)); got.ParentSession != want {
			t.Errorf("parent_session_id %s read as %q, want %q", v, got.ParentSession, want)
		}
	}
	for _, key := range []string{"delay", "delay_ms"} {
		reqs, err := ReadMooncake(strings.NewReader(line(`, "session_id": 3`)+"\n"+
			`{"input_length": 1, "output_length": 1, "session_id": 3, "`+key+`": 250.5}`), 512)
		if err != nil || reqs[1].DelayMS == nil || *reqs[1].DelayMS != 250.5 {
			t.Errorf("%s: %v", key, err)
		}
	}
	// Fewer hashes than blocks: a trace made with a larger block size.
	wantErr(t, `{"timestamp": 0, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2]}`, "line 1", "2 hash_ids for input_length 1536: it takes 3 blocks")
	// A first turn with a delay would never arrive: refused.
	wantErr(t, `{"input_length": 1, "output_length": 1, "session_id": 3, "delay_ms": 5}`, "line 1", "first turn of session \"3\"")
}

// TestMooncakeRefusesBadLines: each line is refused, naming the line and
// the field, in the words of the strict reader.
func TestMooncakeRefusesBadLines(t *testing.T) {
	for trace, want := range map[string][]string{
		// Integers are exact.
		`{"timestamp": 0, "input_length": 18446744073709551617, "output_length": 1}`: {
			`trace line 1: field "input_length": expected an unsigned 64-bit integer, got 18446744073709551617 (above 18446744073709551615)`},
		line(`, "hash_ids": [1, 18446744073709551616]`): {`field "hash_ids"`, "appears more than once"},
		`{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 18446744073709551616]}`: {
			`trace line 1: field "hash_ids[1]": expected an unsigned 64-bit integer, got 18446744073709551616`},
		`{"timestamp": 0, "input_length": 1024, "output_length": -1}`:  {`field "output_length": expected an unsigned 64-bit integer, got -1`},
		`{"timestamp": 0, "input_length": 1024.0, "output_length": 1}`: {`field "input_length": expected an unsigned 64-bit integer, got 1024.0`},
		// A key is given once, exactly as written.
		`{"timestamp": 0, "input_length": 5, "output_length": 1, "input_length": 6}`: {`trace line 1: field "input_length": appears more than once`},
		line(`, "INPUT_LENGTH": 5`):    {`trace line 1: field "INPUT_LENGTH": is not a trace field (did you mean "input_length"?)`},
		line(`, "inputLength": null`):  {`field "inputLength"`, `did you mean "input_length"`},
		line(`, "hash-ids": []`):       {`field "hash-ids"`, `did you mean "hash_ids"`},
		line(`, "Session_Id": "a"`):    {`did you mean "session_id"`},
		line(`, "parentSessionID": 1`): {`did you mean "parent_session_id"`},
		line(`, "delayMs": 1`):         {`did you mean "delay_ms"`},
		line(`, "Strict-Priority": 1`): {`did you mean "strict_priority"`},
		line(`, "ROLE": "decode"`):     {`did you mean "role"`},
		line(`, "policyClass": "a"`):   {`trace line 1: field "policyClass": is not a trace field (did you mean "policy_class"?)`},
		// A class is a string (which names the config checks, not the reader).
		line(`, "policy_class": 1`):                  {`trace line 1: field "policy_class": expected a string, got number 1`},
		line(`, "policy_class": ["a"]`):              {`field "policy_class": expected a string`},
		line(`, "policy_class": "\ud800"`):           {`field "policy_class"`},
		line(`, "loraName": "a"`):                    {`trace line 1: field "loraName": is not a trace field (did you mean "lora_name"?)`},
		line(`, "lora_name": 1`):                     {`trace line 1: field "lora_name": expected a string, got number 1`},
		line(`, "lora_name": "a", "lora_name": "b"`): {`field "lora_name": appears more than once`},
		// Values place would refuse.
		line(`, "lora_name": "` + strings.Repeat("x", protocol.MaxLoRANameBytes+1) + `"`): {
			`trace line 1: field "lora_name": expected a name of at most 1024 bytes, got 1025 bytes`},
		line(`, "role": "bogus"`):                                             {`field "role": expected one of aggregated, prefill, decode, got "bogus"`},
		line(`, "role": ""`):                                                  {`field "role": expected one of`},
		line(`, "role": 1`):                                                   {`field "role": expected a string, got number 1`},
		line(`, "priority": 9007199254740994`):                                {`field "priority": expected a number from -9007199254740992 to 9007199254740992, got 9.007199254740994e+15`},
		line(`, "priority": -1e300`):                                          {`field "priority": expected a number from`},
		line(`, "priority": 1e999`):                                           {`field "priority": expected a finite number, got 1e999 (out of range)`},
		line(`, "priority": "1"`):                                             {`field "priority": expected a number, got a string`},
		line(`, "strict_priority": 1.5`):                                      {`field "strict_priority": expected a 64-bit integer, got 1.5`},
		line(`, "strict_priority": 9223372036854775808`):                      {`field "strict_priority": expected a 64-bit integer, got 9223372036854775808`},
		line(`, "strict_priority": 1e3`):                                      {`field "strict_priority"`},
		`{"timestamp": 0, "input_length": 1099511627777, "output_length": 1}`: {`field "input_length": expected at most 1099511627776 tokens, got 1099511627777`},
		`{"timestamp": 0, "input_length": 1, "output_length": 1099511627777}`: {`field "output_length": expected at most 1099511627776 tokens`},
		`{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2, 3]}`: {`trace line 1: 3 hash_ids for input_length 1024: it takes 2 blocks`},
		// Ids and times.
		line(`, "session_id": 1.5`):                                                             {`field "session_id": expected a string or an integer, got 1.5`},
		line(`, "session_id": true`):                                                            {`field "session_id": expected a string or an integer, got a boolean`},
		line(`, "parent_session_id": {}`):                                                       {`field "parent_session_id": expected a string or an integer, got an object`},
		line(", \"session_id\": \"a\xffb\""):                                                    {`field "session_id": expected a string of valid UTF-8`},
		line("") + "\n" + line(`, "session_id": "a\ud800b"`):                                    {`trace line 2: field "session_id": expected a string of valid UTF-8, got a lone surrogate escape`},
		line("") + "\n\n" + line(`, "parent_session_id": "\udc00"`):                             {`trace line 3: field "parent_session_id": expected a string of valid UTF-8, got a lone surrogate escape`},
		line(`, "role": "decode\udbff"`):                                                        {`trace line 1: field "role": expected a string of valid UTF-8, got a lone surrogate escape`},
		line(`, "parent_session_id": 01`):                                                       {`field "parent_session_id"`, "not a JSON number"},
		`{"timestamp": -1, "input_length": 1, "output_length": 1}`:                              {`field "timestamp": expected a time from 0 to 4503599627370496 ms, got -1`},
		`{"timestamp": 4503599627370497, "input_length": 1, "output_length": 1}`:                {`field "timestamp": expected a time from 0 to`},
		`{"timestamp": "0", "input_length": 1, "output_length": 1}`:                             {`field "timestamp": expected a number, got a string`},
		`{"input_length": 1, "output_length": 1, "session_id": "s", "delay_ms": -1}`:            {`field "delay_ms": expected a delay from 0 to 4503599627370496 ms, got -1`},
		`{"input_length": 1, "output_length": 1, "session_id": "s", "delay": 1e300}`:            {`field "delay": expected a delay from 0`},
		`{"input_length": 1, "output_length": 1, "session_id": "s", "delay": 1, "delay_ms": 1}`: {`field "delay_ms": give delay or delay_ms, not both`},
		`{"input_length": 1, "output_length": 1, "session_id": "", "delay": 1}`:                 {"delay_ms needs a session_id"},
		`{"input_length": 1, "output_length": 1, "parent_session_id": "p", "delay": 1}`:         {"delay_ms needs a session_id"},
		`{"input_length": 1, "output_length": 1}`:                                               {"timestamp is missing"},
		`{"timestamp": null, "input_length": 1, "output_length": 1}`:                            {"timestamp is missing"},
		`{"timestamp": 0, "input_length": null, "output_length": 1}`:                            {"input_length is missing"},
		`{"timestamp": 0, "input_length": 1}`:                                                   {"output_length is missing"},
		// One object a line.
		line(``) + ` {}`:                      {"trace line 1: unexpected data after the object"},
		`[1, 2]`:                              {"trace line 1: expected an object, got an array"},
		line(`, "x": [1, }`):                  {`trace line 1: field "x": the value is not JSON: it breaks at byte 88`},
		line(`, "role": "bogus", "x": [1, }`): {"trace line 1: the line is not JSON: it breaks at byte 105"},
	} {
		wantErr(t, trace, want...)
	}
}

// TestMooncakeRefusesWhatPlaceRefuses: the trace takes a value of a place
// field exactly when the router's place takes it, so a trace that reads
// never makes the replay host send a command the router refuses.
func TestMooncakeRefusesWhatPlaceRefuses(t *testing.T) {
	for _, c := range []struct{ trace, place, value string }{
		{"priority", "priority", "9007199254740992"},
		{"priority", "priority", "-9007199254740992"},
		{"priority", "priority", "9007199254740994"},
		{"priority", "priority", "1e999"},
		{"priority", "priority", "0.5"},
		{"strict_priority", "strict_priority", "-9223372036854775808"},
		{"strict_priority", "strict_priority", "9223372036854775808"},
		{"strict_priority", "strict_priority", "2.0"},
		{"strict_priority", "strict_priority", "1e2"},
		{"role", "role", `"decode"`},
		{"role", "role", `"Decode"`},
		{"role", "role", `""`},
		{"input_length", "input_tokens", "1099511627776"},
		{"input_length", "input_tokens", "1099511627777"},
		{"output_length", "output_tokens", "1099511627776"},
		{"output_length", "output_tokens", "1099511627777"},
		{"session_id", "session_id", `"\ud800"`},
		{"parent_session_id", "parent_session_id", `"p"`},
	} {
		object := func(fields map[string]string) string {
			var b strings.Builder
			for k, v := range fields {
				b.WriteString(`,"` + k + `":` + v)
			}
			return "{" + b.String()[1:] + "}"
		}
		trace := object(map[string]string{"timestamp": "0", "input_length": "1", "output_length": "1", c.trace: c.value})
		_, traceErr := ReadMooncake(strings.NewReader(trace), 512)
		var d wire.Decoded
		wire.Decode([]byte(object(map[string]string{"op": `"place"`, "request_id": `"r"`, "input_tokens": "1", c.place: c.value})), &d)
		if (traceErr == nil) != (d.Err == nil) {
			t.Errorf("%s %s: the trace says %v, place says %v", c.trace, c.value, traceErr, d.Err)
		}
	}
}

// TestMooncakeParentWithoutSession: place takes a parent_session_id without
// a session_id (the request binds by its group), so the trace does too.
func TestMooncakeParentWithoutSession(t *testing.T) {
	if got := readOne(t, line(`, "parent_session_id": "p"`)); got.ParentSession != "p" || got.Session != "" {
		t.Fatalf("got %+v", got)
	}
}

// TestMooncakeCountsEveryLine: blank and comment lines are skipped but
// counted, so an error names the line an editor shows; request ids count
// requests.
func TestMooncakeCountsEveryLine(t *testing.T) {
	good := line("")
	trace := "\n# a comment\n   \n" + good + "\r\n\t# indented comment\n" + good + "\n\n" + `{"timestamp": 0}` + "\n" + good
	wantErr(t, trace, "trace line 8: input_length is missing")
	reqs, err := ReadMooncake(strings.NewReader("\n# c\n"+good+"\n\n"+good+"\n"), 512)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0].ID != "r0" || reqs[1].ID != "r1" {
		t.Fatalf("got %+v", reqs)
	}
	wantErr(t, "# only\n\n", "the trace has no requests")
}

// TestMooncakeSkipsUnknownKeys: other keys, which traces in the wild carry,
// are passed over whatever they hold, however nested.
func TestMooncakeSkipsUnknownKeys(t *testing.T) {
	got := readOne(t, line(`, "extra": {"a": [1, {"b": [], "b": null}], "c": "x}]"}, "tags": [1, "a", null, true, -2.5e3], `+
		`"model": "llama", "note": null, "input_tokens": 18446744073709551617, "deep": `+strings.Repeat("[", 5000)+strings.Repeat("]", 5000)))
	if got.InputTokens != 1024 || len(got.HashIDs) != 2 {
		t.Fatalf("got %+v", got)
	}
	// Any number of other keys, each once (past a handful the reader keeps
	// them in a set, not a list looked through for each).
	var many strings.Builder
	for i := range 200 {
		fmt.Fprintf(&many, `, "k%d": %d`, i, i)
	}
	if got := readOne(t, line(many.String())); got.InputTokens != 1024 {
		t.Fatalf("got %+v", got)
	}
	wantErr(t, line(many.String()+`, "k150": 0`), `field "k150": appears more than once`)
	wantErr(t, line(many.String()+`, "input_length": 5`), `field "input_length": appears more than once`)
	// Skipped, but still JSON.
	wantErr(t, line(`, "extra": {"a": [1,]}`), "trace line 1:", "not JSON")
	wantErr(t, line(", \"extra\": [\"\xff\"]"), `field "extra": expected a string of valid UTF-8`)
	// A skipped value is not decoded, so a lone surrogate escape in it is
	// no character anyone reads; a key is decoded, and refused with one.
	if got := readOne(t, line(`, "extra": ["\ud800", {"k": "\udc00"}]`)); got.InputTokens != 1024 {
		t.Fatalf("got %+v", got)
	}
	wantErr(t, line(`, "x\ud800": 1`), "trace line 1:", "a key is not valid UTF-8: it holds a lone surrogate escape")
}

// TestMooncakeReadsTheSharedTrace: the real trace reads whole, at 512
// tokens a block.
func TestMooncakeReadsTheSharedTrace(t *testing.T) {
	data, err := os.ReadFile(sharedTrace)
	if os.IsNotExist(err) {
		t.Skipf("%s is absent", sharedTrace)
	}
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := ReadMooncake(bytes.NewReader(data), 512)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 3993 {
		t.Fatalf("%d requests, want 3993", len(reqs))
	}
	r := reqs[0]
	if r.InputTokens != 40160 || r.OutputTokens != 6 || len(r.HashIDs) != 79 || r.HashIDs[78] != 78 || r.Arrival != 0 {
		t.Fatalf("first request %+v", r)
	}
}

// BenchmarkReadMooncake reads the shared trace (3,993 lines of long
// hash_ids).
func BenchmarkReadMooncake(b *testing.B) {
	data, err := os.ReadFile(sharedTrace)
	if err != nil {
		b.Skipf("%s is absent", sharedTrace)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := ReadMooncake(bytes.NewReader(data), 512); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzReadMooncake: no trace, however broken, panics the reader; a trace
// it accepts holds requests the router takes (the replay of it runs).
func FuzzReadMooncake(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2], "session_id": 7}` + "\n" +
		`{"input_length": 900, "output_length": 1, "hash_ids": [1, 2], "session_id": 7, "delay_ms": 5, "priority": 1, "role": "aggregated"}`))
	f.Add([]byte(`{"timestamp": 1e300, "INPUT_LENGTH": 1, "hash_ids": [18446744073709551616]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 200
		reqs, sum, err := ReadMooncakeDigest(bytes.NewReader(data), 512, limit)
		if err != nil {
			return
		}
		if want := sha256.Sum256(data); sum != hex.EncodeToString(want[:]) {
			t.Fatalf("digest %s, want the input's %x", sum, want)
		}
		for i, l := range bytes.Split(data, []byte("\n")) {
			if len(l) > limit {
				t.Fatalf("line %d of %d bytes taken, over the limit of %d", i+1, len(l), limit)
			}
		}
		if len(reqs) > 50 {
			return
		}
		cc := cluster.Default(2)
		res, err := Run(reqs, Options{Cluster: cc, Router: routerConfig(protocol.PolicyKV)})
		if err != nil {
			t.Fatalf("an accepted trace fails the replay: %v", err)
		}
		if m := res.Metrics; m.Completed+m.Rejected != len(reqs) {
			t.Fatalf("%d completed and %d rejected of %d requests", m.Completed, m.Rejected, len(reqs))
		}
	})
}

// TestMooncakeLineLimit: a line of the limit's length (newline excluded,
// a \r counted) is read, one byte longer is refused by its number; and the
// refusal holds one line's worth: of an endless line the reader reads and
// keeps about the limit, not the line (a reader that read the whole input
// first, or grew its buffer past the limit, would read and allocate its
// 64 MiB).
func TestMooncakeLineLimit(t *testing.T) {
	good := line("")
	limit := len(good) + 10
	padded := good + strings.Repeat(" ", 10)
	reqs, _, err := ReadMooncakeDigest(strings.NewReader(good+"\n"+padded+"\n"+padded[:limit-1]+"\r\n"+padded), 512, limit)
	if err != nil || len(reqs) != 4 {
		t.Fatalf("lines of at most %d bytes: %d requests, %v", limit, len(reqs), err)
	}
	for _, trace := range []string{good + "\n" + padded + " \n" + good, good + "\n" + padded + "\r\n", good + "\n" + padded + " "} {
		_, _, err := ReadMooncakeDigest(strings.NewReader(trace), 512, limit)
		if want := fmt.Sprintf("trace line 2: longer than %d bytes", limit); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", trace, err, want)
		}
	}
	const mib = 1 << 20
	endless := &counting{r: io.MultiReader(strings.NewReader(good+"\n"), io.LimitReader(repeatByte('x'), 64*mib))}
	alloc := costtest.Allocated(func() { _, _, err = ReadMooncakeDigest(endless, 512, mib) })
	if err == nil || !strings.Contains(err.Error(), "trace line 2: longer than 1048576 bytes") {
		t.Errorf("a 64 MiB line: %v", err)
	}
	if endless.n > 2*mib || alloc > 8*mib {
		t.Errorf("a 64 MiB line over a 1 MiB limit: read %d bytes, allocated %d", endless.n, alloc)
	}
	if _, _, err := ReadMooncakeDigest(strings.NewReader(good), 512, 0); err == nil || !strings.Contains(err.Error(), "line limit") {
		t.Errorf("a limit of 0: %v", err)
	}
}

// TestMooncakeDigest: the digest is the SHA-256 of every byte read, blank
// lines, comments, \r and a last line without its newline included, however
// the reader hands them out (a digest of the lines read, or of what the
// scanner kept, would miss some).
func TestMooncakeDigest(t *testing.T) {
	trace := "# a comment\n\n" + line("") + "\r\n   \n" + line(`, "session_id": "s"`)
	want := sha256.Sum256([]byte(trace))
	for name, r := range map[string]io.Reader{
		"whole":        strings.NewReader(trace),
		"byte by byte": iotest.OneByteReader(strings.NewReader(trace)),
	} {
		reqs, sum, err := ReadMooncakeDigest(r, 512, 1<<10)
		if err != nil || len(reqs) != 2 || sum != hex.EncodeToString(want[:]) {
			t.Errorf("%s: %d requests, digest %s, %v; want 2 and %x", name, len(reqs), sum, err, want)
		}
	}
	_, other, _ := ReadMooncakeDigest(strings.NewReader(strings.Replace(trace, "a comment", "a Comment", 1)), 512, 1<<10)
	if _, sum, _ := ReadMooncakeDigest(strings.NewReader(trace), 512, 1<<10); other == sum {
		t.Errorf("a comment edited, the same digest %s", sum)
	}
}

// TestDeepTraceLine: a trace line nested 100,000 deep is answered, read
// when the depth is under a key the reader skips and refused at its first
// wrong value under a field, allocating a small multiple of the line on a
// stack of at most 1 MB (see TestDeepProfile).
func TestDeepTraceLine(t *testing.T) {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	for key, want := range map[string]string{
		"extra":      "",
		"hash_ids":   `trace line 1: field "hash_ids[0]": expected an unsigned 64-bit integer, got an array`,
		"session_id": `trace line 1: field "session_id": expected a string or an integer, got an array`,
		"priority":   `trace line 1: field "priority": expected a number, got an array`,
	} {
		data := []byte(`{"timestamp": 0, "input_length": 1, "output_length": 1, "` + key + `": ` + deep + "}\n")
		var err error
		alloc := costtest.Allocated(func() {
			costtest.Shallow(func() { _, _, err = ReadMooncakeDigest(bytes.NewReader(data), 512, wire.DefaultMaxLineBytes) })
		})
		if (want == "" && err != nil) || (want != "" && (err == nil || err.Error() != want)) {
			t.Errorf("%s 100,000 deep: got %v, want %q", key, err, want)
		}
		if alloc > 8*uint64(len(data)) {
			t.Errorf("%s 100,000 deep: %d bytes allocated for %d bytes", key, alloc, len(data))
		}
	}
}

// counting counts the bytes read through it.
type counting struct {
	r io.Reader
	n uint64
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += uint64(n)
	return n, err
}

// repeatByte is an endless stream of one byte, which costs no memory.
type repeatByte byte

func (b repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// TestLoadPacksIDs: a trace loaded for a replay holds each request's ids
// packed when that is smaller, plain when not, and gives back the ids
// read, differences past the 64-bit range wrapped and back; a line
// without ids has none, whatever the line before had. It catches the ids
// never packed, or packed when larger, a difference's sign or wrap lost,
// and the reading buffer kept as a request's ids or leaking into the
// next line.
func TestLoadPacksIDs(t *testing.T) {
	const trace = `{"timestamp": 0, "input_length": 2048, "output_length": 1, "hash_ids": [7, 8, 9, 10]}
{"timestamp": 1, "input_length": 2048, "output_length": 1, "hash_ids": [18446744073709551615, 0, 9223372036854775808, 5]}
{"timestamp": 2, "input_length": 2048, "output_length": 1}
{"timestamp": 3, "input_length": 2048, "output_length": 1, "hash_ids": [4611686018427387904, 1, 4611686018427387907, 2]}
{"timestamp": 4, "input_length": 2048, "output_length": 1, "hash_ids": [3, 3, 3, 3]}
`
	plain, err := ReadMooncake(strings.NewReader(trace), 512)
	if err != nil {
		t.Fatal(err)
	}
	loaded, _ := loadTrace(t, trace)
	for i, wantPacked := range []int{4, 22, 0, 0, 4} {
		r := &loaded[i]
		if got := r.appendIDs(nil); !slices.Equal(got, plain[i].HashIDs) {
			t.Errorf("request %d: ids %v, want %v", i, got, plain[i].HashIDs)
		}
		if len(r.packed) != wantPacked || (r.HashIDs == nil) != (wantPacked > 0 || plain[i].HashIDs == nil) {
			t.Errorf("request %d: %d bytes packed and %d plain ids, want %d packed", i, len(r.packed), len(r.HashIDs), wantPacked)
		}
	}
}

// TestTraceDigestIsItsSHA256: the digest a trace is read with is SHA-256
// of every byte, comments and blank lines too, however its reader splits
// it (the hashing runs on a goroutine of its own, under -race in CI), and
// a read that fails stops the hasher. It catches a chunk hashed after its
// buffer was reused, a chunk lost at the end, or bytes hashed twice.
func TestTraceDigestIsItsSHA256(t *testing.T) {
	var b strings.Builder
	b.WriteString("# a comment\n\n")
	for i := range 3000 {
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": 20, "output_length": 2, "hash_ids": [%d, %d]}`+"\n", i, i, i+1)
	}
	text := b.String()
	want := sha256.Sum256([]byte(text))
	for name, r := range map[string]io.Reader{
		"whole":       strings.NewReader(text),
		"byte a read": iotest.OneByteReader(strings.NewReader(text)),
		"half reads":  iotest.HalfReader(strings.NewReader(text)),
	} {
		_, sum, err := ReadMooncakeDigest(r, 16, 1<<20)
		if err != nil || sum != hex.EncodeToString(want[:]) {
			t.Errorf("%s: digest %s (%v), want %x", name, sum, err, want)
		}
	}
	cut := strings.LastIndexByte(text[:5000], '\n') + 1 // the read fails between lines
	failing := io.MultiReader(strings.NewReader(text[:cut]), iotest.ErrReader(errors.New("disk gone")))
	if _, _, err := ReadMooncakeDigest(failing, 16, 1<<20); err == nil || !strings.Contains(err.Error(), "disk gone") {
		t.Errorf("a failing read: %v", err)
	}
}
