package replay

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// agenticSchema is what a v2 header's schema says.
const agenticSchema = "dynamo.agentic_mooncake"

// agenticSession is a v1 row's conversation when it names none, as
// AISimulate's loader names it.
const agenticSession = "agentic-session"

// readAgenticMooncake reads an Agentic Mooncake trace (--trace-format
// agentic_mooncake), as AISimulate's loader reads one: JSONL, blank lines
// skipped, every error naming the line (counting every line) and the
// field. The first line that is not blank decides the version: an object
// whose schema is "dynamo.agentic_mooncake" is v2's header, and anything
// else makes every line, that one too, a v1 row.
//
// v2's header takes, all required: schema; version, 2 (no other is read);
// block_size, at least 1, which is the file's and must be the replay's
// (agenticBlockSize reads it for the caller to take); hash_id_scope,
// "local" (the only scope there is); source, an object whose format and
// digest are non-empty strings. A header without rows is refused. A v2 row:
//
//   - request_id, play_id, session_id (its conversation in the play), model:
//     non-empty strings, required; request_id unique in the file; model is
//     not otherwise used;
//   - input_length (or input_tokens, not both): at least 1 token, required;
//     output_length (or output_tokens): required, 0 a prefill-only request;
//     both at most 2^40 (as place takes);
//   - hash_ids: exactly one id per block_size tokens of the prompt, a
//     partial last block counted; an id is the play's own (ids are local),
//     the same number in two plays two blocks;
//   - not_before_ms: a root's release time, ms from 0 to 2^52, required (a
//     dependent's is checked, but it is released by its dependencies);
//     recorded_api_time_ms: optional, checked, not used;
//   - output_token_ids: optional, an array of 32-bit ids, as many as
//     output_length; checked, not used;
//   - source_play_ordinal: optional, but on every row if on any, the same
//     on each row of a play, and the plays' exactly 0 to P-1: it orders the
//     plays (else they come in the order they first appear);
//   - priority, strict_priority, policy_class: as ReadMooncake reads them;
//   - dependencies: optional, an array of {request_id, trigger, delay_ms,
//     relation}, all required: request_id a request of the same play (it
//     may be on a later line), not this one; trigger dispatch or
//     completion; relation sequence, spawn, join or replay_barrier, where
//     only a spawn may wait for a dispatch; delay_ms as not_before_ms. One
//     request may not be named twice with the same trigger and relation. A
//     row without dependencies is a root, and every play needs one.
//
// A v1 row (Dynamo's producer's, lowered as AISimulate lowers it):
// request_id (required, unique); session_id (a string or an integer, as
// ReadMooncake takes it; "agentic-session" when none); input_length or
// input_tokens, output_length or output_tokens, hash_ids, output_token_ids
// as v2's; timestamp or created_time (ms, not both), a root's release time
// (0 when none, as AISimulate takes it), ignored on a dependent; wait_for,
// the request ids it waits for the completion of (each once; a sequence,
// or, when more than one, a join), after delay or delay_ms (not both) plus
// tool_wait_ms, all ms as timestamp and 0 when none (a root's are
// ignored); priority, strict_priority, policy_class as ReadMooncake's. The
// producer's request_kind, branches, prefix_reset and tool_events are
// skipped. A play is a set of rows connected by wait_for, named
// "legacy-play:" and the request id of its root with the smallest
// (timestamp, request_id); a play without a root is refused. v2's
// dependencies, play_id and not_before_ms are refused on a v1 row: they
// need the header.
//
// Requests come play by play, each play's in the order of the file, with
// the trace's request ids; the graph is then checked (checkGraph). Keys
// are exact: other keys are skipped, but one that differs from a field
// only in case or in '_' and '-' is refused, and a row may not carry a
// header's schema (the header is the first line only). null is the same
// as an absent field.
func readAgenticMooncake(r io.Reader, o readOptions) ([]Request, error) {
	ls, err := newLines(r, o.maxLineBytes)
	if err != nil {
		return nil, err
	}
	if !ls.next() {
		if err := ls.err(); err != nil {
			return nil, err
		}
		return nil, errNoRequests
	}
	blockSize, v2, err := agenticBlockSize(ls.line)
	switch {
	case err != nil:
		return nil, ls.fail(err)
	case v2 && blockSize != o.blockSize:
		return nil, ls.fail(fmt.Errorf(`field "block_size": the file's block_size %d is authoritative; --block-size %d differs`, blockSize, o.blockSize))
	}
	a := &agenticReader{o: o, v2: v2, byID: map[string]int32{}, plays: map[string]int32{}}
	header := ls.n
	// A v1 file's first line is its first row, read where it is.
	for more := !v2; more || ls.next(); more = false {
		if err := a.readRow(ls); err != nil {
			return nil, err
		}
	}
	if err := ls.err(); err != nil {
		return nil, err
	}
	if v2 && len(a.rows) == 0 {
		return nil, fmt.Errorf("trace line %d: the v2 header is followed by no rows", header)
	}
	if err := a.resolve(); err != nil {
		return nil, err
	}
	rank, err := a.playOrder()
	if err != nil {
		return nil, err
	}
	return a.lower(rank), nil
}

// agenticBlockSize reads the first line of an Agentic Mooncake file that
// is not blank: v2 is whether it is a v2 header, blockSize then the file's
// block size, err what is wrong with the header (or with the line, which is
// then no JSON object). A v1 file embeds no block size: the replay's is
// the file's.
func agenticBlockSize(line []byte) (blockSize uint64, v2 bool, err error) {
	// The line is read once for its schema alone, so that its other keys
	// are then read as what it is, a header or a row, and no error is lost
	// to a guess: an error here is the line's whatever it is.
	var rd wire.ObjectReader
	err = rd.Read(line, func(key string, v *wire.Value) error {
		if key == "schema" && v.Kind() == wire.KindString {
			s, err := v.Str()
			v2 = s == agenticSchema
			return err
		}
		return v.Skip()
	})
	if err != nil || !v2 {
		return 0, false, err
	}
	blockSize, err = readAgenticHeader(&rd, line)
	return blockSize, true, err
}

var (
	headerHints = wire.NewKeyHints("schema", "version", "block_size", "hash_id_scope", "source")
	sourceHints = wire.NewKeyHints("format", "digest")
)

// readAgenticHeader reads a v2 header, whose schema is known to be v2's,
// and returns its block size.
func readAgenticHeader(rd *wire.ObjectReader, line []byte) (uint64, error) {
	var version, blockSize uint64
	var scope, format, digest string
	var hasSource bool
	err := rd.Read(line, func(key string, v *wire.Value) error {
		if v.Null() {
			return nil
		}
		var err error
		switch key {
		case "schema":
			_, err = v.Str()
		case "version":
			if version, err = v.U64(); err == nil && version != 2 {
				err = fmt.Errorf("version %d is not read here: a v2 header says 2 (and a v1 file has no header)", version)
			}
		case "block_size":
			if blockSize, err = v.U64(); err == nil && blockSize == 0 {
				err = errors.New("expected a block size of at least 1 token, got 0")
			}
		case "hash_id_scope":
			if scope, err = v.Str(); err == nil && scope != "local" {
				err = fmt.Errorf(`expected "local" (a play's hash ids are its own), got %q`, scope)
			}
		case "source":
			hasSource = true
			err = v.Object(func(key string, v *wire.Value) error {
				var err error
				switch key {
				case "format":
					format, err = text(v)
				case "digest":
					digest, err = text(v)
				default:
					return unknownKey(sourceHints, "an Agentic Mooncake source", key, v)
				}
				return err
			})
		default:
			return unknownKey(headerHints, "an Agentic Mooncake header", key, v)
		}
		return err
	})
	switch {
	case err != nil:
		return 0, err
	case version == 0:
		return 0, missing("version")
	case blockSize == 0:
		return 0, missing("block_size")
	case scope == "":
		return 0, missing("hash_id_scope")
	case !hasSource:
		return 0, missing("source")
	case format == "":
		return 0, missing("source.format")
	case digest == "":
		return 0, missing("source.digest")
	}
	return blockSize, nil
}

// agenticReader holds a file's rows as they are read, in the file's order,
// until the plays they fall into are known.
type agenticReader struct {
	o    readOptions
	v2   bool
	rd   wire.ObjectReader
	row  agenticRow
	rows []agenticKept // in the file's order
	deps []pendingDep
	ids  []protocol.LocalBlockHash // every row's hash ids, as the trace gives them
	byID map[string]int32          // a request id's row
	// v2's plays, in the order they first appear.
	plays    map[string]int32
	playList []agenticPlay
	ordered  bool // the rows give source_play_ordinal (the first decides)
	// v1's plays' names, once the plays are known.
	legacy []string
}

// agenticKept is what is kept of a row until it is lowered: its request's
// fields (a Request takes nearly twice the room), where its dependencies
// and ids are.
type agenticKept struct {
	id, conv, class string
	arrival         float64
	in, out         uint64
	priority        *float64
	strict          *int64
	line            int
	play            int32  // the play's index in the order plays first appear
	deps, ids       [2]int // its dependencies in deps, its hash ids in ids
	root            bool   // it has no dependencies
}

// agenticPlay is a v2 play as its rows are read.
type agenticPlay struct {
	name    string
	line    int // its first row's
	ordinal uint64
	roots   int
}

// pendingDep is a dependency as its row gives it: On is the file's row of
// request name once resolved, and its place in the output last.
type pendingDep struct {
	name string
	Dependency
}

// agenticRow is one row as it is read.
type agenticRow struct {
	// m.req is the request; the fields a row shares with a Mooncake line
	// (priority, strict_priority, policy_class) are read by Mooncake's
	// reader.
	m             mooncakeLine
	inKey, outKey string // which key gave the input and output lengths
	hashIDs       bool
	outIDs        int // how many output_token_ids, -1 when none
	conv          string
	// v2's.
	play, model string
	notBefore   bool
	ordinal     uint64
	hasOrdinal  bool
	// v1's.
	timeKey, delayKey string
	delay, toolWait   float64
}

var (
	// v2RowHints suggest the field a mistyped key of a v2 row meant.
	v2RowHints = wire.NewKeyHints("request_id", "play_id", "session_id", "model", "input_length", "input_tokens",
		"output_length", "output_tokens", "hash_ids", "not_before_ms", "recorded_api_time_ms", "output_token_ids",
		"source_play_ordinal", "priority", "strict_priority", "policy_class", "dependencies")
	dependencyHints = wire.NewKeyHints("request_id", "trigger", "delay_ms", "relation")
	v1RowHints      = wire.NewKeyHints("request_id", "session_id", "input_length", "input_tokens", "output_length",
		"output_tokens", "output_token_ids", "hash_ids", "timestamp", "created_time", "delay", "delay_ms",
		"tool_wait_ms", "wait_for", "priority", "strict_priority", "policy_class")
)

// readRow reads the line ls is at as a row of the file's version.
func (a *agenticReader) readRow(ls *lines) error {
	if len(a.rows) == math.MaxInt32 {
		return ls.fail(fmt.Errorf("more than %d requests: more than a trace takes", math.MaxInt32))
	}
	a.row = agenticRow{outIDs: -1}
	m := agenticKept{line: ls.n, deps: [2]int{len(a.deps), 0}, ids: [2]int{len(a.ids), 0}}
	field := a.v1Field
	if a.v2 {
		field = a.v2Field
	}
	if err := a.rd.Read(ls.line, field); err != nil {
		return ls.fail(err)
	}
	row := &a.row
	r := &row.m.req
	m.deps[1], m.ids[1] = len(a.deps), len(a.ids)
	if m.root = m.deps[0] == m.deps[1]; !m.root {
		r.Arrival = 0 // a dependent is released by its dependencies, not at its time
	}
	var err error
	switch {
	case r.ID == "":
		err = missing("request_id")
	case row.inKey == "":
		err = missing("input_length")
	case row.outKey == "":
		err = missing("output_length")
	case !row.hashIDs:
		err = missing("hash_ids")
	case row.outIDs >= 0 && uint64(row.outIDs) != r.OutputTokens:
		err = fmt.Errorf(`field "output_token_ids": %d ids for %s %d`, row.outIDs, row.outKey, r.OutputTokens)
	}
	if err == nil {
		if n, want := m.ids[1]-m.ids[0], blocksOf(r.InputTokens, a.o.blockSize); uint64(n) != want {
			err = fmt.Errorf(`field "hash_ids": %d ids for %s %d: it takes exactly %d blocks of %d tokens`, n, row.inKey, r.InputTokens, want, a.o.blockSize)
		} else if known := len(a.byID); a.keepID(r.ID) == known {
			// One map operation a row: a duplicate's first is found again
			// only to name it.
			first := slices.IndexFunc(a.rows, func(k agenticKept) bool { return k.id == r.ID })
			err = fmt.Errorf(`field "request_id": %q is also the request_id of line %d`, r.ID, a.rows[first].line)
		}
	}
	if err == nil {
		if a.v2 {
			err = a.v2Row(&m)
		} else {
			a.v1Row(&m)
		}
	}
	if err != nil {
		return ls.fail(err)
	}
	m.id, m.conv, m.class, m.arrival, m.in, m.out = r.ID, row.conv, r.PolicyClass, r.Arrival, r.InputTokens, r.OutputTokens
	m.priority, m.strict = r.Priority, r.StrictPriority
	a.rows = append(roomFor(a.rows), m)
	return nil
}

// keepID maps id to the row being read, and returns how many ids are
// mapped: as many as before if id was.
func (a *agenticReader) keepID(id string) int {
	a.byID[id] = int32(len(a.rows))
	return len(a.byID)
}

// v2Row applies the rules of a v2 row between its fields, and places it in
// its play.
func (a *agenticReader) v2Row(m *agenticKept) error {
	row := &a.row
	switch {
	case row.play == "":
		return missing("play_id")
	case row.conv == "":
		return missing("session_id")
	case row.model == "":
		return missing("model")
	case !row.notBefore:
		return missing("not_before_ms")
	}
	if len(a.rows) == 0 {
		a.ordered = row.hasOrdinal
	} else if row.hasOrdinal != a.ordered {
		return fmt.Errorf(`field "source_play_ordinal": on every row or on none, and the first row's (line %d) %s`, a.rows[0].line, given(a.ordered))
	}
	// A play's rows mostly come together: the play that appeared last is
	// tried first, without a look-up.
	p, ok := int32(len(a.playList)-1), len(a.playList) > 0 && a.playList[len(a.playList)-1].name == row.play
	if !ok {
		p, ok = a.plays[row.play]
	}
	if !ok {
		p = int32(len(a.playList))
		a.plays[row.play] = p
		a.playList = append(a.playList, agenticPlay{name: row.play, line: m.line, ordinal: row.ordinal})
	}
	pl := &a.playList[p]
	if row.ordinal != pl.ordinal {
		return fmt.Errorf(`field "source_play_ordinal": %d, but play %s's is %d on line %d: a play's rows give the same`, row.ordinal, pl.name, pl.ordinal, pl.line)
	}
	m.play = p
	if m.root {
		pl.roots++
	}
	return nil
}

// v1Row applies the rules of a v1 row between its fields: its wait_for
// becomes its dependencies.
func (a *agenticReader) v1Row(m *agenticKept) {
	row := &a.row
	if row.conv == "" {
		row.conv = agenticSession
	}
	deps := a.deps[m.deps[0]:m.deps[1]]
	relation := Sequence
	if len(deps) > 1 {
		relation = Join
	}
	for i := range deps {
		deps[i].Relation, deps[i].DelayMS = relation, row.delay+row.toolWait
	}
}

// shared reads a field v1 and v2 rows have alike; handled is false for
// another key.
func (a *agenticReader) shared(key string, v *wire.Value) (handled bool, err error) {
	row := &a.row
	r := &row.m.req
	switch key {
	case "request_id":
		r.ID, err = text(v)
	case "input_length", "input_tokens":
		if !v.Null() {
			if row.inKey != "" {
				return true, fmt.Errorf("give input_length or input_tokens, not both (%s is given)", row.inKey)
			}
			row.inKey = key
			if r.InputTokens, err = tokens(v, protocol.FieldInputTokens); err == nil && r.InputTokens == 0 {
				err = errors.New("expected at least 1 token: a request has a prompt")
			}
		}
	case "output_length", "output_tokens":
		if !v.Null() {
			if row.outKey != "" {
				return true, fmt.Errorf("give output_length or output_tokens, not both (%s is given)", row.outKey)
			}
			row.outKey = key
			r.OutputTokens, err = tokens(v, protocol.FieldOutputTokens)
		}
	case "hash_ids":
		if !v.Null() {
			row.hashIDs = true
			a.ids, err = wire.AppendU64s(v, a.ids)
		}
	case "output_token_ids":
		if !v.Null() {
			row.outIDs = 0
			err = v.Array(func(_ int, v *wire.Value) error {
				row.outIDs++
				id, err := v.U64()
				if err == nil && id > math.MaxUint32 {
					err = fmt.Errorf("expected a token id of 32 bits, got %d", id)
				}
				return err
			})
		}
	case "priority", "strict_priority", "policy_class":
		err = row.m.field(key, v)
	case "schema":
		return true, errors.New("a row has none: only the v2 header has a schema, and it is the file's first line")
	default:
		return false, nil
	}
	return true, err
}

// v2Field reads one key of a v2 row.
func (a *agenticReader) v2Field(key string, v *wire.Value) error {
	if handled, err := a.shared(key, v); handled {
		return err
	}
	row := &a.row
	var err error
	switch key {
	case "play_id":
		row.play, err = text(v)
	case "session_id":
		row.conv, err = text(v)
	case "model":
		row.model, err = text(v)
	case "not_before_ms":
		if !v.Null() {
			row.m.req.Arrival, err = timeMS(v, "a time")
			row.notBefore = true
		}
	case "recorded_api_time_ms":
		if !v.Null() {
			_, err = timeMS(v, "a time")
		}
	case "source_play_ordinal":
		if !v.Null() {
			row.ordinal, err = v.U64()
			row.hasOrdinal = true
		}
	case "dependencies":
		if !v.Null() {
			err = v.Array(a.dependency)
		}
	case "wait_for":
		return errors.New("is v1's: a v2 row names what it waits for in dependencies")
	default:
		return unknownKey(v2RowHints, "an Agentic Mooncake row", key, v)
	}
	return err
}

// dependency reads one of a v2 row's dependencies.
func (a *agenticReader) dependency(_ int, v *wire.Value) error {
	d := pendingDep{}
	var hasTrigger, hasRelation, hasDelay bool
	err := v.Object(func(key string, v *wire.Value) error {
		if v.Null() {
			return nil
		}
		var err error
		switch key {
		case "request_id":
			d.name, err = text(v)
		case "trigger":
			d.Trigger, err = named[Trigger](v, triggerNames[:])
			hasTrigger = true
		case "relation":
			d.Relation, err = named[Relation](v, relationNames[:])
			hasRelation = true
		case "delay_ms":
			d.DelayMS, err = timeMS(v, "a delay")
			hasDelay = true
		default:
			return unknownKey(dependencyHints, "a dependency", key, v)
		}
		return err
	})
	switch {
	case err != nil:
		return err
	case d.name == "":
		return missing("request_id")
	case !hasTrigger:
		return missing("trigger")
	case !hasRelation:
		return missing("relation")
	case !hasDelay:
		return missing("delay_ms")
	case d.Trigger == OnDispatch && d.Relation != Spawn:
		return fmt.Errorf("a %s dependency waits for completion: only a spawn may wait for a dispatch", d.Relation)
	}
	a.deps = append(roomFor(a.deps), d)
	return nil
}

// v1Field reads one key of a v1 row.
func (a *agenticReader) v1Field(key string, v *wire.Value) error {
	if handled, err := a.shared(key, v); handled {
		return err
	}
	row := &a.row
	var err error
	switch key {
	case "session_id":
		row.conv, err = sessionID(v)
	case "timestamp", "created_time":
		if !v.Null() {
			if row.timeKey != "" {
				return fmt.Errorf("give timestamp or created_time, not both (%s is given)", row.timeKey)
			}
			row.timeKey = key
			row.m.req.Arrival, err = timeMS(v, "a time")
		}
	case "delay", "delay_ms":
		if !v.Null() {
			if row.delayKey != "" {
				return fmt.Errorf("give delay or delay_ms, not both (%s is given)", row.delayKey)
			}
			row.delayKey = key
			row.delay, err = timeMS(v, "a delay")
		}
	case "tool_wait_ms":
		if !v.Null() {
			row.toolWait, err = timeMS(v, "a delay")
		}
	case "wait_for":
		if !v.Null() {
			err = v.Array(func(_ int, v *wire.Value) error {
				if v.Kind() == wire.KindNull {
					return v.Expected("a request id")
				}
				id, err := text(v)
				a.deps = append(roomFor(a.deps), pendingDep{name: id})
				return err
			})
		}
	case "request_kind", "branches", "prefix_reset", "tool_events": // the producer's, not the replay's
		return v.Skip()
	case "dependencies", "play_id", "not_before_ms":
		return fmt.Errorf("is v2's, and a v2 file opens with its header ({\"schema\": %q, \"version\": 2, ...})", agenticSchema)
	default:
		return unknownKey(v1RowHints, "an Agentic Mooncake v1 row", key, v)
	}
	return err
}

// resolve finds the request each dependency names, refusing a name that
// is no request of the file, the row's own, and one named twice alike;
// and v2's refusals of a dependency across plays and of a play without a
// root, or v1's plays.
func (a *agenticReader) resolve() error {
	field := func(k int) string { return fmt.Sprintf("wait_for[%d]", k) }
	if a.v2 {
		field = func(k int) string { return fmt.Sprintf("dependencies[%d].request_id", k) }
	}
	// seenBy[j] is the row (+1) whose dependencies last named row j, and
	// seenAs the triggers and relations they named it with.
	seenBy := make([]int32, len(a.rows))
	seenAs := make([]uint8, len(a.rows))
	for i := range a.rows {
		m := &a.rows[i]
		for p := m.deps[0]; p < m.deps[1]; p++ {
			d := &a.deps[p]
			j, ok := a.byID[d.name]
			fail := func(format string, args ...any) error {
				return fmt.Errorf("trace line %d: field %q: "+format, append([]any{m.line, field(p - m.deps[0])}, args...)...)
			}
			switch bit := uint8(1) << (4*uint8(d.Trigger) + uint8(d.Relation)); {
			case !ok:
				return fail("%q is not a request_id of the file", d.name)
			case int(j) == i:
				return fail("request %s cannot depend on itself", d.name)
			case a.v2 && a.rows[j].play != m.play:
				return fail("request %s is in play %s, not in this row's play %s: a dependency stays in its play",
					d.name, a.playList[a.rows[j].play].name, a.playList[m.play].name)
			case seenBy[j] == int32(i)+1 && seenAs[j]&bit != 0:
				return fail("request %s is named twice as a %s on %s", d.name, d.Relation, d.Trigger)
			case seenBy[j] != int32(i)+1:
				seenBy[j], seenAs[j] = int32(i)+1, bit
			default:
				seenAs[j] |= bit
			}
			d.On = j
		}
	}
	if !a.v2 {
		return a.components()
	}
	for _, pl := range a.playList {
		if pl.roots == 0 {
			return fmt.Errorf("trace line %d: play %s has no root: each of its requests has dependencies, so none would ever be released", pl.line, pl.name)
		}
	}
	return nil
}

// components makes v1's plays: the rows connected by wait_for, through a
// union-find (by size, with path halving: linear in all but name), each
// named by its root with the smallest (timestamp, request_id).
func (a *agenticReader) components() error {
	n := len(a.rows)
	parent, size := make([]int32, n), make([]int32, n)
	for i := range parent {
		parent[i], size[i] = int32(i), 1
	}
	find := func(x int32) int32 {
		for parent[x] != x {
			parent[x] = parent[parent[x]]
			x = parent[x]
		}
		return x
	}
	for i := range a.rows {
		for _, d := range a.deps[a.rows[i].deps[0]:a.rows[i].deps[1]] {
			x, y := find(int32(i)), find(d.On)
			if x == y {
				continue
			}
			if size[x] < size[y] {
				x, y = y, x
			}
			parent[y] = x
			size[x] += size[y]
		}
	}
	// label[c] is component c's root of the smallest (timestamp, request_id),
	// play[c] its play's index; -1 while there is none.
	label, play := make([]int32, n), make([]int32, n)
	for i := range label {
		label[i], play[i] = -1, -1
	}
	before := func(i, j int32) bool {
		ri, rj := &a.rows[i], &a.rows[j]
		return ri.arrival < rj.arrival || ri.arrival == rj.arrival && ri.id < rj.id
	}
	for i := range a.rows {
		if a.rows[i].root {
			c := find(int32(i))
			if label[c] < 0 || before(int32(i), label[c]) {
				label[c] = int32(i)
			}
		}
	}
	for i := range a.rows {
		c := find(int32(i))
		if play[c] < 0 {
			if label[c] < 0 {
				return fmt.Errorf("trace line %d: request %s and all it waits for, directly or not, have no root: each waits for another, so none would ever be released",
					a.rows[i].line, a.rows[i].id)
			}
			play[c] = int32(len(a.legacy))
			a.legacy = append(a.legacy, "legacy-play:"+a.rows[label[c]].id)
		}
		a.rows[i].play = play[c]
	}
	return nil
}

// playOrder is each play's place in the output: its source_play_ordinal
// when the rows give one, else the order plays first appear.
func (a *agenticReader) playOrder() ([]int32, error) {
	n := len(a.legacy)
	if a.v2 {
		n = len(a.playList)
	}
	rank := make([]int32, n)
	for p := range rank {
		rank[p] = int32(p)
	}
	if !a.ordered {
		return rank, nil
	}
	taken := make([]int32, n) // the play (+1) with each ordinal
	for p, pl := range a.playList {
		switch {
		case pl.ordinal >= uint64(n):
			return nil, fmt.Errorf(`trace line %d: field "source_play_ordinal": play %s's is %d, but %d plays have 0 to %d (one is missing)`,
				pl.line, pl.name, pl.ordinal, n, n-1)
		case taken[pl.ordinal] != 0:
			return nil, fmt.Errorf(`trace line %d: field "source_play_ordinal": play %s's is %d, as play %s's is`,
				pl.line, pl.name, pl.ordinal, a.playList[taken[pl.ordinal]-1].name)
		}
		taken[pl.ordinal] = int32(p) + 1
		rank[p] = int32(pl.ordinal)
	}
	return rank, nil
}

// lower makes the requests: play by play (in rank's order), each play's in
// the file's order, their dependencies by index, their ids interned by
// play.
func (a *agenticReader) lower(rank []int32) []Request {
	names := a.legacy
	if a.v2 {
		names = make([]string, len(a.playList))
		for p, pl := range a.playList {
			names[p] = pl.name
		}
	}
	// pos[i] is where row i goes: a counting sort by play.
	start := make([]int32, len(rank)+1)
	for i := range a.rows {
		start[rank[a.rows[i].play]+1]++
	}
	for k := 1; k < len(start); k++ {
		start[k] += start[k-1]
	}
	pos := make([]int32, len(a.rows))
	for i := range a.rows {
		k := rank[a.rows[i].play]
		pos[i] = start[k]
		start[k]++
	}
	out := make([]Request, len(a.rows))
	agents := make([]Agent, len(a.rows))
	deps := make([]Dependency, len(a.deps))
	local := newLocalIDs()
	var ids []protocol.LocalBlockHash
	var scratch []byte
	for i := range a.rows {
		m, p := &a.rows[i], pos[i]
		r := &out[p]
		*r = Request{ID: m.id, Arrival: m.arrival, InputTokens: m.in, OutputTokens: m.out,
			Priority: m.priority, StrictPriority: m.strict, PolicyClass: m.class, Agent: &agents[p]}
		agents[p] = Agent{Play: names[m.play], Conversation: m.conv}
		if m.deps[0] < m.deps[1] {
			r.Deps = deps[m.deps[0]:m.deps[1]:m.deps[1]]
			for k, d := range a.deps[m.deps[0]:m.deps[1]] {
				d.On = pos[d.On]
				r.Deps[k] = d.Dependency
			}
		}
		ids = ids[:0]
		for _, raw := range a.ids[m.ids[0]:m.ids[1]] {
			ids = append(ids, local.id(int(m.play), uint64(raw)))
		}
		scratch = r.keepIDs(ids, a.o.pack, scratch)
	}
	return out
}

// roomFor makes room in s for one more, doubling it when full: append
// grows a long slice by a quarter, which copies it four times as often.
func roomFor[T any](s []T) []T {
	if len(s) < cap(s) {
		return s
	}
	return slices.Grow(s, max(len(s), 256))
}

// text reads a string that, given, is not blank; "" for null.
func text(v *wire.Value) (string, error) {
	if v.Null() {
		return "", nil
	}
	s, err := v.Str()
	if err == nil && strings.TrimSpace(s) == "" {
		err = fmt.Errorf("expected a non-empty string, got %q", s)
	}
	return s, err
}

// named reads one of names, as a T of its index.
func named[T ~uint8](v *wire.Value, names []string) (T, error) {
	s, err := v.Str()
	if err != nil {
		return 0, err
	}
	if i := slices.Index(names, s); i >= 0 {
		return T(i), nil
	}
	return 0, fmt.Errorf("expected one of %s, got %q", strings.Join(names, ", "), s)
}

// given says whether a field is given.
func given(is bool) string {
	if is {
		return "is given"
	}
	return "is not"
}

// missing is the refusal of a required field that is absent (or null).
func missing(field string) error {
	return &wire.ObjectError{Code: protocol.CodeInvalidField, Field: field, Msg: "missing"}
}
