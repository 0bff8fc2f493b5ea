package engine

import (
	"math"
	"slices"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
)

func TestCostFormula(t *testing.T) {
	cfg := protocol.DefaultConfig()
	cfg.OverlapScoreCredit, cfg.PrefillLoadScale = 0.5, 2
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		activePrefill         float64
		isl, overlap, decode  uint64
		wantPrefill, wantCost float64
	}{
		// (32 + 64)/16 - 0.5*2 = 5 prefill blocks; 2*5 + 10 = 20.
		{32, 64, 2, 10, 5, 20},
		// Nothing active, nothing cached: 48/16 = 3; 2*3 + 3 = 9.
		{0, 48, 0, 3, 3, 9},
		// The credit can exceed the prefill work: the term floors at 0.
		{0, 16, 10, 1, 0, 1},
		// A partial block counts as a fraction: 24/16 = 1.5; 2*1.5 + 2 = 5.
		{0, 24, 0, 2, 1.5, 5},
	}
	for _, c := range cases {
		pb, decode, cost := e.cost(c.activePrefill, c.isl, c.overlap, c.decode)
		if pb != c.wantPrefill || decode != c.decode || cost != c.wantCost {
			t.Errorf("cost(%v,%d,%d,%d) = %v,%v,%v; want %v,%v,%v", c.activePrefill, c.isl, c.overlap, c.decode,
				pb, decode, cost, c.wantPrefill, c.decode, c.wantCost)
		}
	}
}

func TestPickSoftmaxProbabilities(t *testing.T) {
	cfg := protocol.DefaultConfig()
	cfg.Temperature = 1
	e, _ := New(cfg)
	scores := []score{{cost: 10}, {cost: 20}, {cost: 10}}
	e.pick(scores, nil, -1) // policy kv: ranks only matter to least_loaded
	// Normalised costs 0, 1, 0 at T=1: weights 1, e^-1, 1.
	w := 1 / (2 + 0.36787944117144233)
	for i, want := range []float64{w, 0.36787944117144233 * w, w} {
		if d := scores[i].prob - want; d > 1e-12 || d < -1e-12 {
			t.Errorf("p[%d] = %v, want %v", i, scores[i].prob, want)
		}
	}
	if e.rng.draws != 1 {
		t.Errorf("a softmax pick draws once, drew %d", e.rng.draws)
	}
}

func TestPickTieBreakIsUniformAndSeeded(t *testing.T) {
	picks := func(seed uint64) []int {
		cfg := protocol.DefaultConfig()
		cfg.Seed = seed
		e, _ := New(cfg)
		var out []int
		for range 3000 {
			scores := []score{{cost: 1}, {cost: 1}, {cost: 1}, {cost: 2}}
			i, ties, _ := e.pick(scores, nil, -1)
			if ties != 3 || i == 3 {
				t.Fatalf("pick %d of %d ties", i, ties)
			}
			out = append(out, i)
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

// TestPortableExp: within an ulp or two of math.Exp over the softmax's
// range and beyond, and exact at the edges.
func TestPortableExp(t *testing.T) {
	for x := -60.0; x <= 5; x += 0.0137 {
		got, want := portableExp(x), math.Exp(x)
		if rel := math.Abs(got-want) / want; rel > 4e-16 {
			t.Fatalf("portableExp(%v) = %v, math.Exp %v (relative error %g)", x, got, want, rel)
		}
	}
	for x, want := range map[float64]float64{0: 1, math.Inf(-1): 0, -800: 0, 800: math.Inf(1)} {
		if got := portableExp(x); got != want {
			t.Errorf("portableExp(%v) = %v, want %v", x, got, want)
		}
	}
	if !math.IsNaN(portableExp(math.NaN())) {
		t.Error("portableExp(NaN) is not NaN")
	}
}
