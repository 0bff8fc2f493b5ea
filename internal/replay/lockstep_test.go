package replay

import (
	"fmt"
	"slices"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// TestDPAttentionLosesStepTimeToImbalance: one worker of 2 DP ranks, round
// robin sending every long prompt to rank 0 and every short one to rank
// 1. With --dp-attention the short prompts' steps last as long as the long
// ones': rank 1 waits (its lost step time reported), and the short
// requests' TTFT rises above what two independent ranks give them; rank 0
// loses nothing it did not already spend. Off, no lockstep figure.
func TestDPAttentionLosesStepTimeToImbalance(t *testing.T) {
	var trace []Request
	for i := range 40 {
		r := Request{ID: fmt.Sprint(i), Arrival: float64(i) * 50, InputTokens: 100, OutputTokens: 8,
			HashIDs: []protocol.LocalBlockHash{protocol.LocalBlockHash(1000 + i)}}
		if i%2 == 0 {
			r.InputTokens, r.HashIDs = 4000, []protocol.LocalBlockHash{protocol.LocalBlockHash(i*10 + 1), protocol.LocalBlockHash(i*10 + 2)}
			r.HashIDs = append(r.HashIDs, protocol.LocalBlockHash(i*10+3), protocol.LocalBlockHash(i*10+4), protocol.LocalBlockHash(i*10+5),
				protocol.LocalBlockHash(i*10+6), protocol.LocalBlockHash(i*10+7), protocol.LocalBlockHash(i*10+8))
		}
		trace = append(trace, r)
	}
	run := func(lockstep bool) *Result {
		c := cluster.Default(1)
		c.DPSize, c.DPAttention = 2, lockstep
		res, err := Run(slices.Clone(trace), Options{Cluster: c, Router: routerConfig(protocol.PolicyRoundRobin), Records: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	shortTTFT := func(res *Result) float64 {
		sum := 0.0
		for _, rec := range res.Records() {
			if rec.InputTokens == 100 {
				if rec.DPRank != 1 {
					t.Fatalf("a short prompt on rank %d", rec.DPRank)
				}
				sum += rec.TTFTMS
			}
		}
		return sum / 20
	}
	apart, together := run(false), run(true)
	if apart.Metrics.LockstepWaitMS != nil || apart.Metrics.WorkerLockstepWaitMS != nil {
		t.Fatal("independent ranks report a lockstep wait")
	}
	m := together.Metrics
	if m.LockstepWaitMS == nil || len(m.WorkerLockstepWaitMS) != 2 {
		t.Fatalf("lockstep figures %v %v", m.LockstepWaitMS, m.WorkerLockstepWaitMS)
	}
	w0, w1 := m.WorkerLockstepWaitMS[0], m.WorkerLockstepWaitMS[1]
	if !(w1 > 10*w0) || !(w1 > 0) || *m.LockstepWaitMS != w0+w1 {
		t.Errorf("waits: rank 0 %v ms, rank 1 %v ms, total %v", w0, w1, *m.LockstepWaitMS)
	}
	if a, b := shortTTFT(apart), shortTTFT(together); !(b > 1.5*a) {
		t.Errorf("short prompts' mean TTFT %.2f ms apart, %.2f ms in lockstep", a, b)
	}
}
