package sweep

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Object is a JSON object of flag names to values, in the order written,
// which is the order a point's flags take: a Go map would lose it. Each
// value is a scalar, or a list of scalars; a scalar keeps its JSON text
// (0.50 stays 0.50), and reaches the flag as written (strings unquoted).
type Object []Field

// Field is one flag of an Object.
type Field struct {
	Name   string
	Values []string
}

// UnmarshalJSON reads the object. encoding/json does the lexing; this only
// keeps the order.
func (o *Object) UnmarshalJSON(data []byte) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return errors.New("expected an object of flag names to values")
	}
	*o = nil
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return err
		}
		name := t.(string) // given once: Parse refused repeated keys
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			return fmt.Errorf("flag %q: %w", name, err)
		}
		values, err := scalars(raw)
		if err != nil {
			return fmt.Errorf("flag %q: %w", name, err)
		}
		if name == "comment" {
			continue // a note for the reader: no replay flag is called comment
		}
		*o = append(*o, Field{name, values})
	}
	_, err := d.Token()
	return err
}

func (o Object) has(name string) bool {
	for _, f := range o {
		if f.Name == name {
			return true
		}
	}
	return false
}

// flags is the object as --name=value flags, each with its first value.
func (o Object) flags() []string {
	out := make([]string, len(o))
	for i, f := range o {
		out[i] = "--" + f.Name + "=" + f.Values[0]
	}
	return out
}

// scalars reads a scalar or a list of scalars as flag values.
func scalars(raw json.RawMessage) ([]string, error) {
	var list []json.RawMessage
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, err
		}
	} else {
		list = []json.RawMessage{raw}
	}
	out := make([]string, len(list))
	for i, v := range list {
		v = bytes.TrimSpace(v)
		switch {
		case len(v) > 0 && v[0] == '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, err
			}
			out[i] = s
		case len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9'), string(v) == "true", string(v) == "false":
			out[i] = string(v)
		default:
			return nil, fmt.Errorf("%s is not a number, string or boolean", v)
		}
	}
	return out, nil
}

// MaxDepth bounds how deep a spec nests. A spec needs four levels
// ("objective"."subject_to".METRIC."min", or "grid"[i].FLAG[j]); anything
// past the bound is no spec, and is refused before any reader walks it.
const MaxDepth = 64

// level is one container the walk of noRepeatedKeys is in: an object's
// keys so far and the key whose value is read, or an array's index. Only
// these are kept, and the path is spelt out only for an error: a path per
// level, built as the walk goes down, made the walk quadratic in depth.
type level struct {
	seen  map[string]bool // nil for an array
	key   string
	index int
}

// path names where the walk is, as the top-level object's keys and the
// arrays' indexes below it: grid[0].workers.
func path(levels []level) string {
	var b strings.Builder
	for _, l := range levels {
		if l.seen != nil {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(l.key)
		} else {
			fmt.Fprintf(&b, "[%d]", l.index)
		}
	}
	return b.String()
}

// noRepeatedKeys refuses a JSON document in which an object gives a key
// twice, naming the key and where it is, and one nested deeper than
// maxDepth (Parse gives MaxDepth). It walks on an explicit stack, not by
// recursion: its cost is linear in the document's size, whatever its
// depth. A document that is not JSON is left to the decoder that follows,
// which says why.
func noRepeatedKeys(data []byte, maxDepth int) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var stack []level
	for {
		t, err := d.Token()
		if err != nil {
			return notEOF(err)
		}
		if t == json.Delim('{') || t == json.Delim('[') {
			if len(stack) == maxDepth {
				return fmt.Errorf("the spec nests deeper than %d levels (at byte %d%s); a spec needs 4", maxDepth, d.InputOffset(), under(stack))
			}
			l := level{index: -1}
			if t == json.Delim('{') {
				l.seen = map[string]bool{}
			}
			stack = append(stack, l)
		}
		more, err := nextValue(d, &stack)
		if !more || err != nil {
			return notEOF(err)
		}
	}
}

// nextValue moves the walk from a value just read, or a container just
// entered, to the next value: it closes the containers that end there,
// and reads the key before an object's value, refusing one seen before. It
// reports whether there is a next value.
func nextValue(d *json.Decoder, stack *[]level) (bool, error) {
	for len(*stack) > 0 {
		top := &(*stack)[len(*stack)-1]
		if !d.More() {
			if _, err := d.Token(); err != nil {
				return false, err
			}
			*stack = (*stack)[:len(*stack)-1]
			continue
		}
		if top.seen == nil {
			top.index++
			return true, nil
		}
		k, err := d.Token()
		if err != nil {
			return false, err
		}
		key := k.(string)
		if top.seen[key] {
			return false, fmt.Errorf("%s%q appears twice", where(path((*stack)[:len(*stack)-1])), key)
		}
		top.seen[key], top.key = true, key
		return true, nil
	}
	return false, nil
}

// notEOF is err but for a document cut short, which the decoder that
// follows names better.
func notEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// under names the top-level key the walk is under, for an error far
// below it, whose whole path would be as long as its depth.
func under(stack []level) string {
	if len(stack) == 0 || stack[0].seen == nil {
		return ""
	}
	return fmt.Sprintf(", under %q", stack[0].key)
}

func where(path string) string {
	if path == "" {
		return "key "
	}
	return "in " + path + ", key "
}

// checkText refuses a spec that is not UTF-8, or one of whose strings
// holds a lone surrogate escape ("\ud800"): encoding/json would read
// either as U+FFFD, silently, so a workload would name another file and a
// description or flag value would not be what was written. (The router's
// own readers refuse the same, docs/PROTOCOL.md §1.)
func checkText(data []byte) error {
	if !utf8.Valid(data) {
		at := 0
		for at < len(data) {
			r, n := utf8.DecodeRune(data[at:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			at += n
		}
		return fmt.Errorf("byte %d: the spec is not UTF-8", at)
	}
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && i+5 < len(data) && data[i+1] == 'u':
			r := escapedRune(data[i+2 : i+6])
			if !utf16.IsSurrogate(r) {
				i += 5
				continue
			}
			if r < 0xdc00 && i+11 < len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
				if low := escapedRune(data[i+8 : i+12]); low >= 0xdc00 && low <= 0xdfff {
					i += 11 // a pair: one character
					continue
				}
			}
			return fmt.Errorf("byte %d: a string holds a lone surrogate escape (%s), which is no character", i, data[i:i+6])
		case c == '\\':
			i++ // an escaped character: a quote here does not end the string
		}
	}
	return nil
}

// escapedRune reads the 4 hex digits of a \u escape; -1 if they are not
// (encoding/json then refuses the string).
func escapedRune(hexDigits []byte) rune {
	v, err := strconv.ParseUint(string(hexDigits), 16, 32)
	if err != nil {
		return -1
	}
	return rune(v)
}
