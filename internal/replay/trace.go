// Package replay drives the router with a trace through a simulated
// cluster, as a host would: the same wire commands, the same clock rules,
// and a report of what routing did to cache reuse, queueing and load.
package replay

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// Request is one request of a trace.
type Request struct {
	ID             string
	Arrival        float64 // ms; a later turn's is set when its previous turn ends
	InputTokens    uint64
	OutputTokens   uint64
	HashIDs        []protocol.LocalBlockHash // one per block of BlockSize tokens; the last may be partial
	Session        string                    // "" when none
	DelayMS        *float64                  // a later turn: arrives this long after its session's previous turn ends
	ParentSession  string                    // "" when none
	Priority       *float64
	StrictPriority *int64
	// PolicyClass names the router policy class it asks for ("" when none:
	// the default class, as Dynamo takes an empty name).
	PolicyClass string
	Role        protocol.Role // "" when none
	// LoRAName is the LoRA adapter it runs under ("" when none: the base
	// model). Experiment.Load salts its HashIDs by it (saltAdapters).
	LoRAName string
	// Deps, in an agentic trace, are what it waits for (graph.go): it is
	// released when each is met, after the longest of their delays; a
	// request without any (and without DelayMS) arrives at Arrival.
	Deps []Dependency
	// Agent is its place in an agent play (nil outside agentic traces).
	Agent *Agent
	// packed, when set, holds the ids in HashIDs' stead (nil then), as
	// Experiment.Load reads a trace: each id's difference from the one
	// before as a varint (binary.AppendVarint), so that a trace whose ids
	// run on (a 16-token trace's are mostly one past the one before) holds
	// them in a byte each, not eight. A replay unpacks a request's for its
	// time in flight.
	packed []byte
}

// appendIDs appends r's hash ids to buf.
func (r *Request) appendIDs(buf []protocol.LocalBlockHash) []protocol.LocalBlockHash {
	if r.packed == nil {
		return append(buf, r.HashIDs...)
	}
	var id uint64
	for p, i := r.packed, 0; i < len(p); {
		var d int64
		if c := p[i]; c < 0x80 { // a difference of one byte, as most are: binary.Varint's decoding inline
			d = int64(c>>1) ^ -int64(c&1)
			i++
		} else {
			var n int
			d, n = binary.Varint(p[i:])
			i += n
		}
		id += uint64(d)
		buf = append(buf, protocol.LocalBlockHash(id))
	}
	return buf
}

// keepIDs sets r's hash ids to ids, which the caller reuses: packed when
// asked and smaller (scratch is the storage to pack in, returned for the
// next request), else copied at their length.
func (r *Request) keepIDs(ids []protocol.LocalBlockHash, pack bool, scratch []byte) []byte {
	r.HashIDs, r.packed = nil, nil
	if len(ids) == 0 {
		return scratch
	}
	if pack {
		scratch = scratch[:0]
		var prev uint64
		for _, h := range ids {
			scratch = binary.AppendVarint(scratch, int64(uint64(h)-prev))
			prev = uint64(h)
		}
		if len(scratch) < 8*len(ids) {
			r.packed = slices.Clone(scratch)
			return scratch
		}
	}
	r.HashIDs = slices.Clone(ids)
	return scratch
}

// ReadMooncake reads a Mooncake JSONL trace, one request a line; blank
// lines and lines starting with # are skipped, and an error names the line
// (counting every line) and the field. The fields:
//
//   - timestamp: arrival, ms from 0 to 2^52; required but on a later turn;
//   - input_length, output_length: tokens, at most 2^40 (as place takes);
//   - hash_ids: unsigned 64-bit block ids, one per blockSize tokens of the
//     prompt, the last block possibly partial;
//   - session_id, parent_session_id: a string, or an integer kept as its
//     digits;
//   - delay or delay_ms (not both): makes the line a later turn of its
//     session, arriving this long (ms, from 0 to 2^52) after the session's
//     previous turn ends;
//   - priority: a number of magnitude at most 2^53; strict_priority: a
//     signed 64-bit integer; role: aggregated, prefill or decode (as place
//     takes them);
//   - policy_class: a string, the router policy class the request asks for
//     ("" is none: the default class). Which names a config takes is the
//     config's, so none is refused here (Experiment.Load checks them
//     against each contender's classes).
//   - lora_name: a string of at most protocol.MaxLoRANameBytes bytes, the
//     LoRA adapter the request runs under ("" is none: the base model), as
//     place takes it. Its hash_ids are then salted by the adapter when the
//     replay loads them (saltAdapters), as Dynamo salts its blocks.
//
// null is the same as an absent field, as in a command. Each field may be
// given once, with its exact key: other keys, which traces in the wild
// carry, are skipped whatever their value, but a key that differs from a
// field's only in case or in '_' and '-' ("INPUT_LENGTH", "inputLength",
// "hash-ids") is an error. Integers are exact: one past its type's range is
// an error, never wrapped. Lines are read by wire's strict reader, not a
// reflection decoder, for those rules. A line longer than
// wire.DefaultMaxLineBytes (serve's default line limit) is refused;
// ReadMooncakeDigest takes another limit.
func ReadMooncake(r io.Reader, blockSize uint64) ([]Request, error) {
	reqs, _, err := ReadMooncakeDigest(r, blockSize, wire.DefaultMaxLineBytes)
	return reqs, err
}

// ReadMooncakeDigest reads a trace as ReadMooncake does, streaming r: it
// holds at most maxLineBytes of a line (its newline not counted, a \r
// before it counted, as serve counts), refuses a longer line by its number
// without reading further, and returns with the requests the SHA-256, in
// hex, of every byte of r, which it reads to its end. A trace is thus read
// once, from a file or a pipe alike, in memory its requests and one line
// take.
func ReadMooncakeDigest(r io.Reader, blockSize uint64, maxLineBytes int) ([]Request, string, error) {
	return readMooncake(r, blockSize, maxLineBytes, nil, false)
}

// readMooncake is ReadMooncakeDigest with accept, if set, applied to each
// request as its line is read: what it refuses is refused by the line's
// number, which a request does not keep. pack keeps the requests' ids
// packed where that is smaller (Request.packed).
func readMooncake(r io.Reader, blockSize uint64, maxLineBytes int, accept func(*Request) error, pack bool) ([]Request, string, error) {
	return readTrace(r, FormatMooncake, readOptions{blockSize: blockSize, maxLineBytes: maxLineBytes, accept: accept, pack: pack})
}

// readMooncakeLines reads a Mooncake trace's requests, as ReadMooncake
// says; lines starting with # are comments.
func readMooncakeLines(r io.Reader, o readOptions) ([]Request, error) {
	ls, err := newLines(r, o.maxLineBytes)
	if err != nil {
		return nil, err
	}
	var out []Request
	var rd wire.ObjectReader
	var m mooncakeLine
	// A line's ids are read into ids, and kept at their length or packed.
	var ids []protocol.LocalBlockHash
	var scratch []byte
	sessions := map[string]bool{}
	for ls.next() {
		line := ls.line
		if line[0] == '#' {
			continue
		}
		m = mooncakeLine{req: Request{ID: "r" + strconv.Itoa(len(out))}, ids: ids[:0], detected: o.detected}
		if err := rd.Read(line, m.field); err != nil {
			return nil, ls.fail(err)
		}
		if err := m.check(o.blockSize); err != nil {
			return nil, ls.fail(err)
		}
		if o.accept != nil {
			if err := o.accept(&m.req); err != nil {
				return nil, ls.fail(err)
			}
		}
		if m.req.HashIDs != nil { // its storage, grown, serves the next line
			ids = m.req.HashIDs
		}
		scratch = m.req.keepIDs(m.req.HashIDs, o.pack, scratch)
		// A later turn follows its session's previous turn: one must come
		// before it, or it would never arrive.
		if s := m.req.Session; s != "" {
			if m.req.DelayMS != nil && !sessions[s] {
				return nil, ls.fail(fmt.Errorf("field \"delay_ms\": the first turn of session %q has a delay, which counts from a previous turn; give it a timestamp", s))
			}
			sessions[s] = true
		}
		out = append(out, m.req)
	}
	return out, ls.err()
}

// digestReader passes r's bytes on and hashes them (SHA-256) on a
// goroutine of its own, so that hashing a trace runs beside parsing it: on
// one core it was a fifth of reading a 16-token trace. The chunks read go
// to the hasher over full and come back over free, so a few buffers serve
// the whole trace.
type digestReader struct {
	r          io.Reader
	full, free chan []byte
	done       chan struct{}
	h          hash.Hash // the hasher's until done is closed
	stopped    bool
}

const digestChunks = 4

func newDigestReader(r io.Reader) *digestReader {
	d := &digestReader{r: r, full: make(chan []byte, digestChunks), free: make(chan []byte, digestChunks),
		done: make(chan struct{}), h: sha256.New()}
	for range digestChunks {
		d.free <- nil
	}
	go func() {
		defer close(d.done)
		for b := range d.full {
			d.h.Write(b)
			d.free <- b[:0]
		}
	}()
	return d
}

func (d *digestReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if n > 0 {
		d.full <- append(<-d.free, p[:n]...)
	}
	return n, err
}

// stop ends the hashing, once every chunk sent is hashed.
func (d *digestReader) stop() {
	if !d.stopped {
		d.stopped = true
		close(d.full)
		<-d.done
	}
}

// sum is the digest of every byte read.
func (d *digestReader) sum() []byte {
	d.stop()
	return d.h.Sum(nil)
}

// maxTraceMS bounds a timestamp and a delay: half the latest time the
// router takes (protocol.MaxNumber), so that a time plus a delay is still
// one it takes. (A chain of many long turns can still pass it; the router
// then refuses the command, and the replay stops saying so.)
const maxTraceMS = protocol.MaxNumber / 2

// mooncakeLine is one line as it is read.
type mooncakeLine struct {
	req                            Request
	ids                            []protocol.LocalBlockHash // storage hash_ids is read into, reused line to line
	hasInput, hasOutput, hasArrive bool
	delay, delayMS                 *float64
	detected                       bool // readOptions.detected
}

// traceKeys are the fields of a trace line.
var traceKeys = []string{"timestamp", "input_length", "output_length", "hash_ids", "session_id",
	"parent_session_id", "delay", "delay_ms", "priority", "strict_priority", "policy_class", "role", "lora_name"}

// traceHints suggest the field a mistyped key meant.
var traceHints = wire.NewKeyHints(traceKeys...)

// field reads the value of one key of the line.
func (m *mooncakeLine) field(key string, v *wire.Value) error {
	r := &m.req
	var err error
	switch key {
	case "timestamp":
		if !v.Null() {
			r.Arrival, err = timeMS(v, "a time")
			m.hasArrive = err == nil
		}
	case "input_length":
		if !v.Null() {
			r.InputTokens, err = tokens(v, protocol.FieldInputTokens)
			m.hasInput = err == nil
		}
	case "output_length":
		if !v.Null() {
			r.OutputTokens, err = tokens(v, protocol.FieldOutputTokens)
			m.hasOutput = err == nil
		}
	case "hash_ids":
		if !v.Null() {
			r.HashIDs, err = wire.AppendU64s(v, m.ids)
		}
	case "session_id":
		r.Session, err = sessionID(v)
	case "parent_session_id":
		r.ParentSession, err = sessionID(v)
	case "delay", "delay_ms":
		if !v.Null() {
			var d float64
			d, err = timeMS(v, "a delay")
			if key == "delay" {
				m.delay = &d
			} else {
				m.delayMS = &d
			}
		}
	case "priority":
		if !v.Null() {
			var p float64
			if p, err = v.Float(); err == nil {
				err = checkValue(&protocol.Command{Priority: &p}, protocol.FieldPriority)
				r.Priority = &p
			}
		}
	case "strict_priority":
		if !v.Null() {
			var p int64
			p, err = v.Int64()
			r.StrictPriority = &p
		}
	case "policy_class":
		if !v.Null() {
			r.PolicyClass, err = v.Str()
		}
	case "lora_name":
		if !v.Null() {
			if r.LoRAName, err = v.Str(); err == nil {
				err = checkValue(&protocol.Command{LoRAName: &r.LoRAName}, protocol.FieldLoRAName)
			}
		}
	case "role":
		if !v.Null() {
			var s string
			if s, err = v.Str(); err == nil {
				r.Role = protocol.Role(s)
				err = checkValue(&protocol.Command{Role: r.Role}, protocol.FieldRole)
			}
		}
	default:
		if m.detected && slices.Contains(agenticOnlyKeys, key) {
			return errors.New("is Agentic Mooncake v1's (a request that waits for others): give --trace-format agentic_mooncake")
		}
		if k, ok := traceHints.Suggest(key); ok {
			return fmt.Errorf("is not a trace field (did you mean %q?)", k)
		}
		return v.Skip() // an extra field of the trace's maker
	}
	return err
}

// timeMS reads a time or a delay in ms.
func timeMS(v *wire.Value, what string) (float64, error) {
	t, err := v.Float()
	if err == nil && !(t >= 0 && t <= maxTraceMS) {
		err = fmt.Errorf("expected %s from 0 to %d ms, got %v", what, uint64(maxTraceMS), t)
	}
	return t, err
}

// tokens reads a token count, which place takes up to protocol.MaxTokens.
func tokens(v *wire.Value, f protocol.Field) (uint64, error) {
	n, err := v.U64()
	if err == nil {
		err = checkValue(&protocol.Command{InputTokens: &n, OutputTokens: &n}, f)
	}
	return n, err
}

// checkValue applies place's check of one field.
func checkValue(c *protocol.Command, f protocol.Field) error {
	if msg := protocol.CheckValue(c, f); msg != "" {
		return errors.New(msg)
	}
	return nil
}

// sessionID reads a session id: a string, or an integer, which is kept as
// its digits; "" for null.
func sessionID(v *wire.Value) (string, error) {
	switch v.Kind() {
	case wire.KindNull:
		v.Null()
		return "", nil
	case wire.KindString:
		return v.Str()
	case wire.KindNumber:
		tok, err := v.Number()
		if err == nil && strings.ContainsAny(tok, ".eE") {
			err = fmt.Errorf("expected a string or an integer, got %s", tok)
		}
		return tok, err
	}
	return "", v.Expected("a string or an integer")
}

// check applies the rules between the fields of a line.
func (m *mooncakeLine) check(blockSize uint64) error {
	r := &m.req
	switch {
	case !m.hasInput:
		return fmt.Errorf("input_length is missing")
	case !m.hasOutput:
		return fmt.Errorf("output_length is missing")
	case m.delay != nil && m.delayMS != nil:
		return fmt.Errorf(`field "delay_ms": give delay or delay_ms, not both`)
	}
	r.DelayMS = m.delayMS
	if r.DelayMS == nil {
		r.DelayMS = m.delay
	}
	if !m.hasArrive && r.DelayMS == nil {
		return fmt.Errorf("timestamp is missing (and no delay_ms makes this a later turn)")
	}
	// As place counts blocks: a partial last block counts, and no sum
	// overflows whatever blockSize is.
	// Each hash_id is one block of the prompt, so their count says the
	// block size the trace was made with: fewer than the prompt's blocks
	// means a smaller --block-size than the trace's (Mooncake's is 512),
	// which would read each hash as a fraction of what it stands for. An
	// empty list is a prompt whose content is not known.
	if blocks := r.InputTokens/blockSize + min(r.InputTokens%blockSize, 1); len(r.HashIDs) > 0 && uint64(len(r.HashIDs)) != blocks {
		return fmt.Errorf("%d hash_ids for input_length %d: it takes %d blocks of %d tokens (is --block-size the trace's? Mooncake traces use 512)",
			len(r.HashIDs), r.InputTokens, blocks, blockSize)
	}
	if r.DelayMS != nil && r.Session == "" {
		return fmt.Errorf("delay_ms needs a session_id (it counts from the session's previous turn)")
	}
	return nil
}
