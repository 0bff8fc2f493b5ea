package wire

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
)

// A config command is {"op":"config", KEYS...}: the keys of a config file
// beside op (and id), so a scenario or a host can carry its config in the
// stream. Its keys are not command fields, so it has a decoder of its own;
// the values are read by the same strict decoder and checked by the same
// Validate as a config file.

// configKeys holds every config key, dotted for the keys of a group
// ("affinity.mode"), with its Go type; configGroups the keys that hold an
// object of keys; configOrder the place of each key in protocol.Config,
// the order a ConfigUpdate lists them in.
var configKeys, configGroups, configOrder = func() (map[string]reflect.Type, map[string]bool, map[string]int) {
	keys, groups, order := map[string]reflect.Type{}, map[string]bool{}, map[string]int{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			name := prefix + strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
			if ft := t.Field(i).Type; ft.Kind() == reflect.Struct {
				groups[name] = true
				walk(ft, name+".")
			} else {
				keys[name], order[name] = ft, len(order)
			}
		}
	}
	walk(reflect.TypeFor[protocol.Config](), "")
	return keys, groups, order
}()

// sortConfigKeys puts keys in the order of protocol.Config's fields.
func sortConfigKeys(keys []string) {
	slices.SortFunc(keys, func(a, b string) int { return configOrder[a] - configOrder[b] })
}

// decodeConfigCommand decodes a line whose op is "config".
func decodeConfigCommand(line []byte, out *Decoded) {
	op := string(protocol.OpConfig)
	*out = Decoded{Op: &op}
	s := scanner{b: line}
	var keys []string
	unknown := func(key string) *fieldError {
		return &fieldError{code: protocol.CodeUnknownField, path: key, msg: "is not a config key (docs/PROTOCOL.md §2)"}
	}
	cfg := protocol.DefaultConfig()
	// value reads one key's value into cfg, alone, so that a value of the
	// wrong type is named by its key.
	value := func(key string) *fieldError {
		s.peek()
		start := s.i
		if !s.skip() {
			return s.syntax("invalid JSON value").within(key)
		}
		doc := append(appendString([]byte{'{'}, key[strings.LastIndexByte(key, '.')+1:]), ':')
		doc = append(append(doc, s.b[start:s.i]...), '}')
		if group, _, nested := strings.Cut(key, "."); nested {
			doc = append(append(appendString([]byte{'{'}, group), ':'), append(doc, '}')...)
		}
		if err := decodeStrict(doc, &cfg); err != nil {
			return &fieldError{code: protocol.CodeInvalidField, path: key, msg: "expected " + expectation(configKeys[key])}
		}
		keys = append(keys, key)
		return nil
	}
	err := s.object(func(key string) *fieldError {
		switch key {
		case "op":
			_, err := s.str()
			return err.orNil(key)
		case "id":
			s.peek()
			start := s.i
			if !validID(&s) {
				s.i = start
				return s.expected("a string or a number").within(key)
			}
			out.ID = line[start:s.i]
			return nil
		}
		switch {
		case configGroups[key]:
			if err := s.object(func(sub string) *fieldError {
				if configKeys[key+"."+sub] == nil {
					return unknown(key + "." + sub)
				}
				return value(key + "." + sub)
			}); err != nil {
				if err.path == "" { // the group itself is not an object
					err = err.within(key)
				}
				return err
			}
		case configKeys[key] != nil:
			if err := value(key); err != nil {
				return err
			}
		default:
			return unknown(key)
		}
		return nil
	})
	if err == nil && s.peek() != 0 {
		err = s.syntax("unexpected data after the object")
	}
	if err != nil {
		out.Err = err.wire()
		return
	}
	if err := cfg.Validate(); err != nil {
		out.Err = protocol.Errorf(protocol.CodeInvalidField, "%v", err)
		return
	}
	sortConfigKeys(keys)
	out.Cmd = protocol.Command{Op: protocol.OpConfig, ID: out.ID, Config: &protocol.ConfigUpdate{Config: cfg, Keys: keys}}
}

// expectation says what a config key of type t takes.
func expectation(t reflect.Type) string {
	null := ""
	if t.Kind() == reflect.Pointer {
		t, null = t.Elem(), ", or null"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string" + null
	case reflect.Bool:
		return "true or false" + null
	case reflect.Float64:
		return "a number" + null
	}
	return fmt.Sprintf("a whole number from 0 to %d%s", uint64(1)<<(t.Bits())-1, null)
}
