package replay

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// readWeka reads a Weka (SemiAnalysis AgentX, kv-cache-tester) trace: one
// agent play a line, a JSON object (a pretty-printed .json play is one
// object over many lines: compact it, jq -c, to a line). Its fields:
//
//   - id: the play's name, a non-empty string, unique in the file;
//   - block_size: tokens per hash id, authoritative (a --block-size that
//     differs is refused); hash_id_scope: "local", the only scope, which
//     makes a play's ids its own (the same id in two plays is two blocks);
//   - models: optional; if given, every request's model must be one;
//   - requests: the main agent's requests and subagent markers, in order:
//     a request {type "s" or "n", t (s, from the play's start), model,
//     in, out (tokens; out 0 is a prefill-only request), hash_ids,
//     api_time (s, its recorded duration; absent is 0)}, or a subagent
//     {type "subagent", t (its marker), agent_id, subagent_type, status
//     ("completed" or "async_launched", which replay treats alike),
//     duration_ms (optional), requests: its own requests, as above}.
//
// Other keys (tool_tokens, totals, think_time, ...) are skipped. Of a
// request's in tokens the floor(in/block_size) full blocks take the
// request's hash_ids in order (a missing one, and a partial last block,
// take an id of the request's own; surplus ids are ignored).
//
// A subagent's request times count from the play's start (absolute, as
// published AgentX traces are) or from its marker (relative, as raw
// kv-cache-tester traces are): o.basis says, or the file, where it shows
// which (wekaBasis); never a guess.
//
// The trace has no dependencies; they are made by one rule (wekaPlay.lower,
// docs/replay.md "Weka plays"), and every play starts at 0, as AISimulate
// starts them.
func readWeka(r io.Reader, o readOptions) ([]Request, error) {
	ls, err := newLines(r, o.maxLineBytes)
	if err != nil {
		return nil, err
	}
	var plays []*wekaPlay
	total := 0 // the plays' requests, for one allocation of them all
	seen := map[string]int{}
	var rd wire.ObjectReader
	for ls.next() {
		p := &wekaPlay{line: ls.n}
		if err := rd.Read(ls.line, p.field); err != nil {
			return nil, ls.fail(err)
		}
		if err := p.check(o.blockSize); err != nil {
			return nil, ls.fail(err)
		}
		if first, ok := seen[p.id]; ok {
			return nil, ls.fail(fmt.Errorf("field \"id\": play %q is on line %d too; a play's id names it in the report", p.id, first))
		}
		seen[p.id] = ls.n
		plays = append(plays, p)
		for i := range p.entries {
			total += max(1, len(p.entries[i].children))
		}
	}
	if err := ls.err(); err != nil {
		return nil, err
	}
	basis, err := wekaBasis(plays, o.basis)
	if err != nil {
		return nil, err
	}
	ids := newLocalIDs()
	reqs := make([]Request, 0, total)
	var scratch []byte
	for scope, p := range plays {
		if reqs, scratch, err = p.lower(reqs, basis, ids, scope, o.pack, scratch); err != nil {
			return nil, fmt.Errorf("trace line %d: play %q: %w", p.line, p.id, err)
		}
	}
	return reqs, nil
}

// wekaPlay is one line: a play as read.
type wekaPlay struct {
	line      int
	id        string
	blockSize uint64
	scope     string
	models    []string
	entries   []wekaEntry
	has       wekaKeys
}

// wekaEntry is a request or a subagent marker, as read: which it is is
// known only once its type is, which may come after its other keys.
type wekaEntry struct {
	typ      string
	t        float64 // s
	model    string
	in, out  uint64
	hashIDs  []uint64
	apiTime  float64 // s
	agentID  string
	subType  string
	status   string
	duration float64 // ms
	children []wekaEntry
	has      wekaKeys
}

// wekaKeys records which keys a record gave.
type wekaKeys uint32

const (
	keyT wekaKeys = 1 << iota
	keyType
	keyModel
	keyIn
	keyOut
	keyHashIDs
	keyAPITime
	keyAgentID
	keySubType
	keyStatus
	keyDuration
	keyRequests
	keyID
	keyBlockSize
	keyScope
)

// The keys only a request, and only a subagent, takes.
const (
	requestKeys  = keyModel | keyIn | keyOut | keyHashIDs | keyAPITime
	subagentKeys = keyAgentID | keySubType | keyStatus | keyDuration | keyRequests
)

var wekaPlayHints = wire.NewKeyHints("id", "models", "block_size", "hash_id_scope", "requests")
var wekaEntryHints = wire.NewKeyHints("t", "type", "model", "in", "out", "hash_ids", "api_time",
	"agent_id", "subagent_type", "status", "duration_ms", "requests", "models")

func (p *wekaPlay) field(key string, v *wire.Value) error {
	var err error
	switch key {
	case "id":
		p.has |= keyID
		p.id, err = v.Str()
	case "block_size":
		p.has |= keyBlockSize
		p.blockSize, err = v.U64()
	case "hash_id_scope":
		p.has |= keyScope
		p.scope, err = v.Str()
	case "models":
		err = v.Array(func(_ int, v *wire.Value) error {
			m, err := v.Str()
			if err == nil && m == "" {
				err = errors.New("a model is named, not \"\"")
			}
			p.models = append(p.models, m)
			return err
		})
	case "requests":
		p.has |= keyRequests
		err = v.Array(func(_ int, v *wire.Value) error {
			p.entries = append(p.entries, wekaEntry{})
			return p.entries[len(p.entries)-1].read(v, true)
		})
	default:
		return unknownKey(wekaPlayHints, "a Weka play", key, v)
	}
	return err
}

// read reads a request or, at the top level, a subagent marker.
func (e *wekaEntry) read(v *wire.Value, top bool) error {
	if err := v.Object(func(key string, v *wire.Value) error { return e.field(key, v, top) }); err != nil {
		return err
	}
	return e.check(top)
}

func (e *wekaEntry) field(key string, v *wire.Value, top bool) error {
	var err error
	switch key {
	case "t":
		e.has |= keyT
		e.t, err = seconds(v)
	case "type":
		e.has |= keyType
		e.typ, err = v.Str()
	case "model":
		e.has |= keyModel
		e.model, err = v.Str()
	case "in":
		e.has |= keyIn
		e.in, err = tokens(v, protocol.FieldInputTokens)
	case "out":
		e.has |= keyOut
		e.out, err = tokens(v, protocol.FieldOutputTokens)
	case "hash_ids":
		e.has |= keyHashIDs
		if !v.Null() {
			e.hashIDs, err = wire.AppendU64s(v, e.hashIDs)
		}
	case "api_time":
		if !v.Null() {
			e.has |= keyAPITime
			e.apiTime, err = seconds(v)
		}
	case "agent_id":
		e.has |= keyAgentID
		e.agentID, err = v.Str()
	case "subagent_type":
		e.has |= keySubType
		e.subType, err = v.Str()
	case "status":
		e.has |= keyStatus
		e.status, err = v.Str()
	case "duration_ms":
		if !v.Null() {
			e.has |= keyDuration
			e.duration, err = timeMS(v, "a duration")
		}
	case "models": // a subagent's own list, which its requests' models say again
		return v.Skip()
	case "requests":
		e.has |= keyRequests
		if !top {
			return errors.New("a subagent's request holds no requests: subagents do not nest in a Weka play")
		}
		err = v.Array(func(_ int, v *wire.Value) error {
			e.children = append(e.children, wekaEntry{})
			return e.children[len(e.children)-1].read(v, false)
		})
	default:
		return unknownKey(wekaEntryHints, "a Weka request or subagent", key, v)
	}
	return err
}

// seconds reads a time in seconds, as Weka's are, within what timeMS takes.
func seconds(v *wire.Value) (float64, error) {
	s, err := v.Float()
	if err == nil && !(s >= 0 && toMS(s) <= maxTraceMS) {
		err = fmt.Errorf("expected seconds from 0 to %d, got %v", uint64(maxTraceMS/1000), s)
	}
	return s, err
}

// toMS is a time in seconds in ms, rounded to the nanosecond as AISimulate
// rounds, so that 0.005 s is 5 ms and not 5.000000000000001.
func toMS(s float64) float64 { return math.Round(s*1e9) / 1e6 }

// check applies the rules between an entry's fields.
func (e *wekaEntry) check(top bool) error {
	if e.has&keyType == 0 {
		return errors.New(`field "type": missing: "s" or "n" for a request, "subagent" for a subagent`)
	}
	if e.has&keyT == 0 {
		return errors.New(`field "t": missing (seconds from the play's start)`)
	}
	switch e.typ {
	case "s", "n":
		switch {
		case e.has&subagentKeys != 0:
			return fmt.Errorf(`field "type": %q is a request, but the record has a subagent's fields (agent_id, status, requests, ...)`, e.typ)
		case e.has&keyModel == 0 || e.model == "":
			return errors.New(`field "model": missing: a request names its model`)
		case e.has&keyIn == 0:
			return errors.New(`field "in": missing`)
		case e.in == 0:
			return errors.New(`field "in": a request has a prompt of at least 1 token`)
		case e.has&keyOut == 0:
			return errors.New(`field "out": missing (0 is a prefill-only request)`)
		}
	case "subagent":
		switch {
		case !top:
			return errors.New(`field "type": a subagent's requests are "s" or "n": subagents do not nest`)
		case e.has&requestKeys != 0:
			return errors.New(`field "type": "subagent" is a subagent, but the record has a request's fields (model, in, out, hash_ids, api_time)`)
		case e.agentID == "":
			return errors.New(`field "agent_id": missing: a subagent names its agent`)
		case e.has&keySubType == 0:
			return errors.New(`field "subagent_type": missing`)
		case e.status != "completed" && e.status != "async_launched":
			return fmt.Errorf(`field "status": %q: replay takes completed and async_launched subagents, not failed ones`, e.status)
		case len(e.children) == 0:
			return errors.New(`field "requests": a subagent without requests would be a wait on something the trace does not hold`)
		}
	default:
		return fmt.Errorf(`field "type": %q: expected "s", "n" or "subagent"`, e.typ)
	}
	return nil
}

// check applies the rules of a play's own fields.
func (p *wekaPlay) check(blockSize uint64) error {
	switch {
	case p.has&keyID == 0 || p.id == "":
		return errors.New(`field "id": missing: a play has an id`)
	case p.has&keyBlockSize == 0 || p.blockSize == 0:
		return errors.New(`field "block_size": missing: tokens per hash id, at least 1`)
	case p.blockSize != blockSize:
		return fmt.Errorf(`field "block_size": the trace's blocks are %d tokens, the replay's --block-size is %d: a trace's own block size is authoritative (give --block-size %d, or none)`,
			p.blockSize, blockSize, p.blockSize)
	case p.scope != "local":
		return fmt.Errorf(`field "hash_id_scope": %q: the only scope is "local" (a play's ids are its own)`, p.scope)
	case p.has&keyRequests == 0 || !slices.ContainsFunc(p.entries, func(e wekaEntry) bool { return e.typ != "subagent" }):
		return errors.New(`field "requests": a play has at least one request of its main agent`)
	}
	if len(p.models) > 0 {
		check := func(path string, e *wekaEntry) error {
			if !slices.Contains(p.models, e.model) {
				return fmt.Errorf("field %q: model %q is not one of the play's models %q", path+".model", e.model, p.models)
			}
			return nil
		}
		for i := range p.entries {
			e := &p.entries[i]
			if e.typ != "subagent" {
				if err := check(fmt.Sprintf("requests[%d]", i), e); err != nil {
					return err
				}
			}
			for j := range e.children {
				if err := check(fmt.Sprintf("requests[%d].requests[%d]", i, j), &e.children[j]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// joinEpsilon is the slack, in seconds, of Weka's comparisons of times,
// which are written in seconds with float noise: AISimulate's.
const joinEpsilon = 1e-6

// wekaBasis is the nested basis of a file: the one asked for, each child
// checked against it, or else the file's, where its times show it. A
// child before its marker can only be relative; a child within its
// subagent's interval (t to t + duration_ms) read as absolute, but after
// its end read as relative, can only be absolute. A file that shows neither, with subagents that have
// requests, is refused: the two readings give different replays.
func wekaBasis(plays []*wekaPlay, asked NestedBasis) (NestedBasis, error) {
	var relative, absolute string // where the file shows one, for a message
	var undecided string
	for _, p := range plays {
		for i := range p.entries {
			e := &p.entries[i]
			for j := range e.children {
				c := &e.children[j]
				where := fmt.Sprintf("trace line %d: play %q: requests[%d].requests[%d]", p.line, p.id, i, j)
				if c.t < e.t-joinEpsilon && relative == "" {
					relative = where
				}
				if e.has&keyDuration != 0 && c.t > e.duration/1000+joinEpsilon && c.t <= e.t+e.duration/1000+joinEpsilon && absolute == "" {
					absolute = where
				}
				if undecided == "" {
					undecided = where
				}
			}
		}
	}
	switch {
	case asked == BasisAbsolute && relative != "":
		return "", fmt.Errorf("%s: starts before its subagent's marker, which no absolute time can (--weka-nested-basis absolute)", relative)
	case asked == BasisRelative && absolute != "":
		return "", fmt.Errorf("%s: read as relative, it would start after its subagent ended (--weka-nested-basis relative)", absolute)
	case asked != BasisFromFile:
		return asked, nil
	case relative != "" && absolute != "":
		return "", fmt.Errorf("%s: starts before its marker, so times look relative, but %s would start after its subagent ended if they were: give --weka-nested-basis", relative, absolute)
	case relative != "":
		return BasisRelative, nil
	case absolute != "":
		return BasisAbsolute, nil
	case undecided != "":
		return "", fmt.Errorf("%s: the file does not show whether a subagent's request times count from the play's start or from its marker: give --weka-nested-basis absolute (published AgentX traces) or relative (raw kv-cache-tester traces)", undecided)
	}
	return BasisAbsolute, nil // no subagent has a request: the basis changes nothing
}

// wekaSubagent is a subagent's place in its play's timeline.
type wekaSubagent struct {
	owner int     // its owner's place in the main agent's line
	end   float64 // ms: its marker's t plus duration_ms
	last  int32   // its last request
}

// lower appends the play's requests to reqs, its dependencies made by the
// rule:
//
//   - the requests of a line (the main agent, or one subagent) run in the
//     order of their t (ties in the file's order): each after the one
//     before it completes;
//   - a subagent's first request after its owner, the main agent's latest
//     request before its marker in the file, is dispatched (a spawn);
//   - a main agent's request also waits for every subagent whose interval,
//     its marker's t to t + duration_ms (without duration_ms: its
//     requests' latest end), ended by the request's t: ended being its
//     last request's completion (a join). A subagent is waited for by the
//     first request after its owner that starts once it ended, and by the
//     later ones through that one;
//   - once all are met, the request is released after its t minus the
//     latest trace time of what it waited for (a request's end, t +
//     api_time; a subagent's end; the owner's t, for a spawn), or at
//     once if that is negative: the recorded think or tool time.
//
// A subagent waits only on its owner, as it does in the agent: a
// sibling's end is not something it waits for. Times are compared with
// AISimulate's slack of a microsecond.
func (p *wekaPlay) lower(reqs []Request, basis NestedBasis, ids *localIDs, scope int, pack bool, scratch []byte) ([]Request, []byte, error) {
	base := int32(len(reqs))
	var start, end []float64 // ms, a request's t and t + api_time, by its index from base
	var main []int32
	var subs []wekaSubagent
	var subLines [][]int32
	owner, ownerEntry := int32(-1), -1
	var buf []protocol.LocalBlockHash
	add := func(e *wekaEntry, t float64, id, conversation string) int32 {
		i := int32(len(reqs))
		r := Request{ID: id, InputTokens: e.in, OutputTokens: e.out, Agent: &Agent{Play: p.id, Conversation: conversation}}
		buf = buf[:0]
		full := e.in / p.blockSize
		for b := range blocksOf(e.in, p.blockSize) {
			if b < full && b < uint64(len(e.hashIDs)) {
				buf = append(buf, ids.id(scope, e.hashIDs[b]))
			} else {
				buf = append(buf, ids.private()) // a partial block, or an id the trace lacks
			}
		}
		scratch = r.keepIDs(buf, pack, scratch)
		reqs = append(reqs, r)
		start, end = append(start, toMS(t)), append(end, toMS(t+e.apiTime))
		return i
	}
	for i := range p.entries {
		e := &p.entries[i]
		prefix := p.id + ":outer:" + strconv.Itoa(i)
		if e.typ != "subagent" {
			owner, ownerEntry = add(e, e.t, prefix, "root"), i
			main = append(main, owner)
			continue
		}
		if owner < 0 {
			return nil, nil, fmt.Errorf("requests[%d]: a subagent before any request of the main agent: nothing spawned it", i)
		}
		if ot := p.entries[ownerEntry].t; e.t < ot {
			return nil, nil, fmt.Errorf("requests[%d]: the subagent's marker (t %v) is before its owner, requests[%d] (t %v), spawned it", i, e.t, ownerEntry, ot)
		}
		var line []int32
		latest := e.t
		conv := "subagent:" + strconv.Itoa(i) + ":" + e.agentID
		for j := range e.children {
			c := &e.children[j]
			t := max(c.t, e.t) // absolute, within the slack wekaBasis allows
			if basis == BasisRelative {
				t = e.t + c.t
			}
			if e.has&keyDuration != 0 && t > e.t+e.duration/1000+joinEpsilon {
				return nil, nil, fmt.Errorf("requests[%d].requests[%d]: starts at t %v, after its subagent's end (t %v + duration_ms %v): duration_ms understates its own requests", i, j, t, e.t, e.duration)
			}
			line = append(line, add(c, t, prefix+":inner:"+strconv.Itoa(j), conv))
			latest = max(latest, t+c.apiTime)
		}
		sortLine(line, start, base)
		endMS := toMS(latest)
		if e.has&keyDuration != 0 {
			endMS = toMS(e.t + e.duration/1000)
		}
		subs = append(subs, wekaSubagent{owner: int(owner - base), end: endMS, last: line[len(line)-1]})
		subLines = append(subLines, line)
	}
	sortLine(main, start, base)
	pos := make([]int, len(start)) // a main request's place in its line
	for k, i := range main {
		pos[i-base] = k
	}
	joins := make([][]wekaSubagent, len(main)) // what each main request joins
	for _, s := range subs {
		from := pos[s.owner] + 1
		at, _ := slices.BinarySearchFunc(main[from:], s.end, func(i int32, end float64) int {
			return cmpFloat(start[i-base]+joinEpsilon*1000, end)
		})
		if at += from; at < len(main) {
			joins[at] = append(joins[at], s)
		}
	}
	for k, i := range main {
		r := &reqs[i]
		if k == 0 {
			r.Arrival = 0 // a play starts at 0, as AISimulate starts every play
			continue
		}
		prev := main[k-1]
		deps := []Dependency{{On: prev, Trigger: OnCompletion, Relation: Sequence}}
		latest := end[prev-base]
		for _, s := range joins[k] {
			deps = append(deps, Dependency{On: s.last, Trigger: OnCompletion, Relation: Join})
			latest = max(latest, s.end)
		}
		setDelay(r, deps, start[i-base]-latest)
	}
	for s, line := range subLines {
		for k, i := range line {
			if k == 0 {
				o := main[pos[subs[s].owner]]
				setDelay(&reqs[i], []Dependency{{On: o, Trigger: OnDispatch, Relation: Spawn}}, start[i-base]-start[o-base])
				continue
			}
			prev := line[k-1]
			setDelay(&reqs[i], []Dependency{{On: prev, Trigger: OnCompletion, Relation: Sequence}}, start[i-base]-end[prev-base])
		}
	}
	return reqs, scratch, nil
}

// setDelay gives every dependency the request's one delay, the think or
// tool time (never negative): released when all are met, plus it.
func setDelay(r *Request, deps []Dependency, gapMS float64) {
	g := max(0, math.Round(gapMS*1e6)/1e6)
	for k := range deps {
		deps[k].DelayMS = g
	}
	r.Deps = deps
}

// sortLine puts a line's requests in the order of their t, ties in the
// file's order.
func sortLine(line []int32, start []float64, base int32) {
	slices.SortStableFunc(line, func(a, b int32) int { return cmpFloat(start[a-base], start[b-base]) })
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
