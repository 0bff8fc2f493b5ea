package replay

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

func readDelta(trace string, blockSize uint64, pack bool) ([]Request, error) {
	reqs, _, err := readTrace(strings.NewReader(trace), FormatMooncakeDelta,
		readOptions{blockSize: blockSize, maxLineBytes: wire.DefaultMaxLineBytes, pack: pack})
	return reqs, err
}

// Each refusal names its line and its field: the delta rules' own, and
// Mooncake's, which a delta line keeps.
func TestMooncakeDeltaRefuses(t *testing.T) {
	first := `{"timestamp": 10, "input_length": 5, "output_length": 2, "hash_ids": [1, 2], "session_id": "s"}` + "\n"
	for trace, want := range map[string][]string{
		`{"timestamp": 0, "delay_ms": 5, "input_length": 5, "output_length": 2, "session_id": "s"}`: {
			`trace line 1: field "delay_ms": a session's first line has no turn before it`},
		first + `{"timestamp": 0, "delay": 5, "input_length": 5, "output_length": 2, "session_id": "t"}`: {
			`trace line 2: field "delay": a session's first line has no turn before it`},
		`{"timestamp": 0, "delay": 5, "input_length": 5, "output_length": 2}`: {
			`trace line 1: delay_ms needs a session_id`},
		first + `{"timestamp": 9.5, "input_length": 5, "output_length": 2, "session_id": "s"}`: {
			`trace line 2: field "timestamp": 9.5 ms is before 10 ms, the timestamp of session "s"'s previous line (line 1)`},
		`{"timestamp": 0, "input_length": 1099511627776, "output_length": 1, "session_id": "s"}` + "\n" +
			`{"delay": 0, "input_length": 0, "output_length": 0, "session_id": "s"}`: {
			`trace line 2: field "input_length": the prompt (the previous turn's 1099511627776 tokens, its output's 1 and this line's 0) is too long: expected at most 1099511627776 tokens, got 1099511627777`},
		first + `{"delay": 0, "input_length": 5, "output_length": 2, "hash_ids": [3], "session_id": "s"}`: {
			`trace line 2: 1 hash_ids for input_length 5: it takes 2 blocks of 4 tokens`},
		first + `{"delay": 0, "input_length": 5, "output_length": 2, "hash_ids": [3, 4, 5], "session_id": "s"}`: {
			`trace line 2: 3 hash_ids for input_length 5: it takes 2 blocks of 4 tokens`},
		first + `{"delay": 0, "input_length": 5, "output_length": 2, "session_id": "s", "parent_session_id": "p"}`: {
			`trace line 2: field "parent_session_id": "p", but session "s" began with parent ""`},
		`{"timestamp": 0, "input_length": 0, "output_length": 2, "session_id": "s"}`: {
			`trace line 1: field "input_length": a session's first line is its whole prompt, which needs at least 1 token`},
		`{"timestamp": 0, "input_length": 0, "output_length": 2}`:    {`trace line 1: field "input_length"`},
		`{"input_length": 5, "output_length": 2, "session_id": "s"}`: {`trace line 1: timestamp is missing`},
		first + `{"delay": 0, "input_length": 5, "session_id": "s"}`: {`trace line 2: output_length is missing`},
		first + `{"delay": 0, "delay_ms": 0, "input_length": 5, "output_length": 2, "session_id": "s"}`: {
			`trace line 2: field "delay_ms": give delay or delay_ms, not both`},
		first + `{"delay": 0, "inputLength": 5, "output_length": 2, "session_id": "s"}`: {
			`trace line 2: field "inputLength": is not a trace field (did you mean "input_length"?)`},
		first + `{"delay": 0, "input_length": 5, "output_length": 1099511627777, "session_id": "s"}`: {
			`trace line 2: field "output_length": expected at most 1099511627776 tokens`},
		"# a comment\n\n" + first: {}, // read: lines are counted from the first, comments and blanks too
	} {
		_, err := readDelta(trace, 4, false)
		if len(want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", trace, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: read, want %q", trace, want)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s:\n got %q\nwant %q", trace, err, w)
			}
		}
	}
}

// A session's parent_session_id may be repeated on a later line, or left
// off it; either way every turn carries it.
func TestMooncakeDeltaKeepsTheParent(t *testing.T) {
	reqs, err := readDelta(`{"timestamp": 0, "input_length": 5, "output_length": 2, "session_id": "s", "parent_session_id": 7}`+"\n"+
		`{"delay": 0, "input_length": 1, "output_length": 2, "session_id": "s"}`+"\n"+
		`{"delay": 0, "input_length": 1, "output_length": 2, "session_id": "s", "parent_session_id": "7"}`, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		if r.ParentSession != "7" {
			t.Errorf("request %d: parent %q, want 7", i, r.ParentSession)
		}
	}
}

// Packed or not, a turn's ids are the same; packed, as Experiment.Load
// asks, they are kept packed (a run of private ids is a byte each).
func TestMooncakeDeltaPacks(t *testing.T) {
	trace := `{"timestamp": 0, "input_length": 10, "output_length": 30, "hash_ids": [5, 900, 7], "session_id": "s"}` + "\n" +
		`{"delay": 0, "input_length": 20, "output_length": 0, "session_id": "s"}`
	plain, err := readDelta(trace, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	packed, err := readDelta(trace, 4, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range plain {
		if packed[i].packed == nil || plain[i].packed != nil {
			t.Errorf("request %d: packed %v, plain %v: want only the first packed", i, packed[i].packed, plain[i].packed)
		}
		if got, want := packed[i].appendIDs(nil), plain[i].appendIDs(nil); !slices.Equal(got, want) {
			t.Errorf("request %d: ids %v packed, %v plain", i, got, want)
		}
	}
	if got := plain[1].appendIDs(nil); len(got) != 15 || got[0] != 1 || got[1] != 2 || got[2] != 4 || got[14] != 16 {
		t.Errorf("turn 2's ids %v: want 1 2, then 4 to 16", got)
	}
}

// 10^6 requests, 10^5 sessions of 10 turns interleaved (each session's
// state is found by its id, not by a scan), read in time linear in the ids
// they come to: every session's first prompt shares 8 of its 10 blocks,
// its later turns none.
func TestMooncakeDeltaMillion(t *testing.T) {
	const sessions, turns = 100_000, 10
	var trace bytes.Buffer
	var b []byte
	for turn := range turns {
		for s := range sessions {
			b = append(b[:0], `{"session_id": `...)
			b = strconv.AppendInt(b, int64(s), 10)
			if turn == 0 {
				b = append(b, `, "timestamp": `...)
				b = strconv.AppendInt(b, int64(s), 10)
				b = append(b, `, "input_length": 40, "output_length": 4, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, `...)
				b = strconv.AppendInt(b, int64(8+2*s), 10)
				b = append(b, ", "...)
				b = strconv.AppendInt(b, int64(9+2*s), 10)
				b = append(b, "]}\n"...)
			} else {
				b = append(b, `, "delay_ms": 3, "input_length": 8, "output_length": 4, "hash_ids": [1, 2]}`+"\n"...)
			}
			trace.Write(b)
		}
	}
	start := time.Now()
	reqs, _, err := readTrace(&trace, FormatMooncakeDelta, readOptions{blockSize: 4, maxLineBytes: wire.DefaultMaxLineBytes, pack: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests read in %v", len(reqs), time.Since(start))
	if len(reqs) != sessions*turns {
		t.Fatalf("%d requests, want %d", len(reqs), sessions*turns)
	}
	last := func(s int) []protocol.LocalBlockHash { return reqs[(turns-1)*sessions+s].appendIDs(nil) }
	a, z := last(0), last(sessions-1)
	r := reqs[(turns-1)*sessions]
	if want := uint64(40 + 12*(turns-1)); r.InputTokens != want || len(a) != int(want/4) || r.Session != "0" || *r.DelayMS != 3 {
		t.Fatalf("session 0's last turn: %d tokens, %d ids, session %q, delay %v; want %d tokens, %d ids", r.InputTokens, len(a), r.Session, *r.DelayMS, want, want/4)
	}
	if !slices.Equal(a[:8], z[:8]) || slices.Equal(a[:10], z[:10]) {
		t.Errorf("the first sessions' last turns' first blocks %v and %v: want 8 shared, then their own", a[:10], z[:10])
	}
	for _, id := range a[10:] {
		if slices.Contains(z, id) {
			t.Errorf("session 0's block %d is also session %d's", id, sessions-1)
		}
	}
}
