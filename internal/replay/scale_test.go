package replay

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/offline-router/offline-router/internal/protocol"
)

// ignoreID: a trace read back is numbered by its lines.
var ignoreID = cmpopts.IgnoreFields(Request{}, "ID")

// allowPacked compares requests' packed ids too.
var allowPacked = cmp.AllowUnexported(Request{})

// commonPrefix is how many leading ids a and b share.
func commonPrefix(a, b []protocol.LocalBlockHash) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestSplitBlocksKeepsSharing: every prompt gets a block per 16 tokens, and
// any two prompts share exactly the tokens they shared at 512 (32 small
// blocks per shared large one, cut at the shorter prompt's end), under
// its adapter still, written and read back.
func TestSplitBlocksKeepsSharing(t *testing.T) {
	trace := Builtin(7, 40, 3, 512)
	split, err := SplitBlocks(trace, 512, 32)
	if err != nil {
		t.Fatal(err)
	}
	for i := range trace {
		if want := (trace[i].InputTokens + 15) / 16; uint64(len(split[i].HashIDs)) != want {
			t.Fatalf("request %d: %d ids for %d tokens, want %d", i, len(split[i].HashIDs), trace[i].InputTokens, want)
		}
		if split[i].LoRAName != trace[i].LoRAName {
			t.Fatalf("request %d: adapter %q, want %q", i, split[i].LoRAName, trace[i].LoRAName)
		}
	}
	shared := 0
	for i := range trace {
		for j := range i {
			old := commonPrefix(trace[i].HashIDs, trace[j].HashIDs)
			want := min(32*old, len(split[i].HashIDs), len(split[j].HashIDs))
			if got := commonPrefix(split[i].HashIDs, split[j].HashIDs); got != want {
				t.Fatalf("requests %d and %d shared %d blocks of 512 and share %d of 16, want %d", j, i, old, got, want)
			}
			shared += min(old, 1)
		}
	}
	if shared == 0 {
		t.Fatal("no two requests share a prefix: the test proves nothing")
	}
	// The split trace is read back at 16 tokens a block as it was made.
	readsBack(t, split, 16)
}

// readsBack: trace written and read back at blockSize is trace.
func readsBack(t *testing.T, trace []Request, blockSize uint64) {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteMooncake(&buf, trace); err != nil {
		t.Fatal(err)
	}
	back, err := ReadMooncake(&buf, blockSize)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(trace, back, ignoreID, allowPacked); diff != "" {
		t.Fatalf("read back differs (-written +read):\n%s", diff)
	}
}

// TestRepeatTrace: copies follow one another and share no block or
// session, and each is the original otherwise (its adapter too).
func TestRepeatTrace(t *testing.T) {
	trace := Builtin(3, 30, 3, 512)
	// A session named as another's copy would be, were the suffix "#k".
	extra := trace[0]
	extra.Session, extra.DelayMS = trace[0].Session+"#1", nil
	trace = append(trace, extra)
	out, err := RepeatTrace(trace, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3*len(trace) {
		t.Fatalf("%d requests, want %d", len(out), 3*len(trace))
	}
	owner := map[protocol.LocalBlockHash]int{}
	sessions := map[string]int{}
	last := trace[len(trace)-1].Arrival
	for k := range 3 {
		for i, r := range out[k*len(trace) : (k+1)*len(trace)] {
			o := trace[i]
			if r.InputTokens != o.InputTokens || r.OutputTokens != o.OutputTokens || len(r.HashIDs) != len(o.HashIDs) || r.LoRAName != o.LoRAName {
				t.Fatalf("copy %d, request %d: lengths or adapter changed", k, i)
			}
			if k > 0 && (r.Arrival <= last || r.Session != o.Session+"##"+string(rune('0'+k))) {
				t.Fatalf("copy %d, request %d: arrival %v (the copy before ends at %v), session %q", k, i, r.Arrival, last, r.Session)
			}
			for _, h := range r.HashIDs {
				if c, ok := owner[h]; ok && c != k {
					t.Fatalf("hash id %d is in copies %d and %d", h, c, k)
				}
				owner[h] = k
			}
			if c, ok := sessions[r.Session]; ok && c != k && r.Session != "" {
				t.Fatalf("session %q is in copies %d and %d", r.Session, c, k)
			}
			sessions[r.Session] = k
		}
		last = out[(k+1)*len(trace)-1].Arrival
	}
	readsBack(t, out, 512)
}

func TestScaleRefusesWhatWouldOverflow(t *testing.T) {
	big := []Request{{ID: "r0", InputTokens: 512, HashIDs: []protocol.LocalBlockHash{math.MaxUint64 / 2}}}
	for name, err := range map[string]error{
		"split past 2^64": func() error { _, err := SplitBlocks(big, 512, 32); return err }(),
		"not a divisor":   func() error { _, err := SplitBlocks(big, 512, 3); return err }(),
		"copies past":     func() error { _, err := RepeatTrace(big, 3); return err }(),
		"no copies":       func() error { _, err := RepeatTrace(big, 0); return err }(),
	} {
		if err == nil || !strings.Contains(err.Error(), "expected") && !strings.Contains(err.Error(), "2^64") {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
}
