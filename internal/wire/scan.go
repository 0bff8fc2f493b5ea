package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/offline-router/offline-router/internal/protocol"
)

// scanner is a strict pull decoder over one JSON line. It exists because the
// protocol needs what a reflection decoder does not give: u64 values that
// fail on overflow instead of wrapping, keys matched exactly and at most once,
// and errors that name the full path of the offending field. It never
// recurses on input it does not expect, so deep nesting cannot hurt it.
type scanner struct {
	b []byte
	i int
	// allowRepeats accepts a key twice; only header recovery wants that.
	allowRepeats bool
}

func (s *scanner) peek() byte {
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return c
		}
	}
	return 0
}

// atEnd reports whether only blanks are left. A NUL byte is not the end:
// it is data, and JSON refuses it.
func (s *scanner) atEnd() bool {
	s.peek()
	return s.i >= len(s.b)
}

func (s *scanner) syntax(format string, args ...any) *fieldError {
	return &fieldError{code: protocol.CodeParse, msg: fmt.Sprintf(format, args...) + fmt.Sprintf(" at byte %d", s.i)}
}

// expected reports that the value at the cursor is not what the field takes.
func (s *scanner) expected(what string) *fieldError {
	code := protocol.CodeInvalidField
	if s.atEnd() || s.b[s.i] == 0 { // a line cut short, or a NUL byte, is not JSON at all
		code = protocol.CodeParse
	}
	return &fieldError{code: code, msg: "expected " + what + ", got " + s.describe()}
}

func (s *scanner) describe() string {
	switch c := s.peek(); {
	case s.atEnd():
		return "end of line"
	case c == '"':
		return "a string"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case s.literal("true") || s.literal("false"):
		return "a boolean"
	case s.literal("null"):
		return "null"
	case c == '-' || (c >= '0' && c <= '9'):
		tok := s.b[s.i:s.numberEnd()]
		return "number " + truncate(string(tok))
	default:
		end := s.i
		for end < len(s.b) && end-s.i < 16 && s.b[end] != ',' && s.b[end] != '}' && s.b[end] != ']' {
			end++
		}
		return strconv.Quote(string(s.b[s.i:end])) + " (not JSON)"
	}
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// literal reports whether the literal lit is next.
func (s *scanner) literal(lit string) bool {
	s.peek()
	return len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit
}

// null consumes a null literal if one is next.
func (s *scanner) null() bool {
	if s.literal("null") {
		s.i += 4
		return true
	}
	return false
}

// optString reads a string into dst, or leaves dst as it is for null (an
// optional string, Rust's Option<String>).
func (s *scanner) optString(dst *string) *fieldError {
	if s.null() {
		return nil
	}
	v, err := s.str()
	*dst = v
	return err
}

// object reads an object, calling field for each key; field consumes the
// value. Repeated keys are an error: the protocol has no "last one wins".
func (s *scanner) object(field func(key string) *fieldError) *fieldError {
	if empty, err := s.enter('{', '}', "an object"); empty || err != nil {
		return err
	}
	return s.members(field)
}

// afterMember goes on reading an object whose member value the cursor has
// just passed: the rest of its members, to its closing brace.
func (s *scanner) afterMember(field func(key string) *fieldError) *fieldError {
	switch s.peek() {
	case ',':
		s.i++
		return s.members(field)
	case '}':
		s.i++
		return nil
	}
	return s.syntax("expected ',' or '}' after a value")
}

// members reads an object's members from the cursor, at a key, to its
// closing brace.
func (s *scanner) members(field func(key string) *fieldError) *fieldError {
	var room [16]string // on the stack: objects of the protocol have fewer keys
	seen := room[:0]
	var many map[string]bool // past len(room): an object of unknown keys (a trace line may carry any)
	for {
		if s.peek() != '"' {
			return s.syntax("expected a quoted key")
		}
		key, err := s.key()
		switch {
		case err == nil:
		case err.code != protocol.CodeInvalidField:
			return err // a broken string
		case !s.allowRepeats:
			return &fieldError{code: protocol.CodeInvalidField, msg: keyNotUTF8(err)}
		default:
			key = "" // header recovery reads on past a key it cannot name
		}
		// Header recovery takes any keys, however many: it keeps none. A
		// command has the protocol's few keys, looked through in a row; an
		// object whose unknown keys are skipped (a trace line) may have any
		// number, which a set keeps linear.
		if !s.allowRepeats {
			switch {
			case many != nil:
				if many[key] {
					return &fieldError{code: protocol.CodeInvalidField, path: key, msg: "appears more than once"}
				}
				many[key] = true
			case slices.Contains(seen, key):
				return &fieldError{code: protocol.CodeInvalidField, path: key, msg: "appears more than once"}
			case len(seen) == len(room):
				many = make(map[string]bool, 2*len(room))
				for _, k := range seen {
					many[k] = true
				}
				many[key] = true
			default:
				seen = append(seen, key)
			}
		}
		if s.peek() != ':' {
			return s.syntax("expected ':' after key %q", key)
		}
		s.i++
		if err := field(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.syntax("expected ',' or '}' after the value of %q", key)
		}
	}
}

// enter consumes the opening of a container (what names it in the error if
// something else is there), and the closing too if it is empty.
func (s *scanner) enter(open, close byte, what string) (empty bool, err *fieldError) {
	if s.peek() != open {
		return false, s.expected(what)
	}
	s.i++
	if s.peek() == close {
		s.i++
		return true, nil
	}
	return false, nil
}

// array reads an array, calling elem for each element with its index.
func (s *scanner) array(elem func(i int) *fieldError) *fieldError {
	if empty, err := s.enter('[', ']', "an array"); empty || err != nil {
		return err
	}
	for n := 0; ; n++ {
		if err := elem(n); err != nil {
			return err.within(fmt.Sprintf("[%d]", n))
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.syntax("expected ',' or ']' in array")
		}
	}
}

// numberEnd returns the end of the number-like token at the cursor.
func (s *scanner) numberEnd() int {
	j := s.i
	for j < len(s.b) {
		c := s.b[j]
		if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			j++
			continue
		}
		break
	}
	return j
}

// number returns the JSON number token at the cursor, checked against the
// JSON grammar, and whether it is a plain non-negative integer.
func (s *scanner) number(what string) (tok string, integer bool, err *fieldError) {
	c := s.peek()
	if c != '-' && (c < '0' || c > '9') {
		return "", false, s.expected(what)
	}
	end := s.numberEnd()
	tok = string(s.b[s.i:end])
	if !validNumber(tok) {
		return "", false, &fieldError{code: protocol.CodeInvalidField, msg: "expected " + what + ", got " + strconv.Quote(truncate(tok)) + " (not a JSON number)"}
	}
	s.i = end
	integer = true
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			integer = false
		}
	}
	return tok, integer, nil
}

func validNumber[S string | []byte](t S) bool {
	i := 0
	if i < len(t) && t[i] == '-' {
		i++
	}
	start := i
	if i = digits(t, i); i == start || (t[start] == '0' && i-start > 1) {
		return false
	}
	if i < len(t) && t[i] == '.' {
		if j := digits(t, i+1); j > i+1 {
			i = j
		} else {
			return false
		}
	}
	if i < len(t) && (t[i] == 'e' || t[i] == 'E') {
		i++
		if i < len(t) && (t[i] == '+' || t[i] == '-') {
			i++
		}
		if j := digits(t, i); j > i {
			i = j
		} else {
			return false
		}
	}
	return i == len(t)
}

// digits returns the index after the run of decimal digits at t[i:].
func digits[S string | []byte](t S, i int) int {
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	return i
}

// uint reads a non-negative integer no larger than max. Fractions and
// exponents are refused even when they denote an integer: hashes and counts
// are written as plain digits, and anything else is a host bug worth seeing.
// Plain digits, the common case, are parsed in place without allocating.
func (s *scanner) uint(max uint64, what string) (uint64, *fieldError) {
	s.peek()
	if v, n, ok := plainUint(s.b[s.i:]); ok && v <= max {
		s.i += n
		return v, nil
	}
	tok, integer, err := s.number(what)
	if err != nil {
		return 0, err
	}
	if !integer {
		return 0, &fieldError{code: protocol.CodeInvalidField, msg: "expected " + what + ", got " + truncate(tok)}
	}
	return 0, &fieldError{code: protocol.CodeInvalidField, msg: fmt.Sprintf("expected %s, got %s (above %d)", what, truncate(tok), max)}
}

// plainUint parses a JSON integer of plain digits at the start of b (no
// sign, fraction or exponent, no leading zero) that fits in a uint64, and
// returns its value and length. Hashes are 19 or 20 digits: it takes eight
// digits at a time where eight bytes are there to read.
func plainUint(b []byte) (v uint64, n int, ok bool) {
	for n+8 <= len(b) {
		chunk := binary.LittleEndian.Uint64(b[n:])
		k := leadingDigits(chunk)
		if k == 0 {
			break
		}
		if n+k > 19 { // a 20th digit may overflow: the careful loop below
			break
		}
		v = v*pow10[k] + eightDigits(chunk<<(8*(8-k))|asciiZeros>>(8*k))
		n += k
		if k < 8 {
			return finishUint(b, v, n)
		}
	}
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		d := uint64(b[n] - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, 0, false // overflow: let the slow path say so
		}
		v = v*10 + d
		n++
	}
	return finishUint(b, v, n)
}

// finishUint checks what ends the digits of plainUint.
func finishUint(b []byte, v uint64, n int) (uint64, int, bool) {
	if n == 0 || (n > 1 && b[0] == '0') {
		return 0, 0, false
	}
	if n < len(b) {
		switch b[n] {
		case '.', 'e', 'E', '-', '+':
			return 0, 0, false
		}
	}
	return v, n, true
}

const asciiZeros = 0x3030303030303030 // eight '0's

var pow10 = [9]uint64{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000}

// leadingDigits is how many of the eight bytes of chunk (the first in its
// low byte) are ASCII digits before the first that is not.
func leadingDigits(chunk uint64) int {
	// A byte is a digit when its high nibble is 3 and adding 6 to it does
	// not carry into the high nibble (0x30-0x39).
	// A carry out of a byte comes only from a byte above 0xF9, itself no
	// digit, and only into the bytes after it, which are not counted.
	nonDigit := ((chunk & 0xF0F0F0F0F0F0F0F0) ^ asciiZeros) | (((chunk + 0x0606060606060606) & 0xF0F0F0F0F0F0F0F0) ^ asciiZeros)
	return bits.TrailingZeros64(nonDigit) / 8
}

// eightDigits is the value of the eight ASCII digits of chunk, the first in
// its low byte: pairs, then fours, then the eight, combined in place.
func eightDigits(chunk uint64) uint64 {
	chunk -= asciiZeros
	chunk = (chunk*10 + chunk>>8) & 0x00FF00FF00FF00FF
	chunk = (chunk*100 + chunk>>16) & 0x0000FFFF0000FFFF
	return (chunk*10000 + chunk>>32) & 0xFFFFFFFF
}

func (s *scanner) u64() (uint64, *fieldError) {
	return s.uint(math.MaxUint64, "an unsigned 64-bit integer")
}

func (s *scanner) u32() (uint32, *fieldError) {
	v, err := s.uint(math.MaxUint32, "an unsigned 32-bit integer")
	return uint32(v), err
}

// int64 reads a signed integer.
func (s *scanner) int64() (int64, *fieldError) {
	tok, _, err := s.number("an integer")
	if err != nil {
		return 0, err
	}
	v, perr := strconv.ParseInt(tok, 10, 64)
	if perr != nil {
		return 0, &fieldError{code: protocol.CodeInvalidField, msg: "expected a 64-bit integer, got " + truncate(tok)}
	}
	return v, nil
}

// float reads a finite number.
func (s *scanner) float() (float64, *fieldError) {
	tok, _, err := s.number("a number")
	if err != nil {
		return 0, err
	}
	v, perr := strconv.ParseFloat(tok, 64)
	if perr != nil || math.IsInf(v, 0) {
		return 0, &fieldError{code: protocol.CodeInvalidField, msg: "expected a finite number, got " + truncate(tok) + " (out of range)"}
	}
	return v, nil
}

// boolean reads true or false.
func (s *scanner) boolean() (bool, *fieldError) {
	switch {
	case s.literal("true"):
		s.i += 4
		return true, nil
	case s.literal("false"):
		s.i += 5
		return false, nil
	}
	return false, s.expected("true or false")
}

// str reads a string value.
func (s *scanner) str() (string, *fieldError) {
	if s.peek() != '"' {
		return "", s.expected("a string")
	}
	return s.rawString()
}

// key reads the object key at the cursor. A key the protocol defines comes
// back as that constant rather than a new string: a stored event repeats two
// keys per block, and a string per key was most of what decoding allocated.
func (s *scanner) key() (string, *fieldError) {
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		if s.b[j] == '\\' || s.b[j] < 0x20 {
			break // an escape, or a control character: rawString reads it, or says where the line breaks
		}
		if s.b[j] == '"' {
			if s.allowRepeats { // header recovery looks for op and id only
				s.i = j + 1
				switch string(s.b[start:j]) {
				case "op":
					return "op", nil
				case "id":
					return "id", nil
				}
				return "", nil
			}
			// The lookup allocates nothing (keys.go); no protocol key holds
			// an escape, so a raw match is the key itself.
			if k, ok := lookupKey(s.b[start:j]); ok {
				s.i = j + 1
				return k.name, nil
			}
			break
		}
	}
	return s.rawString()
}

// rawString reads the string at the cursor, unescaping it and refusing
// invalid UTF-8 and lone surrogate escapes, so that every string read is
// what the host wrote and everything echoed back is valid JSON. Every
// string a line holds is read here (keys and values, of commands, events,
// config and trace lines): a field added later is refused the same way.
func (s *scanner) rawString() (string, *fieldError) {
	start := s.i + 1
	j := start
	for j < len(s.b) {
		c := s.b[j]
		if c == '"' {
			raw := s.b[start:j]
			s.i = j + 1 // well formed either way: header recovery skips it
			if !utf8.Valid(raw) {
				return "", notUTF8()
			}
			return string(raw), nil
		}
		if c == '\\' {
			return s.escapedString(start)
		}
		if c < 0x20 {
			return "", s.syntax("control character in string")
		}
		j++
	}
	s.i = j
	return "", s.syntax("unterminated string")
}

func (s *scanner) escapedString(start int) (string, *fieldError) {
	out := make([]byte, 0, 32)
	lone := false // a lone surrogate escape: refused once the string is read to its end, as invalid UTF-8 is
	j := start
	for j < len(s.b) {
		c := s.b[j]
		switch {
		case c == '"':
			s.i = j + 1
			switch {
			case lone:
				return "", loneSurrogate()
			case !utf8.Valid(out):
				return "", notUTF8()
			}
			return string(out), nil
		case c < 0x20:
			s.i = j
			return "", s.syntax("control character in string")
		case c != '\\':
			out = append(out, c)
			j++
			continue
		}
		if j+1 >= len(s.b) {
			break
		}
		e := s.b[j+1]
		j += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(s.b, j)
			if !ok {
				s.i = j
				return "", s.syntax("bad \\u escape")
			}
			j += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if j+6 <= len(s.b) && s.b[j] == '\\' && s.b[j+1] == 'u' {
					r2, ok = hex4(s.b, j+2)
				}
				// Decoded as U+FFFD (as encoding/json does), two ids that
				// differ only there would be one, and an answer would name
				// an id the host never sent.
				if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
					r = dec
					j += 6
				} else {
					lone = true
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			s.i = j - 1
			return "", s.syntax("bad escape \\%c", e)
		}
	}
	s.i = j
	return "", s.syntax("unterminated string")
}

// notUTF8 is a well-formed string whose bytes are not UTF-8: a wrong value
// (invalid_field), not broken JSON; it and loneSurrogate are the only such
// errors a string read gives.
func notUTF8() *fieldError {
	return &fieldError{code: protocol.CodeInvalidField, msg: "expected a string of valid UTF-8"}
}

const loneSurrogateMsg = `expected a string of valid UTF-8, got a lone surrogate escape (one of \ud800 to \udfff without its pair)`

// loneSurrogate is a well-formed string holding a surrogate escape
// without its pair, which stands for no character: as notUTF8.
func loneSurrogate() *fieldError {
	return &fieldError{code: protocol.CodeInvalidField, msg: loneSurrogateMsg}
}

// keyNotUTF8 is the message for a key whose string read failed with err,
// which notUTF8 or loneSurrogate made.
func keyNotUTF8(err *fieldError) string {
	if err.msg == loneSurrogateMsg {
		return "a key is not valid UTF-8: it holds a lone surrogate escape (one of \\ud800 to \\udfff without its pair)"
	}
	return "a key is not valid UTF-8"
}

func hex4(b []byte, j int) (rune, bool) {
	if j+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[j:j+4]), 16, 32)
	return rune(v), err == nil
}

// skip consumes any JSON value without building it, tracking nesting on an
// explicit stack rather than by recursion. It is used only to recover op and
// id from a line whose fields are wrong.
func (s *scanner) skip() bool {
	var open []byte // '{' or '[' for each container entered
	for {
		if c := s.peek(); c == '{' || c == '[' {
			s.i++
			if n := s.peek(); (c == '{' && n == '}') || (c == '[' && n == ']') {
				s.i++
			} else {
				open = append(open, c)
				if c == '{' && !s.skipKey() {
					return false
				}
				continue
			}
		} else if !s.skipScalar() {
			return false
		}
		for closed := true; closed; {
			if len(open) == 0 {
				return true
			}
			top := open[len(open)-1]
			switch c := s.peek(); {
			case c == ',':
				s.i++
				if top == '{' && !s.skipKey() {
					return false
				}
				closed = false
			case (c == '}' && top == '{') || (c == ']' && top == '['):
				s.i++
				open = open[:len(open)-1]
			default:
				return false
			}
		}
	}
}

// skipScalar moves past a string, number or literal, making nothing of it:
// header recovery reads every value of a refused line, which must cost no
// more than reading a good one.
func (s *scanner) skipScalar() bool {
	switch c := s.peek(); {
	case c == '"':
		return s.skipString()
	case c == '-' || (c >= '0' && c <= '9'):
		end := s.numberEnd()
		if !validNumber(s.b[s.i:end]) {
			return false
		}
		s.i = end
		return true
	}
	for _, lit := range []string{"true", "false", "null"} {
		if s.literal(lit) {
			s.i += len(lit)
			return true
		}
	}
	return false
}

func (s *scanner) skipKey() bool {
	if s.peek() != '"' || !s.skipString() || s.peek() != ':' {
		return false
	}
	s.i++
	return true
}

// skipString moves past the string at the cursor and reports whether it
// is one (not UTF-8 is still a string: a wrong value, not broken JSON).
// Plain strings are passed over in place; anything else goes through
// rawString, which says where it breaks.
func (s *scanner) skipString() bool {
	for j := s.i + 1; j < len(s.b); j++ {
		if c := s.b[j]; c == '"' {
			s.i = j + 1
			return true
		} else if c == '\\' || c < 0x20 {
			break
		}
	}
	_, err := s.rawString()
	return err == nil || err.code == protocol.CodeInvalidField
}
