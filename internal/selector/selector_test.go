package selector

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
)

func TestCostFormula(t *testing.T) {
	p := Params{Policy: protocol.PolicyKV, BlockSize: 16, OverlapScoreCredit: 0.5, PrefillLoadScale: 2}
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
		s := Cost(&p, c.isl, &Candidate{Overlap: c.overlap, PrefillTokens: c.activePrefill, DecodeBlocks: c.decode})
		if s.Prefill != c.wantPrefill || s.Decode != c.decode || s.Cost != c.wantCost || s.Overlap != c.overlap {
			t.Errorf("Cost(%v,%d,%d,%d) = %+v; want prefill %v, cost %v", c.activePrefill, c.isl, c.overlap, c.decode,
				s, c.wantPrefill, c.wantCost)
		}
	}
}

// countingDraws returns fixed values and counts what selection asked for.
type countingDraws struct{ index, unit, turn int }

func (d *countingDraws) Index(int) int { d.index++; return 0 }
func (d *countingDraws) Unit() float64 { d.unit++; return 0.999 }
func (d *countingDraws) Turn() uint64  { d.turn++; return 4 }

// TestCosterIsCostOf: Coster's cost is CostOf's, bit for bit, with
// prefill booked or not (and Idle's without), over knobs and sizes whose quotients round and
// overlaps that cover the prompt, exactly or past it, with no decode
// blocks or some.
func TestCosterIsCostOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 35))
	pick := func(vs ...float64) float64 { return vs[rng.IntN(len(vs))] }
	for range 50000 {
		p := Params{BlockSize: 1 + rng.Uint64N(64), OverlapScoreCredit: pick(0, 1, rng.Float64()*3), PrefillLoadScale: pick(0, 1, rng.Float64()*5)}
		isl, overlap, decode := rng.Uint64N(1<<(1+rng.IntN(20))), rng.Uint64N(1<<(1+rng.IntN(10))), rng.Uint64N(1<<(1+rng.IntN(20)))
		if rng.IntN(4) == 0 {
			isl = overlap * p.BlockSize // work and credit cancel: +0
		}
		if rng.IntN(4) == 0 {
			decode = 0
		}
		prefill := 0.0
		if rng.IntN(2) == 0 {
			prefill = rng.Float64() * 1e5
		}
		c := NewCoster(&p, isl)
		want := CostOf(&p, isl, overlap, prefill, decode)
		if got := c.Of(overlap, prefill, decode); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("%+v isl %d overlap %d prefill %v decode %d: Coster %v, CostOf %v", p, isl, overlap, prefill, decode, got, want)
		}
		if got := c.Idle(uint32(overlap), decode); prefill == 0 && math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("%+v isl %d overlap %d decode %d: Idle %v, CostOf %v", p, isl, overlap, decode, got, want)
		}
	}
}

func TestSoftmaxProbabilities(t *testing.T) {
	p := Params{Policy: protocol.PolicyKV, BlockSize: 16, Temperature: 1, OverlapScoreCredit: 1, PrefillLoadScale: 1}
	draws := &countingDraws{}
	// Costs 10, 20, 10 (decode blocks alone: nothing to prefill).
	cands := []Candidate{{DecodeBlocks: 10}, {DecodeBlocks: 20}, {DecodeBlocks: 10}}
	res := Select(p, Request{}, cands, -1, draws, nil)
	// Normalised costs 0, 1, 0 at T=1: weights 1, e^-1, 1.
	w := 1 / (2 + 0.36787944117144233)
	for i, want := range []float64{w, 0.36787944117144233 * w, w} {
		if d := res.Scores[i].Prob - want; d > 1e-12 || d < -1e-12 {
			t.Errorf("p[%d] = %v, want %v", i, res.Scores[i].Prob, want)
		}
	}
	if draws.unit != 1 || draws.index != 0 || draws.turn != 0 {
		t.Errorf("a softmax pick draws one unit, drew %+v", draws)
	}
	if res.Index != 2 || res.Ties != 2 || res.BestCost != 10 {
		t.Errorf("a draw of 0.999 of the weight falls on the last candidate: %+v", res)
	}
}

// TestPreferredAndBaselines: a preferred candidate is taken without a draw;
// round_robin takes the turn modulo the candidates; least_loaded takes the
// fewest active requests whatever the cost.
func TestPreferredAndBaselines(t *testing.T) {
	cands := []Candidate{{DecodeBlocks: 1, ActiveRequests: 3}, {DecodeBlocks: 9, ActiveRequests: 1}, {DecodeBlocks: 5, ActiveRequests: 2}}
	for _, tc := range []struct {
		policy    protocol.Policy
		preferred int
		want      int
		draws     countingDraws
	}{
		{protocol.PolicyKV, 2, 2, countingDraws{}},
		{protocol.PolicyKV, -1, 0, countingDraws{}},
		{protocol.PolicyRoundRobin, -1, 1, countingDraws{turn: 1}},
		{protocol.PolicyLeastLoaded, -1, 1, countingDraws{}},
		{protocol.PolicyRandom, -1, 0, countingDraws{index: 1}},
	} {
		d := &countingDraws{}
		res := Select(Params{Policy: tc.policy, BlockSize: 16, OverlapScoreCredit: 1, PrefillLoadScale: 1}, Request{}, cands, tc.preferred, d, nil)
		if res.Index != tc.want || *d != tc.draws || res.Scores[res.Index].Prob == 0 {
			t.Errorf("%s preferred %d: chose %d with draws %+v, want %d with %+v", tc.policy, tc.preferred, res.Index, *d, tc.want, tc.draws)
		}
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

// TestRendezvous: session_hash spreads sessions evenly, keeps each where it
// was while its candidate stays, and when a candidate goes moves only the
// sessions it held.
func TestRendezvous(t *testing.T) {
	var cands []Candidate
	for id := range uint64(4) {
		cands = append(cands, Candidate{Key: (id + 1) * 0x9e3779b97f4a7c15})
	}
	before := map[string]uint64{}
	counts := make([]int, len(cands))
	for i := range 4000 {
		s := fmt.Sprintf("session-%d", i)
		k := rendezvous(s, cands)
		before[s] = cands[k].Key
		counts[k]++
	}
	for _, n := range counts {
		if n < 850 || n > 1150 {
			t.Fatalf("sessions per candidate %v: not even", counts)
		}
	}
	gone := cands[2].Key
	rest := append(append([]Candidate(nil), cands[:2]...), cands[3:]...)
	for s, was := range before {
		now := rest[rendezvous(s, rest)].Key
		if was != gone && now != was {
			t.Fatalf("%s moved from a candidate that stayed", s)
		}
	}
}
