package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-json"
	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Dynamo's router policy config (--router-policy-config FILE, a YAML file;
// lib/kv-router scheduling/policy_config.rs at the pinned commit) holds the
// root profile (default_policy_class, policy_classes), per-model profiles
// (models) and worker_selection. Here it becomes config overrides, applied
// as flags are, so that a class or an instance is one config key whichever
// way it came, and Config.Validate judges it in Dynamo's words.
//
// goccy's parser reads the YAML (anchors, flow and block styles, quoting,
// positions, duplicate keys); the walk over its tree is written here
// because goccy's decoder into structs is not strict the way serde is: it
// truncates 1.5 to 1 in a u64, turns 2^64 into 2^63, reads "5" as 5 and 12
// as "12", and names Go structs in its messages. The walk follows the
// schema's types, never the input's depth; an alias expands to the one node
// its anchor holds, so the work stays linear in the file.

// policyConfigFlag names the flag in messages.
const policyConfigFlag = "--router-policy-config"

// nothingDefined is Dynamo's message for a config that defines nothing.
const nothingDefined = "router policy config must define a root profile, at least one model profile, or worker_selection"

// laterSelectionKeys are worker_selection keys of Dynamo releases after
// the pin, with what to give here instead.
var laterSelectionKeys = map[string]string{
	"aggregated": "the default instance places aggregated requests (default)",
	"prefill":    "give --router-prefill-policy NAME",
	"decode":     "give --router-decode-policy NAME",
}

// PolicyConfigOverrides reads the policy config that the file name holds
// into the config keys it sets: default_policy_class, policy_classes,
// worker_selection.default and worker_selection.instances, each an
// override named by the flag and the file, with the line of every path it
// sets. An error names the file, the line and the key.
func PolicyConfigOverrides(name string, data []byte) ([]Override, error) {
	label := policyConfigFlag + " " + name
	y := &yamlReader{anchors: map[string]ast.Node{}, lines: map[string]int{}}
	cfg, present, yerr := y.read(data)
	if yerr != nil {
		if yerr.line == 0 {
			return nil, fmt.Errorf("%s: %s", label, yerr.msg)
		}
		return nil, fmt.Errorf("%s line %d: %s", label, yerr.line, yerr.msg)
	}
	var out []Override
	for _, key := range []string{"default_policy_class", "policy_classes", "worker_selection.default", "worker_selection.instances"} {
		if !present[key] {
			continue
		}
		v := json.RawMessage(configValue(&cfg, key))
		out = append(out, Override{Key: key, Value: v, Flag: label, Lines: y.lines})
	}
	return out, nil
}

// maxPolicyDepth bounds how deep a policy config may nest before goccy's
// parser sees it: the parser recurses once a level and builds a path at
// each, so its memory grows with the square of the depth (a 40,000-deep
// "[[[...]]]", 80 KB, took 2.5 GB).
const maxPolicyDepth = 64

// tooDeep is the first line at which data nests deeper than maxPolicyDepth,
// or 0: a linear scan that counts, at each line, its indentation, the
// block indicators ("- ", "? ") that open it, and the flow brackets still
// open, outside quoted scalars and comments. Each is at least one level of
// the document's nesting, so a document it passes is no deeper than that.
func tooDeep(data []byte) int {
	line, flow := 1, 0
	var quote byte
	for i := 0; i < len(data); {
		// The start of a line outside a quoted scalar: indentation and
		// block indicators.
		depth := 0
		if quote == 0 {
			for i < len(data) && data[i] == ' ' {
				depth, i = depth+1, i+1
			}
			for i+1 < len(data) && (data[i] == '-' || data[i] == '?') && data[i+1] == ' ' {
				depth, i = depth+1, i+2
				for i < len(data) && data[i] == ' ' {
					i++
				}
			}
		}
		for ; i < len(data) && data[i] != '\n'; i++ {
			c := data[i]
			switch {
			case quote == '"' && c == '\\':
				i++ // an escape: the next byte is not the closing quote
			case quote != 0:
				if c == quote {
					quote = 0
				}
			case c == '"' || c == '\'':
				quote = c
			case c == '#' && (i == 0 || data[i-1] == ' ' || data[i-1] == '\t'):
				for i < len(data) && data[i] != '\n' {
					i++
				}
				i--
			case c == '[' || c == '{':
				flow++
			case c == ']' || c == '}':
				flow = max(flow-1, 0)
			}
			if depth+flow > maxPolicyDepth {
				return line
			}
		}
		if depth+flow > maxPolicyDepth {
			return line
		}
		line, i = line+1, i+1
	}
	return 0
}

// yamlError is an error at a line of the file (0: about the whole file).
type yamlError struct {
	line int
	msg  string
}

// yamlReader walks one policy config's tree.
type yamlReader struct {
	// anchors are those met so far in the walk, which goes in document
	// order: an alias names the last anchor of its name before it.
	anchors map[string]ast.Node
	// lines maps each config path set ("policy_classes[1].quantum") to its
	// line, for the messages of Config.Validate.
	lines map[string]int
}

func lineOf(n ast.Node) int { return n.GetToken().Position.Line }

// fail is an error about the value at path.
func (y *yamlReader) fail(n ast.Node, path, msg string) *yamlError {
	return &yamlError{line: lineOf(n), msg: (&fieldError{path: path, msg: msg}).wire().Message}
}

// read parses data and walks its one document into a config, reporting
// which of the config keys the file gives.
func (y *yamlReader) read(data []byte) (protocol.Config, map[string]bool, *yamlError) {
	cfg := protocol.DefaultConfig()
	present := map[string]bool{}
	body, yerr := y.document(data, "a policy config needs 4", "a policy config")
	if yerr != nil {
		return cfg, nil, yerr
	}
	if body == nil || body.Type() == ast.NullType {
		return cfg, nil, &yamlError{msg: "invalid router policy config: " + nothingDefined}
	}
	if yerr := y.mapping(body, "", func(key string, k, v ast.Node) *yamlError {
		var set bool
		var yerr *yamlError
		switch key {
		case "default_policy_class":
			set, yerr = y.value(v, key, reflect.ValueOf(&cfg.DefaultPolicyClass).Elem())
		case "policy_classes":
			set, yerr = y.value(v, key, reflect.ValueOf(&cfg.PolicyClasses).Elem())
		case "models":
			yerr = y.models(v)
		case "worker_selection":
			yerr = y.workerSelection(v, &cfg.WorkerSelection, present)
		default:
			yerr = y.unknown(k, key, "", "Dynamo's router policy config", rootHints)
		}
		if set {
			present[key] = true
			y.lines[key] = lineOf(k)
		}
		return yerr
	}); yerr != nil {
		return cfg, nil, yerr
	}
	if yerr := y.rootProfile(&cfg, present); yerr != nil {
		return cfg, nil, yerr
	}
	if len(present) == 0 {
		return cfg, nil, &yamlError{line: lineOf(body), msg: "invalid router policy config: " + nothingDefined}
	}
	return cfg, present, nil
}

// document parses data and returns its one document's body, resolved (nil
// when empty); needs says how deep the schema nests, what the file is.
func (y *yamlReader) document(data []byte, needs, what string) (ast.Node, *yamlError) {
	// goccy reads bytes that are not UTF-8 as U+FFFD; serde refuses them,
	// and so does every reader here.
	if !utf8.Valid(data) {
		at := 0
		for at < len(data) {
			r, size := utf8.DecodeRune(data[at:])
			if r == utf8.RuneError && size == 1 {
				break
			}
			at += size
		}
		return nil, &yamlError{line: 1 + bytes.Count(data[:at], []byte("\n")), msg: "not YAML: not valid UTF-8"}
	}
	if line := tooDeep(data); line > 0 {
		return nil, &yamlError{line: line, msg: fmt.Sprintf("nested deeper than %d levels (%s)", maxPolicyDepth, needs)}
	}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) && ye.GetToken() != nil {
			return nil, &yamlError{line: ye.GetToken().Position.Line, msg: "not YAML: " + ye.GetMessage()}
		}
		return nil, &yamlError{msg: "not YAML: " + err.Error()}
	}
	var body ast.Node
	for _, doc := range f.Docs {
		if doc.Body == nil {
			continue
		}
		if body != nil { // serde_yaml reads one document
			return nil, &yamlError{line: lineOf(doc.Body), msg: "a second YAML document: " + what + " is one document"}
		}
		body = doc.Body
	}
	if body != nil {
		body = y.resolve(body)
	}
	return body, nil
}

// rootHints suggest the root key a mistyped one meant.
var rootHints = NewKeyHints("default_policy_class", "policy_classes", "models", "worker_selection")

// rootProfile applies Dynamo's rules of presence to the root profile, which
// the config cannot see (there an empty list or name is no list or name):
// both keys or neither, then the default's name, then a class at least.
func (y *yamlReader) rootProfile(cfg *protocol.Config, present map[string]bool) *yamlError {
	dpc, pcs := present["default_policy_class"], present["policy_classes"]
	at := func(key string) int { return y.lines[key] }
	switch {
	case dpc != pcs:
		line := at("default_policy_class")
		if pcs {
			line = at("policy_classes")
		}
		return &yamlError{line: line, msg: "invalid router policy config: root profile must specify both default_policy_class and policy_classes when either is present"}
	case !dpc:
		return nil
	case cfg.DefaultPolicyClass == "":
		return &yamlError{line: at("default_policy_class"), msg: `invalid router policy config: root policy class name "" must match [A-Za-z0-9_.-]+`}
	case len(cfg.PolicyClasses) == 0:
		return &yamlError{line: at("policy_classes"), msg: "invalid router policy config: root policy_classes must not be empty"}
	}
	return nil
}

// models refuses per-model profiles: Dynamo picks one by the request's
// model name, and a request here names no model.
func (y *yamlReader) models(v ast.Node) *yamlError {
	v = y.resolve(v)
	if v.Type() == ast.NullType {
		return nil
	}
	if m, ok := v.(*ast.MappingNode); ok && len(m.Values) == 0 {
		return nil // Dynamo's default: no model profiles
	}
	return y.fail(v, "models", "per-model profiles are not taken here: Dynamo picks one by the request's model name, and a request here names no model; put default_policy_class and policy_classes at the root, which every request uses")
}

// workerSelection reads the worker_selection mapping of the pin: default
// and instances.
func (y *yamlReader) workerSelection(v ast.Node, ws *protocol.WorkerSelection, present map[string]bool) *yamlError {
	v = y.resolve(v)
	if v.Type() == ast.NullType {
		return nil
	}
	given := false
	if yerr := y.mapping(v, "worker_selection", func(key string, k, val ast.Node) *yamlError {
		path := "worker_selection." + key
		var set bool
		var yerr *yamlError
		switch key {
		case "default":
			set, yerr = y.value(val, path, reflect.ValueOf(&ws.Default).Elem())
			if yerr == nil && set && ws.Default == "" {
				yerr = y.fail(val, path, `names no instance: give an instance's name, or "default" for Dynamo's built-in selector`)
			}
		case "instances":
			set, yerr = y.value(val, path, reflect.ValueOf(&ws.Instances).Elem())
		default:
			if instead, ok := laterSelectionKeys[key]; ok {
				return y.fail(k, path, "is a key of Dynamo releases after the pinned commit, not of worker_selection at the pin; "+instead)
			}
			return y.unknown(k, key, "worker_selection", "worker_selection", selectionHints)
		}
		if set {
			present[path], given = true, true
			y.lines[path] = lineOf(k)
		}
		return yerr
	}); yerr != nil {
		return yerr
	}
	if !given || (ws.Default == "" && len(ws.Instances) == 0) {
		return &yamlError{line: lineOf(v), msg: "invalid router policy config: worker_selection must define an instance or a default"}
	}
	return nil
}

// selectionHints suggest the worker_selection key a mistyped one meant.
var selectionHints = NewKeyHints("default", "instances")

// unknown refuses a key that is not one of what's (in group, if any), with
// a hint when it is a slip of case or separator.
func (y *yamlReader) unknown(k ast.Node, key, group, what string, hints KeyHints) *yamlError {
	msg := "is not a key of " + what + " (Dynamo's policy_config.rs at the pinned commit)"
	if name, ok := hints.Suggest(key); ok {
		msg += " (did you mean " + strconv.Quote(name) + "?)"
	}
	path := key
	if group != "" {
		path = group + "." + key
	}
	return y.fail(k, path, msg)
}

// resolve follows an anchor to its node (recording it) and an alias to its
// anchor's; any other node is itself. An alias with no anchor before it
// resolves to itself, which every reader refuses.
func (y *yamlReader) resolve(n ast.Node) ast.Node {
	switch v := n.(type) {
	case *ast.AnchorNode:
		y.anchors[v.Name.GetToken().Value] = v.Value
		return v.Value
	case *ast.AliasNode:
		if target, ok := y.anchors[v.Value.GetToken().Value]; ok {
			return target
		}
	}
	return n
}

// mapping calls field for each key of the mapping n (at path), in order.
func (y *yamlReader) mapping(n ast.Node, path string, field func(key string, k, v ast.Node) *yamlError) *yamlError {
	n = y.resolve(n)
	m, ok := n.(*ast.MappingNode)
	if !ok {
		return y.fail(n, path, "expected a mapping, got "+describeNode(n))
	}
	for _, mv := range m.Values {
		s, ok := mv.Key.(*ast.StringNode)
		if !ok {
			what := "a key that is not a string"
			if mv.Key.Type() == ast.MergeKeyType {
				what = "a merge key (<<), which serde's YAML reader takes as an unknown key"
			}
			return y.fail(mv.Key, path, what+": give each key as a plain name")
		}
		if err := field(s.Value, mv.Key, mv.Value); err != nil {
			return err
		}
	}
	return nil
}

// value reads the node n into the config field fv, as decodeConfigValue
// reads JSON, and reports whether it set it: null (or nothing) leaves it
// unset, a list or an object by its element's schema.
func (y *yamlReader) value(n ast.Node, path string, fv reflect.Value) (bool, *yamlError) {
	n = y.resolve(n)
	if n.Type() == ast.NullType {
		return false, nil
	}
	t := fv.Type()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var x any
	switch t.Kind() {
	case reflect.Slice:
		seq, ok := n.(*ast.SequenceNode)
		if !ok {
			return false, y.fail(n, path, "expected a list, got "+describeNode(n))
		}
		list := reflect.Zero(t)
		for i, e := range seq.Values {
			at := fmt.Sprintf("%s[%d]", path, i)
			el := reflect.New(t.Elem()).Elem()
			if yerr := y.element(e, at, el); yerr != nil {
				return false, yerr
			}
			y.lines[at] = lineOf(e)
			list = reflect.Append(list, el)
		}
		fv.Set(list)
		return true, nil
	case reflect.Struct:
		return true, y.element(n, path, fv)
	case reflect.String:
		s, ok := n.(*ast.StringNode)
		if lit, isLit := n.(*ast.LiteralNode); isLit {
			s, ok = lit.Value, true
		}
		if !ok {
			msg := "expected a string, got " + describeNode(n)
			if n.Type() == ast.IntegerType || n.Type() == ast.FloatType || n.Type() == ast.BoolType {
				msg += " (quote it to give it as a name)"
			}
			return false, y.fail(n, path, msg)
		}
		x = s.Value
	case reflect.Uint64:
		v, msg := yamlU64(n)
		if msg != "" {
			return false, y.fail(n, path, msg)
		}
		x = v
	case reflect.Float64:
		v, msg := yamlFloat(n)
		if msg != "" {
			return false, y.fail(n, path, msg)
		}
		x = v
	default:
		panic("policy config field of kind " + t.Kind().String())
	}
	setField(fv, t, x)
	return true, nil
}

// element reads a mapping into the struct v by its schema (the one a JSON
// config reads it by): unknown keys refused with a hint, required ones
// checked.
func (y *yamlReader) element(n ast.Node, path string, v reflect.Value) *yamlError {
	es := elementSchemas[v.Type()]
	var given []string
	if yerr := y.mapping(n, path, func(key string, k, val ast.Node) *yamlError {
		i, ok := es.fields[key]
		if !ok {
			msg := "is not a key of " + es.what + " (Dynamo's policy_config.rs at the pinned commit; docs/PROTOCOL.md §2)"
			if name, ok := es.hints.Suggest(key); ok {
				msg += " (did you mean " + strconv.Quote(name) + "?)"
			}
			return y.fail(k, path+"."+key, msg)
		}
		set, yerr := y.value(val, path+"."+key, v.Field(i))
		if set {
			given = append(given, key)
			y.lines[path+"."+key] = lineOf(k)
		}
		return yerr
	}); yerr != nil {
		return yerr
	}
	for _, r := range es.required {
		if !slices.Contains(given, r) {
			return y.fail(n, path+"."+r, "required: "+es.what+" gives "+strings.Join(es.required, ", "))
		}
	}
	return nil
}

// yamlU64 reads an unsigned integer as serde's YAML reader does: decimal,
// or 0x, 0o, 0b; no fraction, no sign but +, no YAML 1.1 underscores. A
// plain scalar past 2^64 is one goccy takes as a string: still a number
// here, refused as too large. It returns what is wrong, or "".
func yamlU64(n ast.Node) (uint64, string) {
	const what = "expected an unsigned 64-bit integer, got "
	text, ok := plainScalar(n) // a float's text fails ParseUint below
	if !ok {
		return 0, what + describeNode(n)
	}
	digits, base := strings.TrimPrefix(text, "+"), 10 // ParseUint takes no sign
	for _, p := range []struct {
		prefix string
		base   int
	}{{"0x", 16}, {"0o", 8}, {"0b", 2}} {
		if rest, ok := strings.CutPrefix(digits, p.prefix); ok {
			digits, base = rest, p.base
		}
	}
	// With a base given, ParseUint refuses underscores.
	v, err := strconv.ParseUint(digits, base, 64)
	switch {
	case err == nil:
		return v, ""
	case errors.Is(err, strconv.ErrRange):
		return 0, what + truncate(text) + " (above 18446744073709551615)"
	}
	return 0, what + describeNode(n)
}

// yamlFloat reads a finite number (.inf and .nan are refused, as every
// config number is finite).
func yamlFloat(n ast.Node) (float64, string) {
	const what = "expected a finite number, got "
	text, ok := plainScalar(n)
	if !ok {
		return 0, what + describeNode(n)
	}
	// ParseFloat also takes Go's forms, which are not YAML numbers: hex
	// (0x1p3), inf, infinity and nan in any case, and underscores.
	v, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(v, 0) || strings.ContainsAny(text, "xXnN_") {
		return 0, what + describeNode(n)
	}
	return v, ""
}

// plainScalar is the text of an unquoted number-like scalar: an integer,
// a float, or a plain string goccy could not type (1e3, 2^64).
func plainScalar(n ast.Node) (string, bool) {
	switch v := n.(type) {
	case *ast.IntegerNode, *ast.FloatNode:
		return n.GetToken().Value, true
	case *ast.StringNode:
		return v.Value, v.Token.Type == token.StringType
	}
	return "", false
}

// describeNode says what a node is, for messages.
func describeNode(n ast.Node) string {
	switch v := n.(type) {
	case *ast.StringNode:
		if v.Token.Type == token.StringType {
			return strconv.Quote(truncate(v.Value))
		}
		return "a quoted string"
	case *ast.LiteralNode:
		return "a block string"
	case *ast.IntegerNode, *ast.FloatNode:
		return "number " + truncate(n.GetToken().Value)
	case *ast.InfinityNode, *ast.NanNode:
		return n.GetToken().Value
	case *ast.BoolNode:
		return "a boolean"
	case *ast.MappingNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.TagNode:
		return "a tagged value (" + v.Start.Value + "): give it untagged"
	case *ast.AliasNode:
		return "an alias with no anchor before it"
	}
	return n.Type().String()
}
