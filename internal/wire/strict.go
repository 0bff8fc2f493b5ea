package wire

import (
	"bytes"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Strict reading of one JSON object line for readers outside the codec
// (replay's traces, first). It is the command decoder's scanner, lent out:
// hand-written for the same reasons (scan.go). A reflection decoder such as
// goccy's wraps an integer past 2^64 to a small one, takes the last of two
// equal keys, matches "INPUT_LENGTH" to a field tagged "input_length", and
// says where a value went wrong in its own terms, not by the field's name.
// Here a u64 past 2^64 is an error, a key reaches the reader exactly as
// written (after JSON unescaping) and at most once, a string must be valid
// UTF-8, and every error names the field, with the scanner's own messages.
// Which keys a line may hold is the reader's decision: it sees every key,
// and reads, skips or refuses its value.

// ObjectError is an error of ObjectReader.Read: the line is not one JSON
// object, or the value of a field is not what its reader takes.
type ObjectError struct {
	// Code is protocol.CodeParse when the line is not one JSON object,
	// else protocol.CodeInvalidField, or the code of an ObjectError the
	// reader's callback returned.
	Code protocol.Code
	// Field is the path of the field ("hash_ids[3]"), or "" when the error
	// is about the line as a whole.
	Field string
	Msg   string
	// Err is the error the callback returned, when it was not an
	// ObjectError.
	Err error
}

func (e *ObjectError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return fmt.Sprintf("field %q: %s", e.Field, e.Msg)
}

func (e *ObjectError) Unwrap() error { return e.Err }

func objectError(e *fieldError) *ObjectError {
	return &ObjectError{Code: e.code, Field: e.path, Msg: e.msg}
}

// within names the field key as the one e is about.
func (e *ObjectError) within(key string) *ObjectError {
	fe := fieldError{code: e.Code, path: e.Field}
	e.Field = fe.within(key).path
	return e
}

// ObjectReader reads lines that each hold one JSON object. Its zero value
// is ready; reusing one for many lines saves an allocation a line.
type ObjectReader struct {
	s scanner
	v Value
}

// errStop ends the scanner's walk of an object when the callback failed.
var errStop = &fieldError{}

// Read reads line, which must hold one JSON object and nothing after it but
// blanks. It calls field for each key in the order written; field must
// consume the value, once, through v (read it, or Skip it), and returns nil
// or why the value is refused. A key given twice is refused before field
// sees it the second time. The error, an *ObjectError, names the field: a
// callback's error is about its key, so the callback returns a Value's
// error as it is, or its own message ("expected one of ..."), which Read
// prefixes with the key. The callback must not use r itself.
func (r *ObjectReader) Read(line []byte, field func(key string, v *Value) error) error {
	r.s = scanner{b: line}
	defer func() { r.s.b, r.v = nil, Value{} }() // keep no line alive
	var failed *ObjectError
	err := r.s.object(func(key string) *fieldError {
		r.v = Value{s: &r.s}
		cbErr := field(key, &r.v)
		switch {
		case cbErr != nil:
			if oe, ok := cbErr.(*ObjectError); ok {
				failed = oe.within(key)
			} else {
				failed = &ObjectError{Code: protocol.CodeInvalidField, Field: key, Msg: cbErr.Error(), Err: cbErr}
			}
		case r.v.err != nil: // a failed read ends the line, even if the reader goes on
			failed = r.v.err.within(key)
		case !r.v.done:
			failed = &ObjectError{Code: protocol.CodeInvalidField, Field: key,
				Msg: "the reader neither read nor skipped the value (a bug of the reader, not of the line)"}
		default:
			return nil
		}
		return errStop
	})
	switch {
	case err == errStop:
	case err != nil:
		failed = objectError(err)
	case !r.s.atEnd():
		failed = objectError(r.s.syntax("unexpected data after the object"))
	default:
		return nil
	}
	// As Decode does: a line that is not JSON is a parse error, whatever
	// was read first; when what was read first is not where it breaks, the
	// error says where it does.
	if failed.Code != protocol.CodeParse {
		if at, ok := breaksAt(line); !ok {
			if r.s.i < at {
				return &ObjectError{Code: protocol.CodeParse, Msg: fmt.Sprintf("the line is not JSON: it breaks at byte %d", at)}
			}
			failed.Code = protocol.CodeParse
		}
	}
	return failed
}

// breaksAt reports whether line is one JSON object (whose strings may be
// invalid UTF-8 and whose keys may repeat: wrong values, not broken JSON),
// and if not, the byte at which it stops being one.
func breaksAt(line []byte) (int, bool) {
	s := scanner{b: line, allowRepeats: true}
	ok := s.peek() == '{' && s.skip() && s.atEnd()
	return s.i, ok
}

// Value is the value of one key, at the reader's cursor. It is read once:
// branch on Kind (or Null) first, then read it with the method for its
// type. A method that fails leaves the line failed whatever the callback
// returns.
type Value struct {
	s    *scanner
	done bool
	err  *ObjectError
}

// Kind is the JSON type of a value, as its first byte tells.
type Kind uint8

// Kinds. KindInvalid is the end of the line or a byte no JSON value starts
// with.
const (
	KindInvalid Kind = iota
	KindNull
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

// Kind tells the type of the value without reading it. It says what the
// value starts as: a KindNumber may still not be a valid JSON number.
func (v *Value) Kind() Kind {
	switch c := v.s.peek(); {
	case v.s.atEnd():
		return KindInvalid
	case c == '"':
		return KindString
	case c == '{':
		return KindObject
	case c == '[':
		return KindArray
	case c == '-' || (c >= '0' && c <= '9'):
		return KindNumber
	case v.s.literal("null"):
		return KindNull
	case v.s.literal("true") || v.s.literal("false"):
		return KindBool
	}
	return KindInvalid
}

// Null reads the value if it is null and reports whether it was.
func (v *Value) Null() bool {
	if v.done || !v.s.null() {
		return false
	}
	v.done = true
	return true
}

// take marks the value read; reading it twice is the reader's bug.
func (v *Value) take() *ObjectError {
	if v.done {
		v.err = &ObjectError{Code: protocol.CodeInvalidField, Msg: "the value was read twice (a bug of the reader, not of the line)"}
		return v.err
	}
	v.done = true
	return nil
}

// fail records err as the value's outcome and returns it as an error (nil
// for nil, not a typed nil).
func (v *Value) fail(err *fieldError) error {
	if err == nil {
		return nil
	}
	v.err = objectError(err)
	return v.err
}

// U64 reads an unsigned 64-bit integer written as plain digits: one past
// 2^64-1 is an error, as is a fraction or an exponent.
func (v *Value) U64() (uint64, error) {
	if err := v.take(); err != nil {
		return 0, err
	}
	x, err := v.s.u64()
	return x, v.fail(err)
}

// Int64 reads a signed 64-bit integer.
func (v *Value) Int64() (int64, error) {
	if err := v.take(); err != nil {
		return 0, err
	}
	x, err := v.s.int64()
	return x, v.fail(err)
}

// Float reads a finite number.
func (v *Value) Float() (float64, error) {
	if err := v.take(); err != nil {
		return 0, err
	}
	x, err := v.s.float()
	return x, v.fail(err)
}

// Str reads a string, unescaped; its bytes must be valid UTF-8. (Not
// named String: a String method that is not fmt.Stringer's would mislead
// every %v.)
func (v *Value) Str() (string, error) {
	if err := v.take(); err != nil {
		return "", err
	}
	x, err := v.s.str()
	return x, v.fail(err)
}

// Number reads a JSON number and returns it as written, checked against
// the JSON grammar: for a value kept as text (an id's digits), whatever its
// size.
func (v *Value) Number() (string, error) {
	if err := v.take(); err != nil {
		return "", err
	}
	tok, _, err := v.s.number("a number")
	return tok, v.fail(err)
}

// AppendU64s reads an array of unsigned 64-bit integers (U64's rules for
// each) and appends them to dst, of any type of uint64: a long array costs
// one allocation, sized by a look ahead for the array's end, and none per
// element. An error names the element ("[3]").
func AppendU64s[T ~uint64](v *Value, dst []T) ([]T, error) {
	if err := v.take(); err != nil {
		return dst, err
	}
	s := v.s
	if s.peek() == '[' {
		rest := s.b[s.i+1:]
		if end := bytes.IndexByte(rest, ']'); end >= 0 && len(bytes.TrimLeft(rest[:end], " \t\r\n")) > 0 {
			dst = slices.Grow(dst, bytes.Count(rest[:end], []byte{','})+1)
		}
	}
	err := s.array(func(int) *fieldError {
		x, err := s.u64()
		dst = append(dst, T(x))
		return err
	})
	return dst, v.fail(err)
}

// Raw reads any JSON value and returns its text as written. Its strings
// must be valid UTF-8; nothing inside it is interpreted (an object inside
// it may repeat a key). Nesting is followed on an explicit stack, so depth
// cannot hurt.
func (v *Value) Raw() ([]byte, error) {
	if err := v.take(); err != nil {
		return nil, err
	}
	s := v.s
	s.peek()
	start := s.i
	if !s.skip() {
		if s.i == start {
			return nil, v.fail(s.expected("a JSON value"))
		}
		return nil, v.fail(&fieldError{code: protocol.CodeParse, msg: fmt.Sprintf("the value is not JSON: it breaks at byte %d", s.i)})
	}
	raw := s.b[start:s.i]
	// Outside strings JSON is ASCII, and escapes are: the bytes are valid
	// UTF-8 exactly when every string in the value is.
	if !utf8.Valid(raw) {
		return nil, v.fail(notUTF8())
	}
	return raw, nil
}

// Skip reads any JSON value and drops it, as Raw does.
func (v *Value) Skip() error {
	_, err := v.Raw()
	return err
}

// Expected returns an error saying that the value is not what the field
// takes, in the scanner's words: "expected what, got a boolean". It reads
// nothing; it is for a field that takes one of several types, which the
// reader tells apart with Kind.
func (v *Value) Expected(what string) error {
	return objectError(v.s.expected(what))
}

// Object reads an object value as Read reads a line's: field is called for
// each key in the order written, must consume the value once, and returns
// nil or why it is refused; an error's path runs from the value's key down
// ("requests[2].hash_ids[0]"). It is for the nested records of the
// agentic trace formats.
func (v *Value) Object(field func(key string, v *Value) error) error {
	if err := v.take(); err != nil {
		return err
	}
	stop, failed := &fieldError{}, (*ObjectError)(nil)
	err := v.s.object(func(key string) *fieldError {
		if failed = member(v.s, key, -1, func(in *Value) error { return field(key, in) }); failed != nil {
			return stop
		}
		return nil
	})
	return v.nested(err, stop, failed)
}

// Array reads an array value, calling elem for each element with its
// index; elem must consume it once. An error names the element ("[3]"),
// and the path inside it.
func (v *Value) Array(elem func(i int, v *Value) error) error {
	if err := v.take(); err != nil {
		return err
	}
	stop, failed := &fieldError{}, (*ObjectError)(nil)
	err := v.s.array(func(i int) *fieldError {
		if failed = member(v.s, "", i, func(in *Value) error { return elem(i, in) }); failed != nil {
			return stop
		}
		return nil
	})
	return v.nested(err, stop, failed)
}

// member reads one member of a nested value through read, and returns its
// error, if any, named by key, or for an array's element ("" key) by its
// index (formatted only then: most elements are read without one): as
// Read checks a line's members.
func member(s *scanner, key string, index int, read func(*Value) error) *ObjectError {
	in := Value{s: s}
	cbErr := read(&in)
	if (cbErr != nil || in.err != nil || !in.done) && key == "" {
		key = fmt.Sprintf("[%d]", index)
	}
	switch {
	case cbErr != nil:
		if oe, ok := cbErr.(*ObjectError); ok {
			return oe.within(key)
		}
		return &ObjectError{Code: protocol.CodeInvalidField, Field: key, Msg: cbErr.Error(), Err: cbErr}
	case in.err != nil:
		return in.err.within(key)
	case !in.done:
		return &ObjectError{Code: protocol.CodeInvalidField, Field: key,
			Msg: "the reader neither read nor skipped the value (a bug of the reader, not of the line)"}
	}
	return nil
}

// nested is the outcome of a nested read: the member's error (the walk
// was stopped for it), or the scanner's.
func (v *Value) nested(err, stop *fieldError, failed *ObjectError) error {
	if err == stop {
		v.err = failed
		return failed
	}
	return v.fail(err)
}
