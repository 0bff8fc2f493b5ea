package replay

import (
	"fmt"
	"io"
	"strconv"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// readMooncakeDelta reads a Mooncake Delta trace (--trace-format
// mooncake-delta): Mooncake's lines, with ReadMooncake's fields and rules
// (comments, blank lines, exact keys, limits), grouped into sessions by
// session_id in file order, a line without one a session of its own. A
// session's first line is its whole first prompt; each later line's
// input_length and hash_ids are only the new input of its turn, appended,
// as AISimulate replays this format, to the previous turn's prompt and
// output: turn k's prompt is prompt(k-1) ++ output(k-1) ++ delta(k).
//
//   - A first line is a Mooncake line that must have a prompt (input_length
//     at least 1) and a timestamp, and no delay: there is no turn before it
//     to count from.
//   - A later line is always a later turn, sent once the previous turn has
//     ended: after its delay or delay_ms if given, else after its timestamp
//     minus the session's previous line's if both have one (a negative
//     difference is refused; an earlier line's timestamp is not used, as
//     the gap from it holds the turns between), else at once. Its timestamp
//     is otherwise optional.
//   - Its input_length is the new tokens, which may be 0 (the prompt is
//     then the previous prompt and its output, a "continue"; it still has
//     a prompt): the request's input is the previous input, plus its output,
//     plus these, at most protocol.MaxTokens.
//   - Hash ids: a first line's name its blocks, as Mooncake's do, one id
//     space across the file, so sessions opening with the same blocks share
//     them. A block's id stands for all its prefix (Dynamo's and Mooncake's
//     block hashes are chained), so turn k keeps the ids of the full blocks
//     of turn k-1's prompt, which is a prefix of its own, and every block
//     after them (turn k-1's partial last block, its output, the new input)
//     gets an id of the session's own, whatever ids the line names: no
//     other session's block follows this session's history. A later line's
//     hash_ids must still be one per block of its new tokens, or none (the
//     content not known). A session whose first line has no hash_ids has
//     none on any turn.
//   - parent_session_id is the session's: given on a later line, it must be
//     the first line's (a session does not change parents mid-way); absent,
//     the first line's is kept. priority, strict_priority, policy_class,
//     role and lora_name are each line's own, as Mooncake's.
//
// Each request's ID is "r" and its index, as Mooncake's.
func readMooncakeDelta(r io.Reader, o readOptions) ([]Request, error) {
	ls, err := newLines(r, o.maxLineBytes)
	if err != nil {
		return nil, err
	}
	var out []Request
	var rd wire.ObjectReader
	var m mooncakeLine
	var raw, ids []protocol.LocalBlockHash // a line's hash_ids as read; the request's as made
	var scratch []byte
	local := newLocalIDs()
	sessions := map[string]deltaSession{}
	for ls.next() {
		line := ls.line
		if line[0] == '#' {
			continue
		}
		m = mooncakeLine{req: Request{ID: "r" + strconv.Itoa(len(out))}, ids: raw[:0]}
		if err := rd.Read(line, m.field); err != nil {
			return nil, ls.fail(err)
		}
		req := &m.req
		prev, later := sessions[req.Session] // never "": a line without a session_id is a session of one
		// A later turn needs no timestamp (its delay is derived, else 0),
		// where Mooncake's check asks for one or a delay.
		stamped := m.hasArrive
		m.hasArrive = m.hasArrive || later
		if err := m.check(o.blockSize); err != nil {
			return nil, ls.fail(err)
		}
		if req.HashIDs != nil { // its storage, grown, serves the next line
			raw = req.HashIDs
		}
		if later {
			ids, err = prev.next(req, &out[prev.last], stamped, o.blockSize, local, ids)
		} else {
			ids, err = deltaFirst(&m, local, ids)
		}
		if err != nil {
			return nil, ls.fail(err)
		}
		scratch = req.keepIDs(ids, o.pack, scratch)
		if req.Session != "" {
			sessions[req.Session] = deltaSession{last: len(out), line: ls.n, stamp: req.Arrival, stamped: stamped, parent: req.ParentSession}
		}
		out = append(out, *req)
	}
	return out, ls.err()
}

// deltaSession is what a session's next line is read against.
type deltaSession struct {
	last    int // its latest request's index, read from that line
	line    int
	stamp   float64 // that line's timestamp, if stamped
	stamped bool
	parent  string
}

// deltaFirst makes a session's first request of its line, its ids
// interned into ids, which it returns.
func deltaFirst(m *mooncakeLine, local *localIDs, ids []protocol.LocalBlockHash) ([]protocol.LocalBlockHash, error) {
	req := &m.req
	switch {
	case req.InputTokens == 0:
		return ids, fmt.Errorf(`field "input_length": a session's first line is its whole prompt, which needs at least 1 token`)
	case m.delay != nil:
		return ids, fmt.Errorf(`field "delay": a session's first line has no turn before it to count a delay from; give it a timestamp`)
	case m.delayMS != nil:
		return ids, fmt.Errorf(`field "delay_ms": a session's first line has no turn before it to count a delay from; give it a timestamp`)
	}
	ids = ids[:0]
	for _, h := range req.HashIDs {
		ids = append(ids, local.id(0, uint64(h)))
	}
	return ids, nil
}

// next makes req, read from a later line of s whose previous request is
// prev, a turn of s: its delay, its whole prompt, its parent. Its ids are
// made in ids, which it returns; stamped says the line has a timestamp.
func (s *deltaSession) next(req, prev *Request, stamped bool, blockSize uint64, local *localIDs, ids []protocol.LocalBlockHash) ([]protocol.LocalBlockHash, error) {
	if req.DelayMS == nil {
		d := 0.0
		if stamped && s.stamped {
			if d = req.Arrival - s.stamp; d < 0 {
				return ids, fmt.Errorf(`field "timestamp": %v ms is before %v ms, the timestamp of session %q's previous line (line %d): a later turn cannot be sent before it`,
					req.Arrival, s.stamp, req.Session, s.line)
			}
		}
		req.DelayMS = &d
	}
	switch {
	case req.ParentSession == "":
		req.ParentSession = s.parent
	case req.ParentSession != s.parent:
		return ids, fmt.Errorf(`field "parent_session_id": %q, but session %q began with parent %q; a session keeps its parent`,
			req.ParentSession, req.Session, s.parent)
	}
	delta := req.InputTokens
	req.InputTokens += prev.InputTokens + prev.OutputTokens
	if err := checkValue(&protocol.Command{InputTokens: &req.InputTokens}, protocol.FieldInputTokens); err != nil {
		return ids, fmt.Errorf(`field "input_length": the prompt (the previous turn's %d tokens, its output's %d and this line's %d) is too long: %w`,
			prev.InputTokens, prev.OutputTokens, delta, err)
	}
	ids = prev.appendIDs(ids[:0])
	if len(ids) == 0 {
		return ids, nil
	}
	ids = ids[:prev.InputTokens/blockSize]
	for range blocksOf(req.InputTokens, blockSize) - uint64(len(ids)) {
		ids = append(ids, local.private())
	}
	return ids, nil
}
