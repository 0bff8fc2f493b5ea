package wire

import (
	"fmt"

	"github.com/goccy/go-yaml/ast"
)

// YAMLTree is one YAML document read strictly, for a reader that walks its
// nodes by a schema of its own, as the router policy config's walk does
// (policy_config.go says why the walk is written here): goccy parses, and
// the walk refuses what a strict reader would. Anchors and aliases resolve
// to the one node an anchor holds, so a walk stays linear in the file.
type YAMLTree struct {
	r    yamlReader
	Root ast.Node // the document's body; nil when it is empty
}

// LineError is what is wrong at a line of a file (0: the file as a whole).
type LineError struct {
	Line int
	Msg  string
}

func (e *LineError) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// ReadYAMLTree parses data, one document; needs says how deep its schema
// nests, what the file is, for the messages.
func ReadYAMLTree(data []byte, needs, what string) (*YAMLTree, error) {
	t := &YAMLTree{r: yamlReader{anchors: map[string]ast.Node{}, lines: map[string]int{}}}
	root, yerr := t.r.document(data, needs, what)
	if yerr != nil {
		return nil, lineError(yerr)
	}
	if root != nil && root.Type() == ast.NullType {
		root = nil
	}
	t.Root = root
	return t, nil
}

func lineError(e *yamlError) *LineError { return &LineError{Line: e.line, Msg: e.msg} }

// Fail is an error about the value n at path.
func (t *YAMLTree) Fail(n ast.Node, path, msg string) error { return lineError(t.r.fail(n, path, msg)) }

// Mapping calls field for each key of the mapping n (at path), in order,
// until one fails; an error that is no LineError is placed at the key.
func (t *YAMLTree) Mapping(n ast.Node, path string, field func(key string, k, v ast.Node) error) error {
	if yerr := t.r.mapping(n, path, func(key string, k, v ast.Node) *yamlError {
		err := field(key, k, v)
		switch e := err.(type) {
		case nil:
			return nil
		case *LineError:
			return &yamlError{line: e.Line, msg: e.Msg}
		default:
			return &yamlError{line: lineOf(k), msg: err.Error()}
		}
	}); yerr != nil {
		return lineError(yerr)
	}
	return nil
}

// List is the elements of the list n at path.
func (t *YAMLTree) List(n ast.Node, path string) ([]ast.Node, error) {
	n = t.r.resolve(n)
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		return nil, t.Fail(n, path, "expected a list, got "+describeNode(n))
	}
	out := make([]ast.Node, len(seq.Values))
	for i, v := range seq.Values {
		out[i] = t.r.resolve(v)
	}
	return out, nil
}

// U64 is the unsigned integer n at path.
func (t *YAMLTree) U64(n ast.Node, path string) (uint64, error) {
	n = t.r.resolve(n)
	v, msg := yamlU64(n)
	if msg != "" {
		return 0, t.Fail(n, path, msg)
	}
	return v, nil
}

// Float is the finite number n at path.
func (t *YAMLTree) Float(n ast.Node, path string) (float64, error) {
	n = t.r.resolve(n)
	v, msg := yamlFloat(n)
	if msg != "" {
		return 0, t.Fail(n, path, msg)
	}
	return v, nil
}

// String is the string n at path: a number or a boolean is not one.
func (t *YAMLTree) String(n ast.Node, path string) (string, error) {
	n = t.r.resolve(n)
	s, ok := n.(*ast.StringNode)
	if !ok {
		return "", t.Fail(n, path, "expected a string, got "+describeNode(n))
	}
	return s.Value, nil
}

// Line is n's line.
func (t *YAMLTree) Line(n ast.Node) int { return lineOf(n) }

// IsString reports whether n is a string (quoted or not), not a number.
func (t *YAMLTree) IsString(n ast.Node) bool {
	_, ok := t.r.resolve(n).(*ast.StringNode)
	return ok
}
