package main

import (
	"bytes"
	"slices"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
)

// written is the trace of s as convgen writes it.
func written(t *testing.T, s shape) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := replay.WriteMooncake(&b, generate(s)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestDeterministic: a seed makes the same bytes every time, another seed
// other bytes.
func TestDeterministic(t *testing.T) {
	s := defaultShape()
	s.requests = 500
	a, b := written(t, s), written(t, s)
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed wrote two traces")
	}
	s.seed++
	if bytes.Equal(a, written(t, s)) {
		t.Fatal("another seed wrote the same trace")
	}
}

// TestShape: the default trace, read back as replay reads it, is 12k
// requests of about 750 16-token blocks; a later turn arrives by delay_ms
// and extends its previous turn's full blocks with blocks of its own; and
// sessions share only their system prompts' blocks (under a tenth of the
// blocks requests name).
func TestShape(t *testing.T) {
	s := defaultShape()
	trace, err := replay.ReadMooncake(bytes.NewReader(written(t, s)), s.blockSize)
	if err != nil {
		t.Fatal(err)
	}
	if len(trace) != 12_000 {
		t.Fatalf("%d requests, want 12,000", len(trace))
	}
	owner := map[protocol.LocalBlockHash]string{} // a block -> the first session naming it
	crossShared := map[protocol.LocalBlockHash]bool{}
	last := map[string]*replay.Request{} // a session's previous turn
	blocks, shared, later := 0, 0, 0
	for i := range trace {
		r := &trace[i]
		if want := (r.InputTokens + s.blockSize - 1) / s.blockSize; uint64(len(r.HashIDs)) != want {
			t.Fatalf("request %d: %d hash ids for %d tokens", i, len(r.HashIDs), r.InputTokens)
		}
		blocks += len(r.HashIDs)
		prev := last[r.Session]
		if (prev != nil) != (r.DelayMS != nil) {
			t.Fatalf("request %d: a turn after %v with delay_ms %v", i, prev != nil, r.DelayMS)
		}
		if prev != nil {
			later++
			full := prev.InputTokens / s.blockSize
			if r.InputTokens <= prev.InputTokens || !slices.Equal(r.HashIDs[:full], prev.HashIDs[:full]) {
				t.Fatalf("request %d does not extend its session's previous turn's %d full blocks", i, full)
			}
			if prev.InputTokens%s.blockSize != 0 && r.HashIDs[full] == prev.HashIDs[full] {
				t.Fatalf("request %d keeps its previous turn's partial block %d, whose tokens changed", i, full)
			}
		}
		for j, h := range r.HashIDs {
			if o, ok := owner[h]; !ok {
				owner[h] = r.Session
			} else if o != r.Session {
				crossShared[h] = true
			}
			if prev != nil && uint64(j) >= prev.InputTokens/s.blockSize && owner[h] != r.Session {
				t.Fatalf("request %d: block %d, past the previous turn's, is another session's", i, j)
			}
		}
		last[r.Session] = r
	}
	for _, r := range trace {
		for _, h := range r.HashIDs {
			if crossShared[h] {
				shared++
			}
		}
	}
	if mean := float64(blocks) / float64(len(trace)); mean < 700 || mean > 800 {
		t.Errorf("%.0f blocks a request, want about 750", mean)
	}
	if maxShared := uint64(s.prefixes) * (s.prefixTokens / s.blockSize); uint64(len(crossShared)) > maxShared {
		t.Errorf("%d blocks are shared between sessions, more than the system prompts' %d", len(crossShared), maxShared)
	}
	if len(crossShared) == 0 {
		t.Error("no block is shared between sessions: no shared prefixes")
	}
	if frac := float64(shared) / float64(blocks); frac > 0.1 {
		t.Errorf("%.2f of the blocks named are shared between sessions, want under 0.1", frac)
	}
	if later < len(trace)/2 {
		t.Errorf("%d later turns of %d requests: not multi-turn", later, len(trace))
	}
}
