package engine

import (
	"slices"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/selector"
)

// TestPickTieBreakIsUniformAndSeeded: selection over the engine's stream
// breaks ties uniformly, the same way for the same seed, another way for
// another seed.
func TestPickTieBreakIsUniformAndSeeded(t *testing.T) {
	picks := func(seed uint64) []int {
		cfg := protocol.DefaultConfig()
		cfg.Seed = seed
		e, _ := New(cfg)
		cands := []selector.Candidate{{DecodeBlocks: 1}, {DecodeBlocks: 1}, {DecodeBlocks: 1}, {DecodeBlocks: 2}}
		var out []int
		for range 3000 {
			res := selector.Select(*e.paramsOf(protocol.RoleAggregated), selector.Request{}, cands, -1, e.draws, nil)
			if res.Ties != 3 || res.Index == 3 {
				t.Fatalf("pick %d of %d ties", res.Index, res.Ties)
			}
			out = append(out, res.Index)
		}
		return out
	}
	first := picks(0)
	counts := make([]int, 3)
	for _, i := range first {
		counts[i]++
	}
	for i, n := range counts {
		if n < 850 || n > 1150 {
			t.Errorf("tie %d chosen %d times of 3000: not uniform", i, n)
		}
	}
	if !slices.Equal(first, picks(0)) {
		t.Error("the same seed picked a different sequence of ties")
	}
	if slices.Equal(first, picks(1)) {
		t.Error("seeds 0 and 1 picked the same 3000 ties: the seed is not used")
	}
}
