package cluster

import (
	"testing"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// TestLockstepRanksWaitOnTheSlowest works a 2-rank DP-attention worker
// by hand (steps of 1 ms + 0.1 ms a prefill token, 0.5 ms a decode):
// rank 0 prefills 100 tokens (11 ms), rank 1 10 tokens (2 ms). Together
// the first step lasts 11 ms: rank 1's first token comes at 11, not 2, and
// it lost 9 ms. The second step decodes one token on each (1.5 ms), equal:
// no loss. Then rank 1 is done; rank 0 decodes alone while rank 1 runs an
// empty batch, losing the whole 1.5 ms step.
func TestLockstepRanksWaitOnTheSlowest(t *testing.T) {
	cfg := iterCluster(100, 8, 4096, StepModel{BaseMS: 1, PerPrefillTokenMS: 0.1, PerDecodeSeqMS: 0.5})
	cfg.DPSize, cfg.DPAttention = 2, true
	ranks := NewRanks(&cfg, 1, 2)
	long := &Request{InputTokens: 100, Local: []protocol.LocalBlockHash{1, 2, 3, 4, 5, 6, 7}}
	short := &Request{InputTokens: 10, Local: []protocol.LocalBlockHash{9}}
	for _, r := range []*Request{long, short} {
		r.Seq = kvindex.SequenceHashes(r.Local)
	}
	if !ranks[0].Enqueue(long, 4, false) || !ranks[1].Enqueue(short, 2, false) {
		t.Fatal("not enqueued")
	}
	var ends []float64
	now := 0.0
	for {
		res, _ := ranks[1].Start(now)
		if res.Timer.Kind != StepDone {
			break
		}
		if again, _ := ranks[0].Start(now); again.Timer.Kind != NoTimer {
			t.Fatal("a second step started while the group's runs")
		}
		now = res.Timer.At
		ends = append(ends, now)
		ranks[1].Fire(now, res.Timer)
	}
	want := []float64{11, 12.5, 14, 15.5}
	if len(ends) != len(want) {
		t.Fatalf("steps ended at %v, want %v", ends, want)
	}
	for i := range want {
		if !same(ends[i], want[i]) {
			t.Fatalf("steps ended at %v, want %v", ends, want)
		}
	}
	if !same(short.FirstToken, 11) || !same(long.FirstToken, 11) {
		t.Errorf("first tokens at %v and %v, want 11 for both", long.FirstToken, short.FirstToken)
	}
	if w0, w1 := ranks[0].Counts().LockstepWaitMS, ranks[1].Counts().LockstepWaitMS; !same(w0, 0) || !same(w1, 9+1.5+1.5) {
		t.Errorf("waits %v and %v, want 0 and 12", w0, w1)
	}
}
