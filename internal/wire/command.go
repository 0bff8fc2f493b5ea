package wire

import (
	"fmt"
	"slices"
	"strings"
)

// Op names a command.
type Op string

// The commands of PROTOCOL.md §4.
const (
	OpWorkerReady       Op = "worker_ready"
	OpWorkerDraining    Op = "worker_draining"
	OpWorkerRemoved     Op = "worker_removed"
	OpTopologySettled   Op = "topology_settled"
	OpPlace             Op = "place"
	OpObserve           Op = "observe"
	OpDispatchCommitted Op = "dispatch_committed"
	OpDispatchAborted   Op = "dispatch_aborted"
	OpPrefillCompleted  Op = "prefill_completed"
	OpRequestTerminal   Op = "request_terminal"
	OpCancelPending     Op = "cancel_pending"
	OpAdvanceClock      Op = "advance_clock"
	OpInspect           Op = "inspect"
)

// Role is the serving role of a worker and of the requests it takes.
type Role string

// Roles.
const (
	RoleAggregated Role = "aggregated"
	RolePrefill    Role = "prefill"
	RoleDecode     Role = "decode"
)

// Command is one decoded command line. It is a union of every op's fields;
// Decode guarantees that only the fields of Op are set, and that required
// ones are. Pointers and nil slices mean "absent" (JSON null is absent too).
type Command struct {
	Op    Op
	ID    []byte   // raw JSON of id, echoed verbatim
	NowMS *float64 // finite, >= 0

	WorkerID            *uint64
	Role                Role // "" when absent
	DPSize              *uint32
	DPStart             *uint32
	TotalKVBlocks       *uint64
	MaxNumBatchedTokens *uint64
	MaxNumSeqs          *uint64

	Events []RouterEvent

	RequestID       string
	InputTokens     *uint64
	OutputTokens    *uint64
	Tokens          []uint32
	BlockHashes     []uint64
	SequenceHashes  []uint64
	SessionID       *string
	ParentSessionID *string
	Priority        *float64
	StrictPriority  *int64
	AllowedWorkers  []uint64
	DPRank          *uint32

	has fieldSet
}

// EventKind is what a KV event did.
type EventKind uint8

// Event kinds.
const (
	EventStored EventKind = iota + 1
	EventRemoved
	EventCleared
)

// RouterEvent is one KV event as Dynamo serialises it.
type RouterEvent struct {
	WorkerID    uint64
	StorageTier string // "device" when absent
	EventID     uint64
	DPRank      uint32
	Kind        EventKind
	ParentHash  *uint64       // stored: nil = root
	Blocks      []StoredBlock // stored
	Removed     []uint64      // removed: block hashes
}

// StoredBlock is one block of a stored event.
type StoredBlock struct {
	BlockHash  uint64
	TokensHash uint64
}

type field uint8

const (
	fID field = iota
	fNowMS
	fWorkerID
	fRole
	fDPSize
	fDPStart
	fTotalKVBlocks
	fMaxNumBatchedTokens
	fMaxNumSeqs
	fEvents
	fRequestID
	fInputTokens
	fOutputTokens
	fTokens
	fBlockHashes
	fSequenceHashes
	fSessionID
	fParentSessionID
	fPriority
	fStrictPriority
	fAllowedWorkers
	fDPRank
	numFields
)

type fieldSet uint32

func (s fieldSet) has(f field) bool { return s&(1<<f) != 0 }

func set(fs ...field) fieldSet {
	var s fieldSet
	for _, f := range fs {
		s |= 1 << f
	}
	return s
}

var fieldNames = [numFields]string{
	fID: "id", fNowMS: "now_ms", fWorkerID: "worker_id", fRole: "role", fDPSize: "dp_size",
	fDPStart: "dp_start", fTotalKVBlocks: "total_kv_blocks",
	fMaxNumBatchedTokens: "max_num_batched_tokens", fMaxNumSeqs: "max_num_seqs",
	fEvents: "events", fRequestID: "request_id", fInputTokens: "input_tokens",
	fOutputTokens: "output_tokens", fTokens: "tokens", fBlockHashes: "block_hashes",
	fSequenceHashes: "sequence_hashes", fSessionID: "session_id",
	fParentSessionID: "parent_session_id", fPriority: "priority",
	fStrictPriority: "strict_priority", fAllowedWorkers: "allowed_workers", fDPRank: "dp_rank",
}

// opSpec lists the fields an op takes beyond op, id and now_ms.
type opSpec struct{ allowed, required fieldSet }

var requestOnly = opSpec{allowed: set(fRequestID), required: set(fRequestID)}

var ops = map[Op]opSpec{
	OpWorkerReady: {
		allowed:  set(fWorkerID, fRole, fDPSize, fDPStart, fTotalKVBlocks, fMaxNumBatchedTokens, fMaxNumSeqs),
		required: set(fWorkerID),
	},
	OpWorkerDraining:  {allowed: set(fWorkerID), required: set(fWorkerID)},
	OpWorkerRemoved:   {allowed: set(fWorkerID), required: set(fWorkerID)},
	OpTopologySettled: {},
	OpPlace: {
		allowed: set(fRequestID, fInputTokens, fOutputTokens, fTokens, fBlockHashes, fSequenceHashes,
			fRole, fSessionID, fParentSessionID, fPriority, fStrictPriority, fAllowedWorkers, fWorkerID, fDPRank),
		required: set(fRequestID),
	},
	OpObserve:           {allowed: set(fEvents), required: set(fEvents)},
	OpDispatchCommitted: requestOnly,
	OpDispatchAborted:   requestOnly,
	OpPrefillCompleted:  requestOnly,
	OpRequestTerminal:   requestOnly,
	OpCancelPending:     requestOnly,
	OpAdvanceClock:      {required: set(fNowMS)},
	OpInspect:           {},
}

// OpNames lists the ops in a stable order, for messages.
func OpNames() []string {
	names := make([]string, 0, len(ops))
	for op := range ops {
		names = append(names, string(op))
	}
	slices.Sort(names)
	return names
}

// MaxRequestIDBytes bounds request_id.
const MaxRequestIDBytes = 256

// Decoded is the outcome of decoding one line: the command, or an error with
// as much of op and id as could be recovered for the response.
type Decoded struct {
	Cmd Command
	Op  *string // nil when the line could not be read
	ID  []byte
	Err *Error
}

// Decode parses and validates one command line. Only what can be checked
// without engine state is checked here.
func Decode(line []byte, out *Decoded) {
	*out = Decoded{}
	s := scanner{b: line}
	c := &out.Cmd
	var opSeen bool
	var opText string
	if s.peek() != '{' {
		out.Err = Errorf(CodeParse, "a command line must be a JSON object, got %s", s.describe())
		return
	}
	err := s.object(func(key string) *fieldError {
		if key == "op" {
			v, err := s.str()
			opText, opSeen = v, err == nil
			return err.orNil("op")
		}
		f, ok := fieldIndex[key]
		if !ok {
			return &fieldError{code: CodeUnknownField, path: key, msg: "is not a protocol field" + suggest(key)}
		}
		if s.null() {
			return nil
		}
		c.has |= 1 << f
		return decodeField(&s, c, f).orNil(key)
	})
	if err == nil && s.peek() != 0 {
		err = s.syntax("unexpected data after the object")
	}
	if err != nil {
		recoverHeader(line, out)
		if err.code == CodeParse && out.Op == nil {
			out.ID = nil
		}
		out.Err = err.wire()
		return
	}
	if c.has.has(fID) {
		out.ID = c.ID
	}
	if !opSeen {
		out.Err = Errorf(CodeInvalidField, `field "op": required`)
		return
	}
	out.Op = &opText
	c.Op = Op(opText)
	spec, ok := ops[c.Op]
	if !ok {
		out.Err = Errorf(CodeUnknownOp, "op %q is not one of %s", opText, strings.Join(OpNames(), ", "))
		return
	}
	if e := validate(c, spec); e != nil {
		out.Err = e
	}
}

func (e *fieldError) orNil(key string) *fieldError {
	if e == nil {
		return nil
	}
	return e.within(key)
}

// protocolKeys are every key a command line may hold: the command's fields,
// and those of its KV events (events.go).
var protocolKeys = func() map[string]string {
	m := map[string]string{"op": "op"}
	for _, k := range append(fieldNames[:], eventKeys...) {
		m[k] = k
	}
	return m
}()

var fieldIndex = func() map[string]field {
	m := make(map[string]field, numFields)
	for f, name := range fieldNames {
		m[name] = field(f)
	}
	return m
}()

// suggest names a protocol field that differs from key only in case or
// separators, the usual slip of a hand-written host.
func suggest(key string) string {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	for _, name := range append([]string{"op"}, fieldNames[:]...) {
		if norm(key) == name {
			return fmt.Sprintf(" (did you mean %q?)", name)
		}
	}
	return ""
}

// recoverHeader fills op and id from a line that failed, when its top level
// is a readable object, so the error response can still echo them.
func recoverHeader(line []byte, out *Decoded) {
	s := scanner{b: line, allowRepeats: true}
	var op *string
	var id []byte
	ok := s.object(func(key string) *fieldError {
		start := s.i
		if !s.skip() {
			return &fieldError{code: CodeParse}
		}
		raw := line[start:s.i]
		switch key {
		case "op":
			sub := scanner{b: raw}
			if v, err := sub.str(); err == nil {
				op = &v
			}
		case "id":
			sub := scanner{b: raw}
			if validID(&sub) {
				id = trimSpace(raw)
			}
		}
		return nil
	}) == nil && s.peek() == 0
	if ok {
		out.Op, out.ID = op, id
	}
}

func trimSpace(b []byte) []byte {
	s := scanner{b: b}
	s.peek()
	start := s.i
	end := len(b)
	for end > start && (b[end-1] == ' ' || b[end-1] == '\t' || b[end-1] == '\r' || b[end-1] == '\n') {
		end--
	}
	return b[start:end]
}

// validID consumes an id value: a string or a number, echoed verbatim.
func validID(s *scanner) bool {
	c := s.peek()
	return (c == '"' || c == '-' || (c >= '0' && c <= '9')) && s.skipScalar()
}

func decodeField(s *scanner, c *Command, f field) *fieldError {
	var err *fieldError
	switch f {
	case fID:
		s.peek()
		start := s.i
		if !validID(s) {
			s.i = start
			return s.expected("a string or a number")
		}
		c.ID = s.b[start:s.i]
	case fNowMS:
		var v float64
		if v, err = s.float(); err == nil {
			if v < 0 {
				return &fieldError{code: CodeInvalidField, msg: fmt.Sprintf("expected a time >= 0, got %v", v)}
			}
			c.NowMS = &v
		}
	case fWorkerID:
		c.WorkerID, err = ptr(s.u64())
	case fRole:
		var v string
		if v, err = s.str(); err == nil {
			switch Role(v) {
			case RoleAggregated, RolePrefill, RoleDecode:
				c.Role = Role(v)
			default:
				return &fieldError{code: CodeInvalidField, msg: fmt.Sprintf("expected one of aggregated, prefill, decode, got %q", v)}
			}
		}
	case fDPSize:
		var v uint32
		if v, err = s.u32(); err == nil && v == 0 {
			return &fieldError{code: CodeInvalidField, msg: "expected at least 1, got 0"}
		}
		c.DPSize = &v
	case fDPStart:
		c.DPStart, err = ptr(s.u32())
	case fTotalKVBlocks:
		c.TotalKVBlocks, err = ptr(s.u64())
	case fMaxNumBatchedTokens:
		c.MaxNumBatchedTokens, err = ptr(s.u64())
	case fMaxNumSeqs:
		c.MaxNumSeqs, err = ptr(s.u64())
	case fEvents:
		c.Events = make([]RouterEvent, 0, 4)
		err = s.array(func(int) *fieldError {
			c.Events = append(c.Events, RouterEvent{})
			return decodeEvent(s, &c.Events[len(c.Events)-1])
		})
	case fRequestID:
		var v string
		if v, err = s.str(); err == nil {
			if v == "" || len(v) > MaxRequestIDBytes {
				return &fieldError{code: CodeInvalidField, msg: fmt.Sprintf("expected a non-empty string of at most %d bytes, got %d bytes", MaxRequestIDBytes, len(v))}
			}
			c.RequestID = v
		}
	case fInputTokens:
		c.InputTokens, err = ptr(s.u64())
	case fOutputTokens:
		c.OutputTokens, err = ptr(s.u64())
	case fTokens:
		c.Tokens = make([]uint32, 0, 256)
		err = s.array(func(int) *fieldError {
			v, err := s.u32()
			c.Tokens = append(c.Tokens, v)
			return err
		})
	case fBlockHashes:
		c.BlockHashes, err = u64s(s)
	case fSequenceHashes:
		c.SequenceHashes, err = u64s(s)
	case fAllowedWorkers:
		c.AllowedWorkers, err = u64s(s)
	case fSessionID:
		c.SessionID, err = ptr(s.str())
	case fParentSessionID:
		c.ParentSessionID, err = ptr(s.str())
	case fPriority:
		c.Priority, err = ptr(s.float())
	case fStrictPriority:
		c.StrictPriority, err = ptr(s.int64())
	case fDPRank:
		c.DPRank, err = ptr(s.u32())
	}
	return err
}

func ptr[T any](v T, err *fieldError) (*T, *fieldError) {
	if err != nil {
		return nil, err
	}
	return &v, nil
}

func u64s(s *scanner) ([]uint64, *fieldError) {
	out := make([]uint64, 0, 16)
	err := s.array(func(int) *fieldError {
		v, err := s.u64()
		out = append(out, v)
		return err
	})
	return out, err
}

// validate checks the fields against the op, and the rules between fields
// that need no engine state.
func validate(c *Command, spec opSpec) *Error {
	common := set(fID, fNowMS)
	for f := range numFields {
		if c.has.has(f) && !spec.allowed.has(f) && !common.has(f) {
			return Errorf(CodeUnknownField, "field %q: is not a field of op %q", fieldNames[f], c.Op)
		}
		if spec.required.has(f) && !c.has.has(f) {
			return Errorf(CodeInvalidField, "field %q: required by op %q", fieldNames[f], c.Op)
		}
	}
	if c.Op != OpPlace {
		return nil
	}
	if c.Tokens != nil && c.BlockHashes != nil {
		return Errorf(CodeInvalidField, `field "block_hashes": give tokens or block_hashes, not both`)
	}
	if c.SequenceHashes != nil {
		if c.BlockHashes == nil {
			return Errorf(CodeInvalidField, `field "sequence_hashes": only goes with block_hashes`)
		}
		if len(c.SequenceHashes) != len(c.BlockHashes) {
			return Errorf(CodeInvalidField, `field "sequence_hashes": expected %d hashes (as many as block_hashes), got %d`, len(c.BlockHashes), len(c.SequenceHashes))
		}
	}
	if c.DPRank != nil && c.WorkerID == nil {
		return Errorf(CodeInvalidField, `field "dp_rank": pins a rank of worker_id, which is missing`)
	}
	if c.InputTokens == nil && c.Tokens == nil && c.BlockHashes != nil {
		return Errorf(CodeInvalidField, `field "input_tokens": required with block_hashes (the prompt length is not implied by them)`)
	}
	if c.InputTokens != nil && c.Tokens != nil && *c.InputTokens < uint64(len(c.Tokens)) {
		return Errorf(CodeInvalidField, `field "input_tokens": %d is shorter than tokens (%d)`, *c.InputTokens, len(c.Tokens))
	}
	return nil
}

// ISL is the request's input length in tokens.
func (c *Command) ISL() uint64 {
	if c.InputTokens != nil {
		return *c.InputTokens
	}
	return uint64(len(c.Tokens))
}
