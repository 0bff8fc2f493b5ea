package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// Format is a trace format replay reads (--trace-format).
type Format string

const (
	// FormatAuto tells the format from the first record (DetectFormat).
	FormatAuto Format = ""
	// FormatMooncake is Mooncake's JSONL: a request a line (trace.go).
	FormatMooncake Format = "mooncake"
	// FormatMooncakeDelta is Mooncake's rows whose later turns carry only
	// their new input (delta.go).
	FormatMooncakeDelta Format = "mooncake-delta"
	// FormatWeka is the AgentX / kv-cache-tester plays: one a line (weka.go).
	FormatWeka Format = "weka"
	// FormatAgenticMooncake is Agentic Mooncake: v2 with its header, v1
	// without (agentic.go).
	FormatAgenticMooncake Format = "agentic_mooncake"
	// FormatDynamo is Dynamo's request-trace-v1 records, gzipped or not
	// (dynamo.go).
	FormatDynamo Format = "dynamo"
)

// Formats are the formats' names, in --help's order.
var Formats = []Format{FormatMooncake, FormatMooncakeDelta, FormatWeka, FormatAgenticMooncake, FormatDynamo}

// NestedBasis is what a Weka subagent's request times count from.
type NestedBasis string

const (
	// BasisFromFile takes the basis from the file's evidence, where it is
	// conclusive (weka.go), and refuses it where it is not.
	BasisFromFile NestedBasis = ""
	// BasisAbsolute: the play's clock, as published AgentX traces are.
	BasisAbsolute NestedBasis = "absolute"
	// BasisRelative: from the subagent's marker, as raw kv-cache-tester
	// traces are.
	BasisRelative NestedBasis = "relative"
)

// ParseNestedBasis reads a --weka-nested-basis value ("": the file's).
func ParseNestedBasis(s string) (NestedBasis, error) {
	switch b := NestedBasis(s); b {
	case BasisFromFile, BasisAbsolute, BasisRelative:
		return b, nil
	}
	return "", fmt.Errorf("--weka-nested-basis %q: expected absolute or relative (or none: what the file shows)", s)
}

// readOptions are what a trace reader is given.
type readOptions struct {
	// blockSize is the replay's: a format that embeds one refuses a file
	// whose own differs (the caller has taken the file's when no
	// --block-size was given: EmbeddedBlockSize).
	blockSize    uint64
	maxLineBytes int
	basis        NestedBasis // weka
	// accept, if set, is applied to each request as it is read; what it
	// refuses is refused by the request's record.
	accept func(*Request) error
	pack   bool // keep ids packed where that is smaller (Request.packed)
	// detected: the format was told from the content (DetectFormat), so a
	// Mooncake line with Agentic Mooncake v1's keys is refused.
	detected bool
}

// lines reads a trace a line at a time, as the Mooncake reader does: at
// most maxLineBytes a line (a longer one refused by its number), blank
// lines skipped, each numbered from 1 counting every line.
type lines struct {
	sc   *bufio.Scanner
	n    int
	max  int
	line []byte
}

func newLines(r io.Reader, maxLineBytes int) (*lines, error) {
	if maxLineBytes < 1 || maxLineBytes == math.MaxInt {
		return nil, fmt.Errorf("the line limit must be 1 to %d bytes, got %d", math.MaxInt-1, maxLineBytes)
	}
	sc := bufio.NewScanner(r)
	// The token may be maxLineBytes and its newline; a longer line stops
	// the scan with bufio.ErrTooLong, the buffer grown no further.
	sc.Buffer(make([]byte, min(1<<16, maxLineBytes+1)), maxLineBytes+1)
	return &lines{sc: sc, max: maxLineBytes}, nil
}

// next moves to the next line that is not blank, and reports whether
// there is one; err then says why not, if not the end.
func (l *lines) next() bool {
	for l.sc.Scan() {
		l.n++
		if l.line = bytes.TrimSpace(l.sc.Bytes()); len(l.line) > 0 {
			return true
		}
	}
	l.n++
	return false
}

// err is why the lines stopped before the end, if they did.
func (l *lines) err() error {
	switch err := l.sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		return fmt.Errorf("trace line %d: longer than %d bytes, the longest line taken (--max-line-bytes)", l.n, l.max)
	case err != nil:
		return fmt.Errorf("trace line %d: %w", l.n, err)
	}
	return nil
}

// fail names the line an error is about.
func (l *lines) fail(err error) error { return fmt.Errorf("trace line %d: %w", l.n, err) }

// localIDs gives hash ids scoped to a play (hash_id_scope local) ids of
// the replay's own, unique across the trace: an id of one play is never
// another's. It also makes private ids, for blocks no other request may
// share (a partial last block, a missing id), from the same count, so they
// never meet an interned one.
type localIDs struct {
	ids  map[scopedID]protocol.LocalBlockHash
	next protocol.LocalBlockHash
}

type scopedID struct {
	scope int // the play's index
	raw   uint64
}

func newLocalIDs() *localIDs { return &localIDs{ids: map[scopedID]protocol.LocalBlockHash{}} }

// id is the replay's id of the trace's id raw in scope.
func (l *localIDs) id(scope int, raw uint64) protocol.LocalBlockHash {
	k := scopedID{scope, raw}
	if h, ok := l.ids[k]; ok {
		return h
	}
	h := l.private()
	l.ids[k] = h
	return h
}

// private is an id no other block has.
func (l *localIDs) private() protocol.LocalBlockHash {
	l.next++
	return l.next
}

// blocksOf is how many blocks of blockSize tokens a prompt of n tokens
// fills, a partial last block counted.
func blocksOf(n, blockSize uint64) uint64 { return n/blockSize + min(n%blockSize, 1) }

// unknownKey skips a key no field of what has (a trace's maker's own), or
// refuses it if it is a slip of one ("blockSize" for "block_size").
func unknownKey(h wire.KeyHints, what, key string, v *wire.Value) error {
	if k, ok := h.Suggest(key); ok {
		return fmt.Errorf("is not %s field (did you mean %q?)", what, k)
	}
	return v.Skip()
}

// formatNames lists the formats for a message.
func formatNames() string {
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// ParseFormat reads a --trace-format value ("" or auto: detect).
func ParseFormat(s string) (Format, error) {
	if s == "" || s == "auto" {
		return FormatAuto, nil
	}
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("--trace-format %q: expected auto, %s", s, formatNames())
}

// readTrace reads a trace of format f (not FormatAuto), streaming r, and
// returns its requests and the SHA-256, in hex, of every byte of r. An
// agentic trace's graph is checked (checkGraph) before it is returned.
func readTrace(r io.Reader, f Format, o readOptions) ([]Request, string, error) {
	if o.blockSize == 0 {
		return nil, "", errors.New("the block size must be at least 1 token")
	}
	digest := newDigestReader(r)
	defer digest.stop()
	var reqs []Request
	var err error
	switch f {
	case FormatMooncake:
		reqs, err = readMooncakeLines(digest, o)
	case FormatMooncakeDelta:
		reqs, err = readMooncakeDelta(digest, o)
	case FormatWeka:
		reqs, err = readWeka(digest, o)
	case FormatAgenticMooncake:
		reqs, err = readAgenticMooncake(digest, o)
	case FormatDynamo:
		reqs, err = readDynamo(digest, o)
	default:
		return nil, "", fmt.Errorf("trace format %q: expected %s", f, formatNames())
	}
	if err == nil && len(reqs) == 0 {
		err = errNoRequests
	}
	if err == nil && len(reqs) > 0 && reqs[0].Agent != nil {
		err = checkGraph(reqs)
	}
	if err == nil && o.accept != nil && f != FormatMooncake { // a Mooncake line's request is accepted as it is read
		for i := range reqs {
			if err = o.accept(&reqs[i]); err != nil {
				err = fmt.Errorf("request %s: %w", reqs[i].ID, err)
				break
			}
		}
	}
	if err != nil {
		return nil, "", err
	}
	return reqs, hex.EncodeToString(digest.sum()), nil
}

// gzipMagic opens every gzip stream: of the formats, only Dynamo's
// request traces are written gzipped.
var gzipMagic = []byte{0x1f, 0x8b}

// sniffed is a trace's first record, its line, and whether the trace is
// gzip.
type sniffed struct {
	record []byte
	line   int
	gz     bool
}

// format is DetectFormat's, an error naming the record's line.
func (s sniffed) format() (Format, error) {
	f, err := DetectFormat(s.record, s.gz)
	if err != nil {
		return "", fmt.Errorf("trace line %d: %w", s.line, err)
	}
	return f, nil
}

// firstRecord reads r up to its first record, the first line that is not
// blank nor a # comment (decompressed, if r is gzip), and returns it, its
// and a reader of all of r's bytes, those read included, so
// that the trace is still read, and its digest taken, from its first
// byte. It reads at most maxLineBytes bytes past the record's start; no
// record in them is an error.
func firstRecord(r io.Reader, maxLineBytes int) (first sniffed, all io.Reader, err error) {
	var raw bytes.Buffer
	br := bufio.NewReader(io.TeeReader(r, &raw))
	src := io.Reader(br)
	if magic, _ := br.Peek(len(gzipMagic)); bytes.Equal(magic, gzipMagic) {
		z, err := gzip.NewReader(br)
		if err != nil {
			return first, nil, fmt.Errorf("the trace is gzip, but: %w", err)
		}
		src, first.gz = z, true
	}
	ls, err := newLines(src, maxLineBytes)
	if err != nil {
		return first, nil, err
	}
	for ls.next() {
		if ls.line[0] != '#' {
			first.record, first.line = bytes.Clone(ls.line), ls.n
			break
		}
	}
	if first.record == nil {
		if err := ls.err(); err != nil {
			return first, nil, err
		}
		return first, nil, errNoRequests
	}
	// What the tee took is what was read of r; the rest of r follows it
	// (not br's buffer, which the tee has already copied).
	return first, io.MultiReader(&raw, r), nil
}

// DetectFormat tells a trace's format from its first record, where that is
// unambiguous, in this order: gzip is Dynamo's (gz); a record whose schema
// is "dynamo.agentic_mooncake" is Agentic Mooncake v2's header, one whose
// schema (itself, or its event's) is "dynamo.request.trace.v1" Dynamo's; an
// object with requests and hash_id_scope is a Weka play; any other object
// is Mooncake's (whose reader, told the format was detected, refuses a
// line with Agentic Mooncake v1's keys, asking for --trace-format
// agentic_mooncake: a v1 root row is a Mooncake row, so only its later
// rows tell). mooncake-delta's rows are Mooncake's: it is never detected.
func DetectFormat(record []byte, gz bool) (Format, error) {
	if gz {
		return FormatDynamo, nil
	}
	var schema string
	var requests, scope bool
	var rd wire.ObjectReader
	err := rd.Read(record, func(key string, v *wire.Value) error {
		switch key {
		case "schema":
			if v.Kind() == wire.KindString {
				s, err := v.Str()
				schema = s
				return err
			}
		case "event":
			if v.Kind() == wire.KindObject {
				return v.Object(func(key string, v *wire.Value) error {
					if key == "schema" && v.Kind() == wire.KindString {
						s, err := v.Str()
						schema = s
						return err
					}
					return v.Skip()
				})
			}
		case "requests":
			requests = true
		case "hash_id_scope":
			scope = true
		}
		return v.Skip()
	})
	switch {
	case err != nil:
		return "", fmt.Errorf("telling the trace's format from its first record: %w (or give --trace-format)", err)
	case schema == agenticMooncakeSchema:
		return FormatAgenticMooncake, nil
	case schema == dynamoTraceSchema:
		return FormatDynamo, nil
	case schema != "":
		return "", fmt.Errorf("the first record's schema %q is none replay reads (%q, %q): give --trace-format", schema, agenticMooncakeSchema, dynamoTraceSchema)
	case requests && scope:
		return FormatWeka, nil
	}
	return FormatMooncake, nil
}

// The schemas that name a format in its records.
const (
	agenticMooncakeSchema = "dynamo.agentic_mooncake"
	dynamoTraceSchema     = "dynamo.request.trace.v1"
)

// agenticOnlyKeys are Agentic Mooncake v1's keys that no Mooncake row
// has: a detected Mooncake trace with one is v1's, which says so.
var agenticOnlyKeys = []string{"wait_for", "tool_wait_ms", "branches", "prefix_reset", "tool_events", "request_kind"}

// EmbeddedBlockSize is the block size a trace's first record gives, for
// the formats that carry their own (Weka's block_size, Agentic Mooncake
// v2's header, Dynamo's trace_block_size): 0 when it gives none. It is the
// trace's block size, which a different --block-size may not override.
func EmbeddedBlockSize(record []byte, f Format) uint64 {
	switch f {
	case FormatWeka, FormatAgenticMooncake:
		return u64At(record, "block_size")
	case FormatDynamo:
		if bs := u64At(record, "request", "replay", "trace_block_size"); bs > 0 {
			return bs
		}
		return u64At(record, "event", "request", "replay", "trace_block_size")
	}
	return 0
}

// u64At is the unsigned integer at path in the object record, 0 when it
// has none (what else is wrong with the record its reader says).
func u64At(record []byte, path ...string) uint64 {
	var x uint64
	var at func(path []string) func(key string, v *wire.Value) error
	at = func(path []string) func(key string, v *wire.Value) error {
		return func(key string, v *wire.Value) error {
			switch {
			case key != path[0]:
			case len(path) == 1 && v.Kind() == wire.KindNumber:
				x, _ = v.U64()
				return nil
			case len(path) > 1 && v.Kind() == wire.KindObject:
				return v.Object(at(path[1:]))
			}
			return v.Skip()
		}
	}
	var rd wire.ObjectReader
	if rd.Read(record, at(path)) != nil {
		return 0
	}
	return x
}

// SniffTrace opens the trace at path and tells its format (f, unless that
// is FormatAuto: DetectFormat's) and the block size it embeds (0: none).
func SniffTrace(path string, f Format, maxLineBytes int) (Format, uint64, error) {
	file, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer file.Close()
	first, _, err := firstRecord(file, maxLineBytes)
	if err == nil && f == FormatAuto {
		f, err = first.format()
	}
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", path, err)
	}
	return f, EmbeddedBlockSize(first.record, f), nil
}
