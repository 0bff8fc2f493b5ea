package wire

import (
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Config keys are read by the same strict scanner as commands, whether they
// come from a config file, a flag or a config command: a key given twice,
// an integer past its type's range, NaN or invalid UTF-8 are refused naming
// the key, as in any command (goccy's decoder wrapped integers past 2^64
// and took the last of two equal keys). A config command is
// {"op":"config", KEYS...}: the keys of a config file beside op and id.

// configField is where a config key lives in protocol.Config.
type configField struct {
	index []int
	order int // its place among the keys, the order a ConfigUpdate lists them in
}

// configFields maps every config key, dotted for the keys of a group
// ("affinity.mode"), to its field; configGroups are the keys that hold an
// object of keys.
var configFields, configGroups = func() (map[string]configField, map[string]bool) {
	fields, groups := map[string]configField{}, map[string]bool{}
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			name := prefix + jsonName(t.Field(i))
			at := append(slices.Clone(index), i)
			if t.Field(i).Type.Kind() == reflect.Struct {
				groups[name] = true
				walk(t.Field(i).Type, name+".", at)
				continue
			}
			fields[name] = configField{index: at, order: len(fields)}
		}
	}
	walk(reflect.TypeFor[protocol.Config](), "", nil)
	return fields, groups
}()

// configHints suggest the config key a mistyped one meant.
var configHints = NewKeyHints(slices.Collect(maps.Keys(configFields))...)

// A list key (policy_classes, worker_selection.instances) is one config
// key, whose value is the whole list: a config command sets it whole, as a
// file does, and a conflict with a flag is about the list. Its elements
// are objects read as strictly as the keys around them.

// elementSchema is how an element of a list key, or an object inside one
// (an instance's parameters), is read: its keys are the json tags of its
// struct's fields.
type elementSchema struct {
	what     string         // what an element is, for messages ("a policy class")
	fields   map[string]int // key -> field index
	required []string       // keys an element must give, in field order
	hints    KeyHints
}

// elementKinds says what each struct a list holds is, and which of its keys
// are required: Dynamo's serde schema (policy_config.rs at the pin) has no
// default for these.
var elementKinds = map[reflect.Type]struct {
	what     string
	required []string
}{
	reflect.TypeFor[protocol.PolicyClass]():         {"a policy class", []string{"name", "slo_ms", "quantum"}},
	reflect.TypeFor[protocol.SelectionInstance]():   {"a worker_selection instance", []string{"name", "type"}},
	reflect.TypeFor[protocol.SelectionParameters](): {"an instance's parameters", nil},
}

// elementSchemas are the schemas of every struct that a list key of
// protocol.Config holds, directly or nested; a struct without an entry in
// elementKinds fails every test, at the package's start.
var elementSchemas = func() map[reflect.Type]*elementSchema {
	out := map[reflect.Type]*elementSchema{}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		if out[t] != nil {
			return
		}
		kind, ok := elementKinds[t]
		if !ok {
			panic("config: no elementKinds entry for " + t.String())
		}
		es := &elementSchema{what: kind.what, fields: map[string]int{}, required: kind.required}
		out[t] = es
		for i := range t.NumField() {
			es.fields[jsonName(t.Field(i))] = i
			if ft := t.Field(i).Type; ft.Kind() == reflect.Struct {
				add(ft)
			}
		}
		for _, r := range kind.required {
			if _, ok := es.fields[r]; !ok {
				panic("config: " + t.String() + " has no key " + r)
			}
		}
		es.hints = NewKeyHints(slices.Collect(maps.Keys(es.fields))...)
	}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			switch ft := t.Field(i).Type; ft.Kind() {
			case reflect.Struct:
				walk(ft)
			case reflect.Slice:
				add(ft.Elem())
			}
		}
	}
	walk(reflect.TypeFor[protocol.Config]())
	return out
}()

// jsonName is a struct field's key.
func jsonName(f reflect.StructField) string {
	return strings.Split(f.Tag.Get("json"), ",")[0]
}

// sortConfigKeys puts keys in the order of protocol.Config's fields.
func sortConfigKeys(keys []string) {
	slices.SortFunc(keys, func(a, b string) int { return configFields[a].order - configFields[b].order })
}

// ConfigCommand is a config command that sets every key of cfg: how a
// stream that must replay alone, whatever the flags, opens.
func ConfigCommand(cfg protocol.Config) *protocol.ConfigUpdate {
	keys := make([]string, 0, len(configFields))
	for k := range configFields {
		keys = append(keys, k)
	}
	sortConfigKeys(keys)
	return &protocol.ConfigUpdate{Config: cfg, Keys: keys}
}

// unknownConfigKey names a key that is not a config key, with a suggestion
// when it differs from one only in case or separators.
func unknownConfigKey(path string, nested bool) *fieldError {
	msg := "is not a config key (docs/PROTOCOL.md §2)"
	if name, ok := configHints.Suggest(path); ok {
		msg += " (did you mean " + strconv.Quote(name) + "?)"
	}
	if nested { // the group's name is added on the way out
		path = path[strings.LastIndexByte(path, '.')+1:]
	}
	return &fieldError{code: protocol.CodeUnknownField, path: path, msg: msg}
}

// decodeConfigKeys reads the object of config keys at the scanner into cfg
// and returns the keys it set, in Config's order. A null value unsets an
// optional key and leaves any other as it was. other, if set, takes the
// keys that are not config keys (a config command's op and id) and reports
// whether it did.
func decodeConfigKeys(s *scanner, cfg *protocol.Config, other func(key string) (bool, *fieldError)) ([]string, *fieldError) {
	var keys []string
	v := reflect.ValueOf(cfg).Elem()
	value := func(key string) *fieldError {
		set, err := decodeConfigValue(s, v.FieldByIndex(configFields[key].index))
		if set {
			keys = append(keys, key)
		}
		return err
	}
	err := s.object(func(key string) *fieldError {
		if other != nil {
			if ok, err := other(key); ok {
				return err
			}
		}
		switch {
		case configGroups[key]:
			if s.null() {
				return nil
			}
			return s.object(func(sub string) *fieldError {
				if _, ok := configFields[key+"."+sub]; !ok {
					return unknownConfigKey(key+"."+sub, true)
				}
				return value(key + "." + sub).orNil(sub)
			}).orNil(key)
		case configFields[key].index != nil && !strings.Contains(key, "."):
			return value(key).orNil(key)
		}
		return unknownConfigKey(key, false)
	})
	sortConfigKeys(keys)
	return keys, err
}

// decodeConfigValue reads one value into the config field fv and reports
// whether it set it.
func decodeConfigValue(s *scanner, fv reflect.Value) (bool, *fieldError) {
	t := fv.Type()
	// null unsets an optional key, and a list, which is then empty.
	optional := t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice
	if s.null() {
		if optional {
			fv.SetZero()
		}
		return optional, nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		t = t.Elem()
	case reflect.Slice:
		return true, decodeList(s, fv)
	case reflect.Struct:
		return true, decodeElement(s, fv)
	}
	var x any
	var err *fieldError
	switch t.Kind() {
	case reflect.String:
		x, err = s.str()
	case reflect.Bool:
		x, err = s.boolean()
	case reflect.Float64:
		x, err = s.float()
	case reflect.Uint64:
		x, err = s.u64()
	case reflect.Uint32:
		x, err = s.u32()
	default:
		panic("config field of kind " + t.Kind().String())
	}
	if err != nil {
		return false, err
	}
	setField(fv, t, x)
	return true, nil
}

// setField sets fv, of type t or a pointer to t, to the value x read for
// it.
func setField(fv reflect.Value, t reflect.Type, x any) {
	val := reflect.ValueOf(x).Convert(t)
	if fv.Kind() == reflect.Pointer {
		p := reflect.New(t)
		p.Elem().Set(val)
		val = p
	}
	fv.Set(val)
}

// decodeList reads a list key's array of objects into fv; an empty array
// leaves it nil, as the defaults have it.
func decodeList(s *scanner, fv reflect.Value) *fieldError {
	list := reflect.Zero(fv.Type())
	err := s.array(func(int) *fieldError {
		el := reflect.New(fv.Type().Elem()).Elem()
		if err := decodeElement(s, el); err != nil {
			return err
		}
		list = reflect.Append(list, el)
		return nil
	})
	if err != nil {
		return err
	}
	fv.Set(list)
	return nil
}

// decodeElement reads an object into the struct v, by its schema: an
// unknown key is refused, with a hint when it is a slip of a known one, and
// a required key it lacks (or gives as null) is refused by name. Its
// nested objects are read by their own schemas: the recursion follows the
// types, never the input's depth.
func decodeElement(s *scanner, v reflect.Value) *fieldError {
	es := elementSchemas[v.Type()]
	var given []string
	err := s.object(func(key string) *fieldError {
		i, ok := es.fields[key]
		if !ok {
			msg := "is not a key of " + es.what + " (docs/PROTOCOL.md §2)"
			if name, ok := es.hints.Suggest(key); ok {
				msg += " (did you mean " + strconv.Quote(name) + "?)"
			}
			return &fieldError{code: protocol.CodeUnknownField, path: key, msg: msg}
		}
		set, err := decodeConfigValue(s, v.Field(i))
		if set {
			given = append(given, key)
		}
		return err.orNil(key)
	})
	if err != nil {
		return err
	}
	for _, r := range es.required {
		if !slices.Contains(given, r) {
			return &fieldError{code: protocol.CodeInvalidField, path: r, msg: "required: " + es.what + " gives " + strings.Join(es.required, ", ")}
		}
	}
	return nil
}

// decodeConfigCommand decodes a line whose op is "config". Its keys are
// only read here: whether the config they make is valid is known once they
// are merged over the file and flags (ConfigSource.Merge).
func decodeConfigCommand(line []byte, out *Decoded) (err *fieldError, at int) {
	s := scanner{b: line}
	cfg := protocol.DefaultConfig()
	var id []byte
	keys, err := decodeConfigKeys(&s, &cfg, func(key string) (bool, *fieldError) {
		switch key {
		case "op":
			_, err := s.str()
			return true, err.orNil(key)
		case "id":
			var err *fieldError
			id, err = scanID(&s)
			return true, err.orNil(key)
		}
		return false, nil
	})
	if err == nil && !s.atEnd() {
		err = s.syntax("unexpected data after the object")
	}
	if err != nil {
		return err, s.i
	}
	op := string(protocol.OpConfig)
	*out = Decoded{Op: &op, ID: id,
		Cmd: protocol.Command{Op: protocol.OpConfig, ID: id, Config: &protocol.ConfigUpdate{Config: cfg, Keys: keys}}}
	out.Err = out.Cmd.Validate()
	return nil, 0
}

// appendConfigValue writes the value of a config field as JSON: numbers as
// every response prints them, a list as an array ([] when empty), an
// object's keys in its struct's field order.
func appendConfigValue(b []byte, fv reflect.Value) []byte {
	if fv.Kind() == reflect.Pointer {
		if fv.IsNil() {
			return append(b, "null"...)
		}
		fv = fv.Elem()
	}
	switch fv.Kind() {
	case reflect.String:
		return appendGoccyString(b, fv.String())
	case reflect.Bool:
		return strconv.AppendBool(b, fv.Bool())
	case reflect.Float64:
		return protocol.AppendNum(b, fv.Float())
	case reflect.Slice:
		b = append(b, '[')
		for i := range fv.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendConfigValue(b, fv.Index(i))
		}
		return append(b, ']')
	case reflect.Struct:
		b = append(b, '{')
		for i := range fv.NumField() {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(appendGoccyString(b, jsonName(fv.Type().Field(i))), ':')
			b = appendConfigValue(b, fv.Field(i))
		}
		return append(b, '}')
	}
	return strconv.AppendUint(b, fv.Uint(), 10)
}

// configValue is the value of one config key as JSON.
func configValue(c *protocol.Config, key string) []byte {
	return appendConfigValue(nil, reflect.ValueOf(c).Elem().FieldByIndex(configFields[key].index))
}

// appendConfig writes the whole config as a JSON object, keys in Config's
// order, groups as objects.
func appendConfig(b []byte, c *protocol.Config) []byte {
	return appendConfigValue(b, reflect.ValueOf(c).Elem())
}
