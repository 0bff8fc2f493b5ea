package sweep

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
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

// noRepeatedKeys refuses a JSON document in which an object gives a key
// twice, naming the key and where it is.
func noRepeatedKeys(data []byte) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var walk func(path string) error
	walk = func(path string) error {
		t, err := d.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'):
			seen := map[string]bool{}
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return err
				}
				key := k.(string)
				if seen[key] {
					return fmt.Errorf("%s%q appears twice", where(path), key)
				}
				seen[key] = true
				if err := walk(path + "." + key); err != nil {
					return err
				}
			}
			_, err = d.Token()
		case json.Delim('['):
			for i := 0; d.More(); i++ {
				if err := walk(fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
			_, err = d.Token()
		}
		return err
	}
	if err := walk(""); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

func where(path string) string {
	if path == "" {
		return "key "
	}
	return "in " + strings.TrimPrefix(path, ".") + ", key "
}
