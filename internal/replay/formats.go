package replay

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
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
