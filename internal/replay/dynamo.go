package replay

import (
	"bufio"
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// dynamoSchema is the one schema a Dynamo request-trace record may name.
const dynamoSchema = "dynamo.request.trace.v1"

// readDynamo reads Dynamo's request-trace-v1 capture (DYN_REQUEST_TRACE),
// plain JSONL or gzipped: a stream that starts with gzip's magic bytes is
// read through gzip, every member of it (the capture appends a member a
// flush), whatever the file is named. One record a line, blank lines
// skipped; a line whose object has an "event" key holds its record there
// (the recorder's {"timestamp": ..., "event": {...}}), and then no record
// field may stand beside it. A line that is not an object is refused
// (AISimulate skips one: a capture that holds one is damaged, and what it
// lost may have been a request).
//
// Every record has schema "dynamo.request.trace.v1" and an event_type:
// request_payload and tool_start records are skipped; request_end is a
// request; tool_end and tool_error are tools, read for their evidence of
// which request spawned a subagent's session and which consumed its
// answer; any other type is refused. The fields:
//
//   - event_time_unix_ms: Unix ms of the event (the request's end),
//     required;
//   - agent_context: {session_id (non-empty), parent_session_id (optional:
//     the session that spawned this one)};
//   - request (request_end): {request_id (non-empty, unique in the trace),
//     model (a string, unused), output_tokens (required; 0 is a
//     prefill-only request), request_received_ms (Unix ms, the start),
//     total_time_ms (a duration, rounded to ms), replay: {trace_block_size,
//     input_length (at least 1), input_sequence_hashes: one unsigned 64-bit
//     hash a block of trace_block_size tokens, the last block possibly
//     partial}}, replay required;
//   - tool (tool_end, tool_error): {tool_call_id, tool_class (non-empty),
//     started_at_unix_ms, ended_at_unix_ms (else event_time_unix_ms),
//     duration_ms (the start, if no started_at: the end minus it), claude:
//     {source_request_id, consumer_request_id, child_session_id,
//     execution_mode: blocking or background}}; a tool ending before it
//     starts is refused, and claude needs the record's agent_context.
//
// A request starts at request_received_ms, else at event_time_unix_ms
// minus total_time_ms (or at the event, with no duration), and ends at
// request_received_ms plus total_time_ms when it has both, else at
// event_time_unix_ms; one that ends before it starts is refused. Times are
// at most 2^52 ms. Every record's trace_block_size is the same, and the
// replay's block size (the trace's is authoritative). The hashes are
// Dynamo's rolling ones, each standing for its whole prefix, so equal
// hashes are equal blocks wherever they occur in the trace.
//
// With no agent_context on any request the trace is Mooncake-like: each
// request alone, arriving at its start less the trace's earliest start
// (and a tool's claude evidence is refused: there is no session to spawn
// from).
//
// With agent_context on every one (some but not all is refused) it is
// agentic, lowered as Dynamo's agent-loadgen and AISimulate do:
//
//  1. requests are ordered by (start, end, request_id); within a session
//     each waits for the completion of the one before it, then the gap
//     between them (never negative);
//  2. a session's parent_session_id is one session (its requests may omit
//     it, not give two), not itself, and one with requests;
//  3. a tool whose claude.child_session_id names a session of the trace is
//     that session's exact evidence (two tools naming one child are
//     refused; one naming a session with no requests says nothing): the
//     child's first request waits for source_request_id's dispatch, then
//     the gap between their starts; with a consumer_request_id, that
//     request waits for the completion of the child's last-ending request,
//     then the gap to its start (a background tool has none: no join).
//     Source and consumer must be requests of the tool's session, which
//     must be the child's parent;
//  4. a child without evidence is spawned by its parent session's request
//     that started last no later than the child's first (the later in
//     order of two that start together; by dispatch; refused if there is
//     none) and joined into the parent session's
//     first request that starts no earlier than the child's last end, if
//     any;
//  5. a play is a set of requests linked by dependencies, named
//     "dynamo-play:" and its first request's id; plays come in the order
//     of their first requests, each play's requests in order; a
//     request's conversation is its session; a request without
//     dependencies arrives at its start less the trace's earliest start.
//
// null is the same as an absent field. Keys are exact, as ReadMooncake's:
// unknown ones (the capture writes
// many) are skipped, one differing from a field only in case or in '_'
// and '-' is refused. Errors name the line and the field's path
// ("request.replay.input_sequence_hashes[2]"); one found once the trace
// is read names the line of the record behind it. Linear in the trace but
// for the sort of the requests.
func readDynamo(r io.Reader, o readOptions) ([]Request, error) {
	src, err := ungzip(r)
	if err != nil {
		return nil, err
	}
	ls, err := newLines(src, o.maxLineBytes)
	if err != nil {
		return nil, err
	}
	t := dynamoTrace{o: o, ids: newLocalIDs(), byID: map[string]int32{}, sessionOf: map[string]int32{}}
	var rd wire.ObjectReader
	var rec dynamoRecord
	for ls.next() {
		rec.reset()
		if err := rd.Read(ls.line, rec.top); err != nil {
			return nil, ls.fail(err)
		}
		if err := rec.finish(); err != nil {
			return nil, ls.fail(err)
		}
		if err := t.add(&rec, ls.n); err != nil {
			return nil, ls.fail(err)
		}
	}
	if err := ls.err(); err != nil {
		return nil, err
	}
	if len(t.reqs) == 0 {
		return nil, nil
	}
	return t.lower()
}

// ungzip is r, or r through gzip when it starts with gzip's magic.
func ungzip(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	// A read error here is bufio's to report again on the next read.
	if magic, _ := br.Peek(2); len(magic) < 2 || magic[0] != 0x1f || magic[1] != 0x8b {
		return br, nil
	}
	// Multistream, as gzip.Reader is by default: every member, as the
	// capture appends them. (Its Close would close nothing of r's.)
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("the trace starts as gzip but does not read as it: %w", err)
	}
	return zr, nil
}

// The fields of each level of a record, and the hints for their slips.
var (
	dynamoRecordKeys   = []string{"schema", "event_type", "event_time_unix_ms", "agent_context", "request", "tool"}
	dynamoRecordHints  = wire.NewKeyHints(dynamoRecordKeys...)
	dynamoContextHints = wire.NewKeyHints("session_id", "parent_session_id")
	dynamoRequestHints = wire.NewKeyHints("request_id", "model", "output_tokens", "request_received_ms", "total_time_ms", "replay")
	dynamoReplayHints  = wire.NewKeyHints("trace_block_size", "input_length", "input_sequence_hashes")
	dynamoToolHints    = wire.NewKeyHints("tool_call_id", "tool_class", "started_at_unix_ms", "ended_at_unix_ms", "duration_ms", "claude")
	dynamoClaudeHints  = wire.NewKeyHints("source_request_id", "consumer_request_id", "child_session_id", "execution_mode")
)

// dynamoRecord is one record as it is read.
type dynamoRecord struct {
	path    string // "event." for a wrapped record: the prefix of its fields' paths
	wrapped bool
	beside  string // a record field at the top of the line, which a wrapped record refuses

	schema, eventType           string
	hasSchema, hasType, hasTime bool
	eventTime                   uint64
	// The objects met before event_type, and their reader.
	deferred []dynamoPart
	reader   wire.ObjectReader

	hasContext, hasRequest, hasTool bool
	session, parent                 string // agent_context's

	// request's and its replay's.
	requestID                          string
	output, received, blockSize, input uint64
	total                              float64
	hashes                             []uint64
	hasOutput, hasReceived, hasTotal   bool
	hasReplay, hasBlockSize, hasInput  bool
	hasHashes                          bool
	start, end                         int64 // the request's, once finished

	// tool's and its claude's.
	callID, class                     string
	started, ended                    uint64
	duration                          float64
	hasStarted, hasEnded, hasDuration bool
	hasClaude, hasSource, hasMode     bool
	source, consumer, child, mode     string
}

// dynamoPart is an object read before the record's event_type, kept as
// written to be read once the type says whether it is wanted.
type dynamoPart struct {
	key string
	raw []byte
}

func (r *dynamoRecord) reset() {
	hashes, deferred, rd := r.hashes[:0], r.deferred[:0], r.reader
	*r = dynamoRecord{hashes: hashes, deferred: deferred, reader: rd}
}

// top reads a key of the line: the record's, or the wrapper's.
func (r *dynamoRecord) top(key string, v *wire.Value) error {
	if key == "event" {
		if r.beside != "" {
			return fmt.Errorf("a record wrapped in \"event\" holds all its fields, but %q stands beside it", r.beside)
		}
		r.wrapped, r.path = true, "event."
		return v.Object(r.field)
	}
	if slices.Contains(dynamoRecordKeys, key) {
		if r.wrapped {
			return errors.New("a record field beside a record wrapped in \"event\"")
		}
		r.beside = key
	}
	return r.field(key, v)
}

// field reads a key of the record.
func (r *dynamoRecord) field(key string, v *wire.Value) error {
	var err error
	switch key {
	case "schema":
		r.schema, err = v.Str()
		r.hasSchema = true
	case "event_type":
		r.eventType, err = v.Str()
		r.hasType = true
	case "event_time_unix_ms":
		if !v.Null() {
			r.eventTime, err = unixMS(v)
			r.hasTime = true
		}
	case "agent_context", "request", "tool":
		switch {
		case v.Null():
		case !r.hasType:
			// Which of them a record reads is its type's to say, and
			// JSON's keys come in any order.
			var raw []byte
			raw, err = v.Raw()
			r.deferred = append(r.deferred, dynamoPart{key, raw})
		case !r.wants(key):
			err = v.Skip()
		default:
			err = v.Object(r.reads(key))
		}
	default:
		return unknownKey(dynamoRecordHints, "a request trace", key, v)
	}
	return err
}

// wants reports whether the record's type reads the object at key.
func (r *dynamoRecord) wants(key string) bool {
	switch r.eventType {
	case "request_end":
		return key == "agent_context" || key == "request"
	case "tool_end", "tool_error":
		return key == "agent_context" || key == "tool"
	}
	return false
}

// reads is the reader of the object at key.
func (r *dynamoRecord) reads(key string) func(string, *wire.Value) error {
	switch key {
	case "agent_context":
		r.hasContext = true
		return r.context
	case "request":
		r.hasRequest = true
		return r.request
	}
	r.hasTool = true
	return r.tool
}

// nonEmpty reads a string that must hold more than blanks.
func nonEmpty(v *wire.Value) (string, error) {
	s, err := v.Str()
	if err == nil && strings.TrimSpace(s) == "" {
		err = fmt.Errorf("expected a non-empty string, got %q", s)
	}
	return s, err
}

// optional reads a string that null leaves unset (ok false).
func optional(v *wire.Value) (s string, ok bool, err error) {
	if v.Null() {
		return "", false, nil
	}
	s, err = nonEmpty(v)
	return s, true, err
}

func (r *dynamoRecord) context(key string, v *wire.Value) error {
	var err error
	switch key {
	case "session_id":
		if !v.Null() {
			r.session, err = nonEmpty(v)
		}
	case "parent_session_id":
		r.parent, _, err = optional(v)
	default:
		return unknownKey(dynamoContextHints, "an agent_context", key, v)
	}
	return err
}

func (r *dynamoRecord) request(key string, v *wire.Value) error {
	var err error
	switch key {
	case "request_id":
		if !v.Null() {
			r.requestID, err = nonEmpty(v)
		}
	case "model":
		if !v.Null() {
			_, err = v.Str()
		}
	case "output_tokens":
		if !v.Null() {
			r.output, err = tokens(v, protocol.FieldOutputTokens)
			r.hasOutput = true
		}
	case "request_received_ms":
		if !v.Null() {
			r.received, err = unixMS(v)
			r.hasReceived = true
		}
	case "total_time_ms":
		if !v.Null() {
			r.total, err = timeMS(v, "a duration")
			r.hasTotal = true
		}
	case "replay":
		if !v.Null() {
			r.hasReplay = true
			err = v.Object(r.replay)
		}
	default:
		return unknownKey(dynamoRequestHints, "a request", key, v)
	}
	return err
}

func (r *dynamoRecord) replay(key string, v *wire.Value) error {
	var err error
	switch key {
	case "trace_block_size":
		if !v.Null() {
			if r.blockSize, err = v.U64(); err == nil && r.blockSize == 0 {
				err = errors.New("expected a block size of at least 1 token, got 0")
			}
			r.hasBlockSize = true
		}
	case "input_length":
		if !v.Null() {
			if r.input, err = tokens(v, protocol.FieldInputTokens); err == nil && r.input == 0 {
				err = errors.New("expected at least 1 token: a request has a prompt")
			}
			r.hasInput = true
		}
	case "input_sequence_hashes":
		if !v.Null() {
			r.hashes, err = wire.AppendU64s(v, r.hashes)
			r.hasHashes = true
		}
	default:
		return unknownKey(dynamoReplayHints, "a replay", key, v)
	}
	return err
}

func (r *dynamoRecord) tool(key string, v *wire.Value) error {
	var err error
	switch key {
	case "tool_call_id":
		if !v.Null() {
			r.callID, err = nonEmpty(v)
		}
	case "tool_class":
		if !v.Null() {
			r.class, err = nonEmpty(v)
		}
	case "started_at_unix_ms":
		if !v.Null() {
			r.started, err = unixMS(v)
			r.hasStarted = true
		}
	case "ended_at_unix_ms":
		if !v.Null() {
			r.ended, err = unixMS(v)
			r.hasEnded = true
		}
	case "duration_ms":
		if !v.Null() {
			r.duration, err = timeMS(v, "a duration")
			r.hasDuration = true
		}
	case "claude":
		if !v.Null() {
			r.hasClaude = true
			err = v.Object(r.claude)
		}
	default:
		return unknownKey(dynamoToolHints, "a tool", key, v)
	}
	return err
}

func (r *dynamoRecord) claude(key string, v *wire.Value) error {
	var err error
	switch key {
	case "source_request_id":
		if !v.Null() {
			r.source, err = nonEmpty(v)
			r.hasSource = true
		}
	case "consumer_request_id":
		r.consumer, _, err = optional(v)
	case "child_session_id":
		r.child, _, err = optional(v)
	case "execution_mode":
		if !v.Null() {
			r.mode, err = v.Str()
			r.hasMode = true
			if err == nil && r.mode != "blocking" && r.mode != "background" {
				err = fmt.Errorf("expected blocking or background, got %q", r.mode)
			}
		}
	default:
		return unknownKey(dynamoClaudeHints, "a claude", key, v)
	}
	return err
}

// unixMS reads a Unix time in ms, as the capture writes one: an integer.
func unixMS(v *wire.Value) (uint64, error) {
	t, err := v.U64()
	if err == nil && t > maxTraceMS {
		err = fmt.Errorf("expected a time from 0 to %d ms, got %d", uint64(maxTraceMS), t)
	}
	return t, err
}

// missing is the error of a required field the record lacks.
func (r *dynamoRecord) missing(field string) error {
	return fmt.Errorf("field %q: missing", r.path+field)
}

// invalid is the error of a field's value, checked once the record is read.
func (r *dynamoRecord) invalid(field, format string, args ...any) error {
	return fmt.Errorf("field %q: %s", r.path+field, fmt.Sprintf(format, args...))
}

// skipped reports whether the record is of a type that is skipped.
func (r *dynamoRecord) skipped() bool {
	return r.eventType == "request_payload" || r.eventType == "tool_start"
}

// finish reads the objects held back for the record's type, and checks
// the record as a whole.
func (r *dynamoRecord) finish() error {
	switch {
	case !r.hasSchema:
		return r.missing("schema")
	case r.schema != dynamoSchema:
		return r.invalid("schema", "expected %q, got %q", dynamoSchema, r.schema)
	case !r.hasType:
		return r.missing("event_type")
	case r.skipped():
		return nil
	case r.eventType != "request_end" && r.eventType != "tool_end" && r.eventType != "tool_error":
		return r.invalid("event_type", "expected request_end, tool_end, tool_error, request_payload or tool_start, got %q", r.eventType)
	}
	for _, p := range r.deferred {
		if !r.wants(p.key) {
			continue
		}
		if err := r.reader.Read(p.raw, r.reads(p.key)); err != nil {
			return within(err, r.path+p.key)
		}
	}
	if !r.hasTime {
		return r.missing("event_time_unix_ms")
	}
	if r.hasContext && r.session == "" {
		return r.missing("agent_context.session_id")
	}
	if r.hasContext && r.parent == r.session {
		return r.invalid("agent_context.parent_session_id", "session %q names itself as its parent", r.session)
	}
	if r.eventType == "request_end" {
		return r.finishRequest()
	}
	return r.finishTool()
}

// within names path as the field err is about, before its own path.
func within(err error, path string) error {
	var oe *wire.ObjectError
	if !errors.As(err, &oe) {
		return fmt.Errorf("field %q: %w", path, err)
	}
	e := *oe
	if e.Field == "" {
		e.Field = path
	} else {
		e.Field = path + "." + e.Field
	}
	return &e
}

func (r *dynamoRecord) finishRequest() error {
	switch {
	case !r.hasRequest:
		return r.missing("request")
	case r.requestID == "":
		return r.missing("request.request_id")
	case !r.hasOutput:
		return r.missing("request.output_tokens")
	case !r.hasReplay:
		return r.missing("request.replay")
	case !r.hasBlockSize:
		return r.missing("request.replay.trace_block_size")
	case !r.hasInput:
		return r.missing("request.replay.input_length")
	case !r.hasHashes:
		return r.missing("request.replay.input_sequence_hashes")
	}
	if want := blocksOf(r.input, r.blockSize); uint64(len(r.hashes)) != want {
		return r.invalid("request.replay.input_sequence_hashes", "%d hashes for input_length %d: it takes %d blocks of trace_block_size %d",
			len(r.hashes), r.input, want, r.blockSize)
	}
	total := int64(math.Round(r.total))
	r.end = int64(r.eventTime)
	switch {
	case r.hasReceived && r.hasTotal:
		r.start, r.end = int64(r.received), int64(r.received)+total
	case r.hasReceived:
		r.start = int64(r.received)
	default:
		r.start = max(r.end-total, 0)
	}
	if r.end < r.start {
		return r.invalid("event_time_unix_ms", "the request ends at %d, before it was received at %d (request_received_ms)", r.end, r.start)
	}
	return nil
}

func (r *dynamoRecord) finishTool() error {
	switch {
	case !r.hasTool:
		return r.missing("tool")
	case r.callID == "":
		return r.missing("tool.tool_call_id")
	case r.class == "":
		return r.missing("tool.tool_class")
	}
	end := r.eventTime
	if r.hasEnded {
		end = r.ended
	}
	start := end
	switch {
	case r.hasStarted:
		start = r.started
	case r.hasDuration:
		start = uint64(max(int64(end)-int64(math.Round(r.duration)), 0))
	}
	if end < start {
		return r.invalid("tool", "the tool ends at %d, before it starts at %d", end, start)
	}
	if !r.hasClaude {
		return nil
	}
	switch {
	case !r.hasContext:
		return r.invalid("tool.claude", "a tool's spawn evidence names requests of its session, and the record has no agent_context")
	case !r.hasSource:
		return r.missing("tool.claude.source_request_id")
	case !r.hasMode:
		return r.missing("tool.claude.execution_mode")
	}
	return nil
}

// dynamoTrace is what the records have given so far.
type dynamoTrace struct {
	o       readOptions
	ids     *localIDs
	idBuf   []protocol.LocalBlockHash
	scratch []byte

	reqs []dynamoEntry
	byID map[string]int32 // request_id: its index in reqs, as read

	// The first request's block size and agent_context, which every
	// other's must match.
	blockSizeLine, contextLine int
	withContext                bool

	sessions  []dynamoSession
	sessionOf map[string]int32
	tools     []dynamoTool
}

// dynamoEntry is a request as the lowering takes it: smaller than a
// Request, which is made once, in its place.
type dynamoEntry struct {
	id         string
	input, out uint64
	ids        []protocol.LocalBlockHash // or packed (Request.keepIDs')
	packed     []byte
	start, end int64
	line       int
	session    int32 // its index in sessions; -1 for none
}

type dynamoSession struct {
	name        string
	parent      string  // "" for none
	parentLine  int     // the first line that named the parent
	parentField string  // its field's path on that line
	reqs        []int32 // its requests' places in start order, once lowered
}

// dynamoTool is a tool's claude evidence.
type dynamoTool struct {
	line                    int
	field                   string // the path of its claude object
	session, callID         string
	source, consumer, child string
}

// add takes in a finished record, read from line n.
func (t *dynamoTrace) add(r *dynamoRecord, n int) error {
	switch {
	case r.skipped():
		return nil
	case r.eventType != "request_end":
		if r.hasClaude {
			t.tools = append(t.tools, dynamoTool{line: n, field: r.path + "tool.claude", session: r.session, callID: r.callID,
				source: r.source, consumer: r.consumer, child: r.child})
		}
		return nil
	}
	if len(t.reqs) == 0 {
		if r.blockSize != t.o.blockSize {
			return r.invalid("request.replay.trace_block_size", "--block-size %d differs from the trace's trace_block_size %d", t.o.blockSize, r.blockSize)
		}
		t.blockSizeLine, t.contextLine, t.withContext = n, n, r.hasContext
	}
	switch {
	case r.blockSize != t.o.blockSize:
		return r.invalid("request.replay.trace_block_size", "%d, but line %d's is %d: a trace has one block size", r.blockSize, t.blockSizeLine, t.o.blockSize)
	case r.hasContext && !t.withContext:
		return r.invalid("agent_context", "this request has one and line %d's has none: a trace's requests all have agent_context or none do", t.contextLine)
	case !r.hasContext && t.withContext:
		return fmt.Errorf("field %q: missing, and line %d's request has one: a trace's requests all have agent_context or none do", r.path+"agent_context", t.contextLine)
	}
	if at, dup := t.byID[r.requestID]; dup {
		return r.invalid("request.request_id", "%q is line %d's too: a request_id names one request", r.requestID, t.reqs[at].line)
	}
	t.byID[r.requestID] = int32(len(t.reqs))
	e := dynamoEntry{id: r.requestID, input: r.input, out: r.output, start: r.start, end: r.end, line: n, session: -1}
	if r.hasContext {
		s, ok := t.sessionOf[r.session]
		if !ok {
			s = int32(len(t.sessions))
			t.sessionOf[r.session] = s
			t.sessions = append(t.sessions, dynamoSession{name: r.session})
		}
		e.session = s
		switch sess := &t.sessions[s]; {
		case r.parent == "":
		case sess.parent == "":
			sess.parent, sess.parentLine, sess.parentField = r.parent, n, r.path+"agent_context.parent_session_id"
		case sess.parent != r.parent:
			return r.invalid("agent_context.parent_session_id", "%q, but line %d gives session %q the parent %q: a session has one parent",
				r.parent, sess.parentLine, r.session, sess.parent)
		}
	}
	// The hashes encode their whole prefix, so one scope serves the trace.
	t.idBuf = t.idBuf[:0]
	for _, h := range r.hashes {
		t.idBuf = append(t.idBuf, t.ids.id(0, h))
	}
	var kept Request
	t.scratch = kept.keepIDs(t.idBuf, t.o.pack, t.scratch)
	e.ids, e.packed = kept.HashIDs, kept.packed
	t.reqs = append(t.reqs, e)
	return nil
}

// request is entry e as a Request.
func (e *dynamoEntry) request() Request {
	return Request{ID: e.id, InputTokens: e.input, OutputTokens: e.out, HashIDs: e.ids, packed: e.packed}
}

// lower orders the requests by (start, end, request_id) and, in an
// agentic trace, builds their graph.
func (t *dynamoTrace) lower() ([]Request, error) {
	type key struct {
		start, end int64
		i          int32
	}
	keys := make([]key, len(t.reqs))
	for i := range t.reqs {
		keys[i] = key{t.reqs[i].start, t.reqs[i].end, int32(i)}
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.end, b.end), strings.Compare(t.reqs[a.i].id, t.reqs[b.i].id))
	})
	g := dynamoGraph{es: make([]dynamoEntry, len(keys)), placeOf: make([]int32, len(keys))}
	for k, key := range keys {
		g.es[k], g.placeOf[key.i] = t.reqs[key.i], int32(k)
	}
	t.reqs, keys = nil, nil
	first := g.es[0].start
	if !t.withContext {
		if len(t.tools) > 0 {
			tool := &t.tools[0]
			return nil, fmt.Errorf("trace line %d: field %q: tool %s gives a subagent's spawn, but no request has agent_context (no session to spawn from)",
				tool.line, tool.field, tool.callID)
		}
		out := make([]Request, len(g.es))
		for k := range g.es {
			out[k] = g.es[k].request()
			out[k].Arrival = float64(g.es[k].start - first)
		}
		return out, nil
	}
	g.deps = make([][]Dependency, len(g.es))
	for k := range g.es {
		s := &t.sessions[g.es[k].session]
		if n := len(s.reqs); n > 0 {
			g.dep(int32(k), s.reqs[n-1], OnCompletion, Sequence)
		}
		s.reqs = append(s.reqs, int32(k))
	}
	exact, err := t.evidence(&g)
	if err != nil {
		return nil, err
	}
	// Children in the order of their first requests, so that a request's
	// joins come in the order its children started.
	for k := range g.es {
		s := &t.sessions[g.es[k].session]
		if s.reqs[0] != int32(k) || s.parent == "" {
			continue
		}
		if err := t.spawn(&g, s, exact); err != nil {
			return nil, err
		}
	}
	// Edges never repeat, so none is dropped as a duplicate (Dynamo keys
	// them by source and trigger): a sequence edge's source is of the
	// request's own session, a join's of a child session, and each child
	// has one spawn and one join; a session parenting itself is refused.
	return t.plays(&g, first), nil
}

// evidence checks each tool's claude evidence and returns, by session, the
// tool that is its exact evidence as a child.
func (t *dynamoTrace) evidence(g *dynamoGraph) (map[int32]*dynamoTool, error) {
	exact := map[int32]*dynamoTool{}
	for i := range t.tools {
		tool := &t.tools[i]
		for _, f := range []struct{ key, id string }{{"source_request_id", tool.source}, {"consumer_request_id", tool.consumer}} {
			if f.id == "" {
				continue
			}
			if _, ok := t.byID[f.id]; !ok {
				return nil, fmt.Errorf("trace line %d: field %q: tool %s names request %q, which the trace does not hold", tool.line, tool.field+"."+f.key, tool.callID, f.id)
			}
			if s := t.sessions[g.es[g.place(t, f.id)].session].name; s != tool.session {
				return nil, fmt.Errorf("trace line %d: field %q: tool %s of session %q names request %q, of session %q: a tool's requests are of its session",
					tool.line, tool.field+"."+f.key, tool.callID, tool.session, f.id, s)
			}
		}
		c, ok := t.sessionOf[tool.child]
		if tool.child == "" || !ok {
			continue
		}
		switch child := &t.sessions[c]; {
		case exact[c] != nil:
			return nil, fmt.Errorf("trace line %d: field %q: tool %s names child session %q, as line %d's tool %s does: a child session has one spawn",
				tool.line, tool.field+".child_session_id", tool.callID, tool.child, exact[c].line, exact[c].callID)
		case child.parent != tool.session:
			return nil, fmt.Errorf("trace line %d: field %q: tool %s of session %q names child session %q, whose parent_session_id is %q",
				tool.line, tool.field+".child_session_id", tool.callID, tool.session, tool.child, child.parent)
		}
		exact[c] = tool
	}
	return exact, nil
}

// spawn links child session s to its parent: by its tool's evidence, else
// by the times.
func (t *dynamoTrace) spawn(g *dynamoGraph, s *dynamoSession, exact map[int32]*dynamoTool) error {
	p, ok := t.sessionOf[s.parent]
	if !ok {
		return fmt.Errorf("trace line %d: field %q: session %q names parent session %q, which has no requests in the trace",
			s.parentLine, s.parentField, s.name, s.parent)
	}
	first, last := s.reqs[0], s.reqs[0]
	for _, k := range s.reqs[1:] {
		if g.es[k].end >= g.es[last].end { // later in order breaks a tie of ends, as (end, start, id) does
			last = k
		}
	}
	if tool := exact[t.sessionOf[s.name]]; tool != nil {
		g.dep(first, g.place(t, tool.source), OnDispatch, Spawn)
		if tool.consumer != "" {
			g.dep(g.place(t, tool.consumer), last, OnCompletion, Join)
		}
		return nil
	}
	parent := t.sessions[p].reqs // in start order
	at := sort.Search(len(parent), func(i int) bool { return g.es[parent[i]].start > g.es[first].start })
	if at == 0 {
		return fmt.Errorf("trace line %d: session %q starts (request %s at %d ms) before any request of its parent session %q: nothing can have spawned it",
			g.es[first].line, s.name, g.es[first].id, g.es[first].start, s.parent)
	}
	g.dep(first, parent[at-1], OnDispatch, Spawn)
	if join := sort.Search(len(parent), func(i int) bool { return g.es[parent[i]].start >= g.es[last].end }); join < len(parent) {
		g.dep(parent[join], last, OnCompletion, Join)
	}
	return nil
}

// dynamoGraph is the requests in (start, end, id) order and their
// dependencies as they are added, each naming its source by that order.
type dynamoGraph struct {
	es      []dynamoEntry
	deps    [][]Dependency
	placeOf []int32 // a request's place in es, by its index as read
}

// place is the place in es of the request with id, which the trace holds.
func (g *dynamoGraph) place(t *dynamoTrace, id string) int32 { return g.placeOf[t.byID[id]] }

// dep makes k wait for on's trigger, then the recorded gap from that
// trigger's time to k's start (never negative).
func (g *dynamoGraph) dep(k, on int32, trigger Trigger, rel Relation) {
	from := g.es[on].end
	if trigger == OnDispatch {
		from = g.es[on].start
	}
	g.deps[k] = append(g.deps[k], Dependency{On: on, Trigger: trigger, Relation: rel, DelayMS: float64(max(g.es[k].start-from, 0))})
}

// plays groups the requests by play, a set linked by dependencies (found
// by union-find, each set's root its first request), plays in the order of
// their first requests and each in order, and makes each request, with its
// Agent, its dependencies by their new places and a root's arrival.
func (t *dynamoTrace) plays(g *dynamoGraph, first int64) []Request {
	n := len(g.es)
	root := make([]int32, n)
	for k := range root {
		root[k] = int32(k)
	}
	find := func(k int32) int32 {
		for root[k] != k {
			root[k] = root[root[k]]
			k = root[k]
		}
		return k
	}
	for k, deps := range g.deps {
		for _, d := range deps {
			// The smaller root wins, so a set's root stays its first request.
			if a, b := find(int32(k)), find(d.On); a < b {
				root[b] = a
			} else if b < a {
				root[a] = b
			}
		}
	}
	// A play's requests go from its offset on: counted by root, then the
	// counts turned to offsets in the roots' order.
	next := make([]int32, n)
	for k := range root {
		next[find(int32(k))]++
	}
	var at int32
	for k := range next {
		if root[k] == int32(k) {
			at, next[k] = at+next[k], at
		}
	}
	placed := make([]int32, n)
	for k := range placed {
		r := find(int32(k))
		placed[k] = next[r]
		next[r]++
	}
	agents := make([]Agent, n)
	names := make([]string, n) // a play's, at its root
	out := make([]Request, n)
	for k := range g.es {
		e := &g.es[k]
		p := find(int32(k))
		if p == int32(k) {
			names[k] = "dynamo-play:" + e.id
		}
		r := e.request()
		r.Deps = g.deps[k]
		for i := range r.Deps {
			r.Deps[i].On = placed[r.Deps[i].On]
		}
		if len(r.Deps) == 0 {
			r.Arrival = float64(e.start - first)
		}
		agents[k] = Agent{Play: names[p], Conversation: t.sessions[e.session].name}
		r.Agent = &agents[k]
		out[placed[k]] = r
	}
	return out
}
