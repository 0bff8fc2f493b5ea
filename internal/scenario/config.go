package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// A config command's answer carries the whole effective config (docs/
// PROTOCOL.md §2). Recorded so in every scenario, one new config key
// rewrote every scenario that opens with a config command (50 of 61 files
// once), and the line a reader looks at hid the two keys the scenario sets
// among forty it does not. So a scenario records the answer with "config"
// replaced by "config_changes": only the keys whose values differ from the
// defaults, nested objects narrowed the same way. This is the harness's
// convention, not the protocol's: the router still answers the whole
// config, and the one scenario that says so records it whole.

// changesKey names the narrowed config in a recorded answer.
const changesKey = "config_changes"

// wholeConfigMarker is the comment line of the scenario that records a
// config answer as the router writes it.
const wholeConfigMarker = "# config: whole"

// Recorder turns serve's response lines into the lines a scenario records.
type Recorder struct {
	defaults json.RawMessage
	whole    bool
}

// NewRecorder records text's responses against defaults, the "config" of
// the answer to a bare {"op":"config"} (the config with no key set).
func NewRecorder(text []byte, defaults json.RawMessage) Recorder {
	whole := false
	for _, line := range lines(text) {
		if string(bytes.TrimRight(line, " \t\r")) == wholeConfigMarker {
			whole = true
		}
	}
	return Recorder{defaults: defaults, whole: whole}
}

// DefaultsOf takes the config out of the answer to a bare config command.
func DefaultsOf(answer []byte) (json.RawMessage, error) {
	var r struct {
		Config json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal(answer, &r); err != nil || len(r.Config) == 0 {
		return nil, fmt.Errorf("not a config answer: %.80q", answer)
	}
	return r.Config, nil
}

// Record rewrites out (serve's output, one response a line) as recorded.
func (r Recorder) Record(out []byte) ([]byte, error) {
	if r.whole || len(out) == 0 {
		return out, nil
	}
	var b []byte
	for _, line := range lines(out) {
		rec, err := r.line(line)
		if err != nil {
			return nil, err
		}
		b = append(append(b, rec...), '\n')
	}
	return b, nil
}

func (r Recorder) line(line []byte) ([]byte, error) {
	if !bytes.Contains(line, []byte(`"config":{`)) {
		return line, nil
	}
	top, err := members(line)
	if err != nil {
		return nil, fmt.Errorf("response %.80q: %v", line, err)
	}
	for i, m := range top {
		if m.key == "config" {
			narrowed, err := changes(m.value, r.defaults)
			if err != nil {
				return nil, err
			}
			top[i] = member{key: changesKey, value: narrowed}
		}
	}
	return object(top), nil
}

// member is one key of a JSON object with its value's bytes as written.
type member struct {
	key   string
	value json.RawMessage
}

// members reads a JSON object's members in their order (a map would lose
// it, and the recorded line must read like the router's).
func members(raw []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("expected an object")
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, member{key: tok.(string), value: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("text after the object")
	}
	return out, nil
}

func object(ms []member) []byte {
	b := []byte{'{'}
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(m.key)
		b = append(append(append(b, k...), ':'), m.value...)
	}
	return append(b, '}')
}

// changes keeps got's members that differ from def's, narrowing an object
// that both hold to its own changed members.
func changes(got, def json.RawMessage) (json.RawMessage, error) {
	gm, err := members(got)
	if err != nil {
		return nil, err
	}
	dm, err := members(def)
	if err != nil {
		return nil, err
	}
	defs := make(map[string]json.RawMessage, len(dm))
	for _, m := range dm {
		defs[m.key] = m.value
	}
	var out []member
	for _, m := range gm {
		d, ok := defs[m.key]
		switch {
		case ok && bytes.Equal(m.value, d):
			continue
		case ok && isObject(m.value) && isObject(d):
			narrowed, err := changes(m.value, d)
			if err != nil {
				return nil, err
			}
			out = append(out, member{key: m.key, value: narrowed})
		default:
			out = append(out, m)
		}
	}
	return object(out), nil
}

func isObject(v json.RawMessage) bool { return len(v) > 0 && v[0] == '{' }
