package wire

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/protocol"
)

// readAll reads line with a reader that takes every type by key name:
// u (U64), i (Int64), f (Float), s (Str), n (Number), us (U64s); any other
// key is skipped. It returns what it read, as text, by key.
func readAll(line string) (map[string]any, error) {
	got := map[string]any{}
	err := new(ObjectReader).Read([]byte(line), func(key string, v *Value) error {
		if v.Null() {
			got[key] = nil
			return nil
		}
		var x any
		var err error
		switch key {
		case "u":
			x, err = v.U64()
		case "i":
			x, err = v.Int64()
		case "f":
			x, err = v.Float()
		case "s":
			x, err = v.Str()
		case "n":
			x, err = v.Number()
		case "us":
			x, err = AppendU64s[uint64](v, nil)
		default:
			var raw []byte
			raw, err = v.Raw()
			x = "skipped " + string(raw)
		}
		got[key] = x
		return err
	})
	return got, err
}

func TestReadObjectReadsEachType(t *testing.T) {
	got, err := readAll(` { "u": 18446744073709551615, "i": -9223372036854775808, "f": -1.5e3, "s": "caf\u00e9 \ud83d\ude00 \"q\"",` +
		`"n": 123456789012345678901234567890, "us": [0, 18446744073709551615, 9007199254740993], "z": null, "x": {"a": [1, "b"]} } `)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"u": uint64(math.MaxUint64), "i": int64(math.MinInt64), "f": -1500.0, "s": "café 😀 \"q\"",
		"n": "123456789012345678901234567890", "us": []uint64{0, math.MaxUint64, 1<<53 + 1}, "z": nil,
		"x": `skipped {"a": [1, "b"]}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

// wantError checks that err is an *ObjectError about field whose message
// holds mention.
func wantError(t *testing.T, line string, err error, code protocol.Code, field, mention string) {
	t.Helper()
	var oe *ObjectError
	if !errors.As(err, &oe) {
		t.Errorf("%.60s: got %v, want an *ObjectError", line, err)
		return
	}
	if oe.Code != code || oe.Field != field || !strings.Contains(oe.Error(), mention) {
		t.Errorf("%.60s: got %s %q, want %s about field %q mentioning %q", line, oe.Code, oe.Error(), code, field, mention)
	}
}

// TestReadObjectRefusesBadLines: every line below is refused, naming the
// field when the error is about one, in the scanner's words.
func TestReadObjectRefusesBadLines(t *testing.T) {
	const (
		invalid = protocol.CodeInvalidField
		parse   = protocol.CodeParse
	)
	for _, c := range []struct {
		line        string
		code        protocol.Code
		field, want string
	}{
		// Integers are exact: past their type's range is an error, not a wrap.
		{`{"u": 18446744073709551616}`, invalid, "u", `field "u": expected an unsigned 64-bit integer, got 18446744073709551616 (above 18446744073709551615)`},
		{`{"us": [1, 18446744073709551617]}`, invalid, "us[1]", `field "us[1]": expected an unsigned 64-bit integer, got 18446744073709551617 (above`},
		{`{"u": -1}`, invalid, "u", "expected an unsigned 64-bit integer, got -1"},
		{`{"u": 1.0}`, invalid, "u", "expected an unsigned 64-bit integer, got 1.0"},
		{`{"u": 1e2}`, invalid, "u", "expected an unsigned 64-bit integer, got 1e2"},
		{`{"i": 9223372036854775808}`, invalid, "i", "expected a 64-bit integer, got 9223372036854775808"},
		{`{"f": 1e999}`, invalid, "f", "expected a finite number, got 1e999 (out of range)"},
		{`{"f": NaN}`, parse, "f", `expected a number, got "NaN" (not JSON)`},
		{`{"n": 01}`, parse, "n", `expected a number, got "01" (not a JSON number)`},
		{`{"s": 7}`, invalid, "s", "expected a string, got number 7"},
		{`{"us": {"a": 1}}`, invalid, "us", "expected an array, got an object"},
		// A key is taken once, after unescaping.
		{`{"u": 1, "u": 2}`, invalid, "u", `field "u": appears more than once`},
		{`{"u": 1, "\u0075": 2}`, invalid, "u", "appears more than once"},
		{`{"x": 1, "s": "a", "x": {}}`, invalid, "x", "appears more than once"},
		// Strings, keys and skipped values alike must be UTF-8.
		{"{\"s\": \"a\xffb\"}", invalid, "s", "expected a string of valid UTF-8"},
		{"{\"k\xff\": 1}", invalid, "", "a key is not valid UTF-8"},
		{"{\"x\": [1, {\"a\": \"\xc3\"}]}", invalid, "x", "expected a string of valid UTF-8"},
		// One object, and nothing after it but blanks.
		{`{"u": 1} x`, parse, "", "unexpected data after the object at byte 9"},
		{`{"u": 1}{}`, parse, "", "unexpected data after the object"},
		{`[1]`, parse, "", "expected an object, got an array"},
		// A line that is not JSON is a parse error, and where it breaks is
		// said when a wrong value was met first.
		{`{"u": -1, "x": [}`, parse, "", "the line is not JSON: it breaks at byte 16"},
		{`{"u": 1, "u": 2, "x": [}`, parse, "", "it breaks at byte 23"},
		{"{\"s\": \"\xff\", \"u\": 1, \"u\": 2}", invalid, "s", "expected a string of valid UTF-8"},
		{``, parse, "", "expected an object, got end of line"},
		{`{"u": 1`, parse, "", `expected ',' or '}' after the value of "u"`},
		{`{u: 1}`, parse, "", "expected a quoted key"},
		// A skipped value is still JSON, however it nests.
		{`{"x": [1, {"a": }]}`, parse, "x", "the value is not JSON: it breaks at byte 16"},
		{`{"x": tru}`, parse, "x", `expected a JSON value, got "tru" (not JSON)`},
		{`{"x": ` + strings.Repeat("[", 1000) + `]}`, parse, "x", "the value is not JSON"},
	} {
		_, err := readAll(c.line)
		wantError(t, c.line, err, c.code, c.field, c.want)
	}
}

// TestReadObjectKeysAreExact: the reader sees each key as written, so that
// "U" is not "u"; two keys that differ in case are two keys.
func TestReadObjectKeysAreExact(t *testing.T) {
	var keys []string
	err := new(ObjectReader).Read([]byte(`{"u": 1, "U": 2, "\u0055\u005f": 3, "Ü": 4}`), func(key string, v *Value) error {
		keys = append(keys, key)
		return v.Skip()
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"u", "U", "U_", "Ü"}, keys); diff != "" {
		t.Fatalf("keys (-want +got):\n%s", diff)
	}
	got, err := readAll(`{"U": 18446744073709551616}`)
	if err != nil || got["U"] != `skipped 18446744073709551616` {
		t.Fatalf(`"U" is not "u": got %v, %v`, got, err)
	}
}

// TestReadObjectSkipsNestedValues: a skipped value is passed over whole,
// however deep, its repeated inner keys included, and reading goes on
// after it.
func TestReadObjectSkipsNestedValues(t *testing.T) {
	deep := strings.Repeat(`{"a":[`, 100000) + strings.Repeat(`]}`, 100000)
	got, err := readAll(`{"x": {"a": [1, {"b": null, "b": "\"}]"}], "a": 2}, "y": [], "d": ` + deep + `, "u": 5}`)
	if err != nil {
		t.Fatal(err)
	}
	if got["u"] != uint64(5) || got["x"] != `skipped {"a": [1, {"b": null, "b": "\"}]"}], "a": 2}` || got["y"] != "skipped []" {
		t.Fatalf("got %v", got)
	}
}

// TestReadObjectNamesTheFieldOfCallbackErrors: a reader's own error is
// about the key it was given.
func TestReadObjectNamesTheFieldOfCallbackErrors(t *testing.T) {
	nope := errors.New("is not wanted here")
	line := `{"a": 1, "b": true}`
	err := new(ObjectReader).Read([]byte(line), func(key string, v *Value) error {
		if key == "b" {
			return nope
		}
		return v.Skip()
	})
	wantError(t, line, err, protocol.CodeInvalidField, "b", `field "b": is not wanted here`)
	if !errors.Is(err, nope) {
		t.Errorf("%v does not wrap the callback's error", err)
	}
	err = new(ObjectReader).Read([]byte(line), func(key string, v *Value) error {
		if key == "b" && v.Kind() != KindNumber {
			return v.Expected("a string or an integer")
		}
		return v.Skip()
	})
	wantError(t, line, err, protocol.CodeInvalidField, "b", `field "b": expected a string or an integer, got a boolean`)
}

// TestReadObjectCatchesReaderBugs: a value left unread, read twice, or
// whose failed read the reader ignores fails the line rather than letting
// it through half read.
func TestReadObjectCatchesReaderBugs(t *testing.T) {
	line := `{"a": 1e999, "b": 2}`
	for _, c := range []struct {
		name, want string
		field      func(string, *Value) error
	}{
		{"unread", `field "a": the reader neither read nor skipped the value`, func(key string, v *Value) error { return nil }},
		{"twice", `field "a": the value was read twice`, func(key string, v *Value) error { v.Skip(); return v.Skip() }},
		{"ignored", `field "a": expected a finite number, got 1e999`, func(key string, v *Value) error { v.Float(); return nil }},
	} {
		if err := new(ObjectReader).Read([]byte(line), c.field); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

func TestValueKind(t *testing.T) {
	var kinds []Kind
	err := new(ObjectReader).Read([]byte(`{"a": null, "b": true, "c": -1, "d": "s", "e": [], "f": {}}`), func(key string, v *Value) error {
		kinds = append(kinds, v.Kind())
		return v.Skip()
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Kind{KindNull, KindBool, KindNumber, KindString, KindArray, KindObject}, kinds); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

// TestAppendU64sAllocatesOnce: a long array of hashes costs one allocation
// (the slice, sized ahead), none per element, with a reused ObjectReader.
// "block_hashes" is a protocol key, so the key costs nothing either.
func TestAppendU64sAllocatesOnce(t *testing.T) {
	if raceBuild {
		t.Skip("the race detector allocates on its own")
	}
	var b strings.Builder
	b.WriteString(`{"block_hashes": [`)
	for i := range 1000 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("18446744073709551615")
	}
	b.WriteString("]}")
	line := []byte(b.String())
	var r ObjectReader
	var got []protocol.LocalBlockHash
	read := func(key string, v *Value) (err error) {
		got, err = AppendU64s[protocol.LocalBlockHash](v, nil)
		return err
	}
	if allocs := testing.AllocsPerRun(20, func() {
		if err := r.Read(line, read); err != nil {
			t.Fatal(err)
		}
	}); allocs > 1 {
		t.Fatalf("%v allocations to read 1000 hashes, want 1", allocs)
	}
	if len(got) != 1000 || got[999] != math.MaxUint64 {
		t.Fatalf("read %d hashes, last %d", len(got), got[len(got)-1])
	}
}

// Nested objects and arrays are read through Object and Array, and an
// error names its whole path: an element's index and the key inside it.
func TestObjectAndArrayNameTheNestedPath(t *testing.T) {
	read := func(line string) (sum uint64, err error) {
		var rd ObjectReader
		err = rd.Read([]byte(line), func(key string, v *Value) error {
			return v.Array(func(_ int, v *Value) error {
				return v.Object(func(key string, v *Value) error {
					if key != "in" {
						return errors.New("is not a field")
					}
					n, err := v.U64()
					sum += n
					return err
				})
			})
		})
		return sum, err
	}
	if sum, err := read(`{"requests":[{"in":1},{"in":2},{}]}`); err != nil || sum != 3 {
		t.Fatalf("sum %d, error %v; want 3, none", sum, err)
	}
	for line, want := range map[string]string{
		`{"requests":[{"in":1},{"in":-2}]}`:       `field "requests[1].in": `,
		`{"requests":[{"in":1},{"out":2}]}`:       `field "requests[1].out": is not a field`,
		`{"requests":[{"in":1},{"in":1,"in":2}]}`: `field "requests[1].in": appears more than once`,
		`{"requests":{"in":1}}`:                   `field "requests": expected an array`,
	} {
		_, err := read(line)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: error %v, want it to start %q", line, err, want)
		}
	}
}
