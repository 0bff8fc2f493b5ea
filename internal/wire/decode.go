package wire

import (
	"fmt"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Decoded is the outcome of decoding one line: the command, or an error with
// as much of op and id as could be recovered for the response.
type Decoded struct {
	Cmd protocol.Command
	Op  *string // nil when the line could not be read
	ID  []byte
	Err *protocol.Error
}

// errConfigOp stops Decode when op is "config", whose keys are not command
// fields: the line goes to decodeConfigCommand.
var errConfigOp = &fieldError{}

// Decode parses and validates one command line. Only what can be checked
// without engine state is checked here.
func Decode(line []byte, out *Decoded) {
	*out = Decoded{}
	s := scanner{b: line}
	c := &out.Cmd
	var opSeen bool
	var opText string
	// Where the value being read starts, and whether the read failed there:
	// header recovery then goes on from that value instead of reading the
	// line again from its start.
	valueAt, inValue := -1, false
	var opKey, idKey bool // met before the failure, readable or not
	if s.peek() != '{' {
		out.Err = protocol.Errorf(protocol.CodeParse, "a command line must be a JSON object, got %s", s.describe())
		return
	}
	err := s.object(func(key string) *fieldError {
		valueAt = s.i
		opKey, idKey = opKey || key == "op", idKey || key == "id"
		err := decodeMember(&s, c, key, &opText, &opSeen)
		inValue = err != nil
		return err
	})
	if err == nil && !s.atEnd() {
		err = s.syntax("unexpected data after the object")
		inValue = false
	}
	if err != nil {
		var readable bool
		var breaksAt int
		if inValue && err != errConfigOp {
			h := header{opSeen: opKey, idSeen: idKey, id: c.ID}
			if opSeen {
				h.op = &opText
			}
			readable, breaksAt = h.recoverFrom(line, valueAt, out)
		} else {
			readable, breaksAt = recoverHeader(line, out)
		}
		notJSON := func(err *fieldError, at int) *protocol.Error {
			switch {
			case readable:
			case at < breaksAt: // what was read first is not what breaks the line
				err = &fieldError{code: protocol.CodeParse, msg: fmt.Sprintf("the line is not JSON: it breaks at byte %d", breaksAt)}
			default: // the wrong value is where the line breaks: name its field
				err.code = protocol.CodeParse
			}
			return err.wire()
		}
		if err == errConfigOp || (out.Op != nil && *out.Op == string(protocol.OpConfig)) {
			if err, at := decodeConfigCommand(line, out); err != nil {
				out.Err = notJSON(err, at) // in its own words: "is not a config key"
			}
			return
		}
		if !readable {
			out.Op, out.ID, out.Err = nil, nil, notJSON(err, s.i)
			return
		}
		if (err.code == protocol.CodeInvalidField || err.code == protocol.CodeUnknownField) && out.Op != nil {
			op := protocol.Op(*out.Op)
			if !protocol.OpKnown(op) { // the op decides first what fields mean
				out.Err = (&protocol.Command{Op: op}).Validate()
				return
			}
			err = notTakenFirst(op, err)
		}
		out.Err = err.wire()
		return
	}
	if c.ID != nil {
		out.ID = c.ID
	}
	if !opSeen {
		out.Err = protocol.Errorf(protocol.CodeInvalidField, `field "op": required`)
		return
	}
	out.Op = &opText
	c.Op = protocol.Op(opText)
	out.Err = c.Validate()
}

// decodeMember reads the value of one top-level key into c (op into
// opText, and opSeen when it is a string).
func decodeMember(s *scanner, c *protocol.Command, key string, opText *string, opSeen *bool) *fieldError {
	if key == "op" {
		v, err := s.str()
		*opText, *opSeen = v, err == nil
		if v == string(protocol.OpConfig) {
			return errConfigOp
		}
		return err.orNil("op")
	}
	f, ok := fieldOf(key)
	if !ok {
		return &fieldError{code: protocol.CodeUnknownField, path: key, msg: "is not a protocol field" + suggest(key)}
	}
	if s.null() {
		return nil
	}
	if err := decodeField(s, c, f); err != nil {
		return err.within(key)
	}
	if msg := protocol.CheckValue(c, f); msg != "" {
		return &fieldError{code: protocol.CodeInvalidField, path: key, msg: msg}
	}
	return nil
}

// notTakenFirst turns a bad value of a field the op does not take into
// that field's unknown_field: what the field holds does not matter.
func notTakenFirst(op protocol.Op, err *fieldError) *fieldError {
	top := err.path
	if i := strings.IndexAny(top, ".["); i >= 0 {
		top = top[:i]
	}
	f, ok := fieldOf(top)
	if !ok || protocol.Takes(op, f) {
		return err
	}
	return &fieldError{code: protocol.CodeUnknownField, path: top, msg: fmt.Sprintf("is not a field of op %q", op)}
}

func (e *fieldError) orNil(key string) *fieldError {
	if e == nil {
		return nil
	}
	return e.within(key)
}

// suggest names a protocol field that differs from key only in case or
// separators, the usual slip of a hand-written host.
func suggest(key string) string {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	for _, name := range append([]string{"op"}, protocol.FieldNames[:]...) {
		if norm(key) == name {
			return fmt.Sprintf(" (did you mean %q?)", name)
		}
	}
	return ""
}

// recoverHeader fills op and id from a line that failed, when its top level
// is a readable object, so the error response can still echo them, and
// reports whether it is, or else the byte at which it stops being JSON (a
// string that is not UTF-8 is JSON here: a wrong value, which the error
// names).
func recoverHeader(line []byte, out *Decoded) (readable bool, breaksAt int) {
	s := scanner{b: line, allowRepeats: true}
	var h header
	ok := s.object(h.member(&s, line)) == nil && s.atEnd()
	if ok {
		out.Op, out.ID = h.op, h.id
	}
	return ok, s.i
}

// header is op and id as recovery finds them: the first of each, as the
// decoder read it, and whether it was met at all.
type header struct {
	op             *string
	id             []byte
	opSeen, idSeen bool
}

// member reads a top-level member's value, taking op and id from it.
func (h *header) member(s *scanner, line []byte) func(key string) *fieldError {
	return func(key string) *fieldError {
		start := s.i
		if !s.skip() {
			return &fieldError{code: protocol.CodeParse}
		}
		raw := line[start:s.i]
		switch {
		case key == "op" && !h.opSeen: // the first, as the decoder read it
			h.opSeen = true
			sub := scanner{b: raw}
			if v, err := sub.str(); err == nil {
				h.op = &v
			}
		case key == "id" && !h.idSeen:
			h.idSeen = true
			sub := scanner{b: raw}
			if v, err := scanID(&sub); err == nil {
				h.id = v
			}
		}
		return nil
	}
}

// recoverFrom is recoverHeader for a line that the decoder read well up
// to the top-level value at the byte at, which it could not take: what
// came before is JSON, and h holds its op and id, so recovery reads on
// from that value only, and a refused line costs no more than a good one.
func (h *header) recoverFrom(line []byte, at int, out *Decoded) (readable bool, breaksAt int) {
	s := scanner{b: line, i: at, allowRepeats: true}
	ok := s.skip() && s.afterMember(h.member(&s, line)) == nil && s.atEnd()
	if ok {
		out.Op, out.ID = h.op, h.id
	}
	return ok, s.i
}

// scanID reads an id value, which is echoed verbatim: a string or a number,
// and a string the scanner takes (no lone surrogate escape, "\ud800",
// which a strict JSON reader of the response would refuse). On success it
// returns the value's bytes.
func scanID(s *scanner) ([]byte, *fieldError) {
	c := s.peek()
	start := s.i
	switch {
	case c == '"':
		if _, err := s.rawString(); err != nil {
			return nil, err
		}
	case c == '-' || (c >= '0' && c <= '9'):
		if _, _, err := s.number("a number"); err != nil {
			return nil, err
		}
	default:
		return nil, s.expected("a string or a number")
	}
	return s.b[start:s.i], nil
}

func decodeField(s *scanner, c *protocol.Command, f protocol.Field) *fieldError {
	var err *fieldError
	switch f {
	case protocol.FieldID:
		c.ID, err = scanID(s)
	case protocol.FieldNowMS:
		c.NowMS, err = ptr(s.float())
	case protocol.FieldWorkerID:
		c.WorkerID, err = ptr(s.u64())
	case protocol.FieldRole:
		var v string
		v, err = s.str()
		c.Role = protocol.Role(v)
	case protocol.FieldDPSize:
		c.DPSize, err = ptr(s.u32())
	case protocol.FieldDPStart:
		c.DPStart, err = ptr(s.u32())
	case protocol.FieldTotalKVBlocks:
		c.TotalKVBlocks, err = ptr(s.u64())
	case protocol.FieldMaxNumBatchedTokens:
		c.MaxNumBatchedTokens, err = ptr(s.u64())
	case protocol.FieldMaxNumSeqs:
		c.MaxNumSeqs, err = ptr(s.u64())
	case protocol.FieldEvents:
		c.Events = make([]protocol.KVEvent, 0, 4)
		err = s.array(func(int) *fieldError {
			c.Events = append(c.Events, protocol.KVEvent{})
			return decodeEvent(s, &c.Events[len(c.Events)-1])
		})
	case protocol.FieldRequestID:
		c.RequestID, err = s.str()
	case protocol.FieldInputTokens:
		c.InputTokens, err = ptr(s.u64())
	case protocol.FieldOutputTokens:
		c.OutputTokens, err = ptr(s.u64())
	case protocol.FieldTokens:
		c.Tokens = make([]uint32, 0, 256)
		err = s.array(func(int) *fieldError {
			v, err := s.u32()
			c.Tokens = append(c.Tokens, v)
			return err
		})
	case protocol.FieldBlockHashes:
		c.BlockHashes, err = u64s[protocol.LocalBlockHash](s)
	case protocol.FieldSequenceHashes:
		c.SequenceHashes, err = u64s[protocol.SequenceHash](s)
	case protocol.FieldAllowedWorkers:
		c.AllowedWorkers, err = u64s[uint64](s)
	case protocol.FieldSessionID:
		c.SessionID, err = ptr(s.str())
	case protocol.FieldParentSessionID:
		c.ParentSessionID, err = ptr(s.str())
	case protocol.FieldPriority:
		c.Priority, err = ptr(s.float())
	case protocol.FieldStrictPriority:
		c.StrictPriority, err = ptr(s.int64())
	case protocol.FieldPolicyClass:
		c.PolicyClass, err = ptr(s.str())
	case protocol.FieldLoRAName:
		c.LoRAName, err = ptr(s.str())
	case protocol.FieldCacheNamespace:
		c.CacheNamespace, err = ptr(s.str())
	case protocol.FieldDPRank:
		c.DPRank, err = ptr(s.u32())
	case protocol.FieldDeviceType:
		var v string
		v, err = s.str()
		c.DeviceType = protocol.DeviceType(v)
	case protocol.FieldRouterConfigOverride:
		c.RouterConfigOverride, err = decodeOverride(s)
	case protocol.FieldLoRAAdapters:
		c.LoRAAdapters = []string{}
		err = s.array(func(int) *fieldError {
			v, err := s.str()
			c.LoRAAdapters = append(c.LoRAAdapters, v)
			return err
		})
	case protocol.FieldMaxGPULoRACount:
		c.MaxGPULoRACount, err = ptr(s.u32())
	}
	return err
}

func ptr[T any](v T, err *fieldError) (*T, *fieldError) {
	if err != nil {
		return nil, err
	}
	return &v, nil
}

func u64s[T ~uint64](s *scanner) ([]T, *fieldError) {
	out := make([]T, 0, 16)
	err := s.array(func(int) *fieldError {
		v, err := s.u64()
		out = append(out, T(v))
		return err
	})
	return out, err
}
