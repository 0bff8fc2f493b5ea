package selector

import (
	"math"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Dynamo's test_overlap_credit_decay_can_prefer_less_loaded_cold_worker:
// block 16, isl 64 (4 request blocks); the warm rank caches 4 blocks and
// has 48 prefill tokens booked, the cold one nothing. Without decay the
// warm one costs (48 + 64)/16 - 4 = 3 against the cold one's 64/16 = 4;
// at decay 1 its excess is 48/16 = 3 blocks, 3/4 of a request, so its
// credit is 4/1.75 = 2.2857 and it costs 7 - 2.2857 = 4.714: the cold
// one wins. Catches a decay on the wrong rank, a floor of the request
// blocks, or the decay left out.
func TestCreditDecay(t *testing.T) {
	cands := []Candidate{{Overlap: 4, PrefillTokens: 48}, {}}
	for _, c := range []struct {
		decay      float64
		warm, cold float64
		pick       int
	}{{0, 3, 4, 0}, {1, 7 - 4/1.75, 4, 1}} {
		p := Params{Policy: protocol.PolicyKV, BlockSize: 16, OverlapScoreCredit: 1, PrefillLoadScale: 1, OverlapScoreCreditDecay: c.decay}
		res := Select(p, Request{ISL: 64, Blocks: 4}, cands, -1, &countingDraws{}, nil)
		if math.Abs(res.Scores[0].Cost-c.warm) > 1e-12 || res.Scores[1].Cost != c.cold || res.Index != c.pick {
			t.Errorf("decay %v: costs %v, %v, picked %d; want %v, %v, %d", c.decay, res.Scores[0].Cost, res.Scores[1].Cost, res.Index, c.warm, c.cold, c.pick)
		}
		if Cheapest(&p, -1) != (c.decay == 0) {
			t.Errorf("decay %v: the cheapest path, which costs one candidate alone, must not be taken when the decay reads them all", c.decay)
		}
	}
	// A partial block counts as a request block: isl 56 is 4 blocks (a
	// floor would make it 3 and decay more).
	p := Params{Policy: protocol.PolicyKV, BlockSize: 16, OverlapScoreCredit: 1, PrefillLoadScale: 1, OverlapScoreCreditDecay: 1}
	res := Select(p, Request{ISL: 56, Blocks: 4}, cands, -1, &countingDraws{}, nil)
	if want := (48.0+56)/16 - 4/1.75; math.Abs(res.Scores[0].Cost-want) > 1e-12 {
		t.Errorf("isl 56: warm costs %v, want %v", res.Scores[0].Cost, want)
	}
}

// Dynamo's test_worker_logit_can_charge_active_requests: 100 active
// blocks and 4 requests cost 100, or 100 + 32 x 4 = 228 at weight 32.
func TestDecodeActiveRequestWeight(t *testing.T) {
	for _, c := range []struct{ weight, want float64 }{{0, 100}, {32, 228}} {
		p := Params{Policy: protocol.PolicyKV, BlockSize: 16, OverlapScoreCredit: 1, PrefillLoadScale: 1, DecodeActiveRequestWeight: c.weight}
		res := Select(p, Request{}, []Candidate{{DecodeBlocks: 100, ActiveRequests: 4}, {DecodeBlocks: 300}}, -1, &countingDraws{}, nil)
		if res.Scores[0].Cost != c.want || res.Scores[0].Decode != 100 {
			t.Errorf("weight %v: cost %v (decode %d), want %v (decode 100)", c.weight, res.Scores[0].Cost, res.Scores[0].Decode, c.want)
		}
	}
}

// scriptedDraws hands out the Index values it holds, in turn.
type scriptedDraws struct{ index []int }

func (d *scriptedDraws) Index(n int) int {
	v := d.index[0]
	d.index = d.index[1:]
	if v >= n {
		panic("scripted draw out of range")
	}
	return v
}
func (d *scriptedDraws) Unit() float64 { panic("no unit draw expected") }
func (d *scriptedDraws) Turn() uint64  { panic("no turn expected") }

// Dynamo's p2c_uses_exactly_two_samples_and_two_load_reads: candidates
// loaded 0, 5, 3, 1 and draws 1, 1 give first 1 and second
// (1 + 1 + 1) % 4 = 3; 5 > 1, so 3. Draws 2, 2 give 2 against
// (2 + 1 + 2) % 4 = 1: 3 <= 5, the first. A tie goes to the first drawn.
func TestPowerOfTwo(t *testing.T) {
	p := Params{Policy: protocol.PolicyPowerOfTwo, BlockSize: 16}
	cands := []Candidate{{ActiveRequests: 0}, {ActiveRequests: 5}, {ActiveRequests: 3}, {ActiveRequests: 1}}
	for _, c := range []struct {
		draws []int
		want  int
	}{{[]int{1, 1}, 3}, {[]int{2, 2}, 2}} {
		d := &scriptedDraws{index: c.draws}
		if res := Select(p, Request{}, cands, -1, d, nil); res.Index != c.want || len(d.index) != 0 {
			t.Errorf("draws %v: picked %d (draws left %v), want %d", c.draws, res.Index, d.index, c.want)
		}
	}
	tied := []Candidate{{ActiveRequests: 2}, {ActiveRequests: 2}}
	if res := Select(p, Request{}, tied, -1, &scriptedDraws{index: []int{1, 0}}, nil); res.Index != 1 {
		t.Errorf("a tie went to %d, not the first drawn (1)", res.Index)
	}
	// Of the 12 ordered pairs a candidate wins those where it is drawn
	// first against one as loaded or more and those where it is drawn
	// second against one more loaded: loads 0, 5, 3, 1 win 3+3, 0+0, 1+1
	// and 2+2.
	res := Select(p, Request{}, cands, -1, &scriptedDraws{index: []int{0, 0}}, nil)
	for i, wins := range []float64{6, 0, 2, 4} {
		if res.Scores[i].Prob != wins/12 {
			t.Errorf("candidate %d: probability %v, want %v/12", i, res.Scores[i].Prob, wins)
		}
	}
	// With ties: loads 1, 1, 2. Candidate 0 wins first against 1 (tie) and
	// 2, second against none heavier but 2: 2 + 1 = 3 of 6.
	res = Select(p, Request{}, []Candidate{{ActiveRequests: 1}, {ActiveRequests: 1}, {ActiveRequests: 2}}, -1, &scriptedDraws{index: []int{0, 0}}, nil)
	for i, wins := range []float64{3, 3, 0} {
		if res.Scores[i].Prob != wins/6 {
			t.Errorf("tied loads, candidate %d: probability %v, want %v/6", i, res.Scores[i].Prob, wins)
		}
	}
}

// Dynamo's device-aware-weighted: the CPU workers' share of the load is
// the accelerators' total x CPU workers / (ratio x accelerators), in
// integers. Two accelerators with 16 requests in all and one CPU worker at
// ratio 8 allow 16 x 1 / 16 = 1: a CPU worker with no request takes the
// next, one with a request does not.
func TestDeviceAware(t *testing.T) {
	p := Params{Policy: protocol.PolicyDeviceAwareWeighted, BlockSize: 16, CudaToCPURatio: 8}
	for _, c := range []struct {
		name  string
		cands []Candidate
		want  int
	}{
		{"cpu under its share", []Candidate{{ActiveRequests: 9}, {ActiveRequests: 7}, {CPU: true}}, 2},
		{"cpu at its share", []Candidate{{ActiveRequests: 9}, {ActiveRequests: 7}, {CPU: true, ActiveRequests: 1}}, 1},
		{"all idle: the accelerator", []Candidate{{CPU: true}, {}}, 1},
		{"cpu only", []Candidate{{CPU: true, ActiveRequests: 3}, {CPU: true, ActiveRequests: 2}}, 1},
		{"accelerators only: least loaded", []Candidate{{ActiveRequests: 3}, {ActiveRequests: 2}}, 1},
	} {
		res := Select(p, Request{}, c.cands, -1, &countingDraws{}, nil)
		if res.Index != c.want || res.Scores[c.want].Prob != 1 {
			t.Errorf("%s: picked %d (probabilities %+v), want %d", c.name, res.Index, res.Scores, c.want)
		}
	}
	// At ratio 1 the same CPU worker with one request is under its share
	// (16 x 1 / 2 = 8).
	p.CudaToCPURatio = 1
	if res := Select(p, Request{}, []Candidate{{ActiveRequests: 9}, {ActiveRequests: 7}, {CPU: true, ActiveRequests: 1}}, -1, &countingDraws{}, nil); res.Index != 2 {
		t.Errorf("ratio 1: picked %d, want the CPU worker", res.Index)
	}
}

// The CPU share is exact past 64 bits: at ratio 2^53 and 2,048
// accelerator ranks the divisor is 2^64, which wrapped to 0 and divided by
// it. Catches the products taken in 64 bits.
func TestDeviceAwareShareIn128Bits(t *testing.T) {
	for _, c := range []struct {
		t, a, cpus, r, n uint64
		want             bool
	}{
		{0, 16, 1, 8, 2, true},                     // 16/16 = 1 > 0
		{1, 16, 1, 8, 2, false},                    // 1 < 1 fails
		{0, 1 << 40, 1, 1 << 53, 2048, false},      // (2^40)/(2^64) = 0
		{0, 1 << 63, 1 << 16, 1 << 53, 2048, true}, // 2^79 / 2^64 = 2^15
		{1 << 15, 1 << 63, 1 << 16, 1 << 53, 2048, false},
		{5, 1 << 63, 4, 1, 1, true}, // quotient 2^65: past 64 bits
	} {
		if got := below(c.t, c.a, c.cpus, c.r, c.n); got != c.want {
			t.Errorf("below(%d, %d, %d, %d, %d) = %v, want %v", c.t, c.a, c.cpus, c.r, c.n, got, c.want)
		}
	}
	p := Params{Policy: protocol.PolicyDeviceAwareWeighted, BlockSize: 16, CudaToCPURatio: 1 << 53}
	cands := make([]Candidate, 2049)
	cands[2048].CPU = true
	if res := Select(p, Request{}, cands, -1, &countingDraws{}, nil); cands[res.Index].CPU {
		t.Errorf("an idle cluster at ratio 2^53 went to the CPU worker")
	}
}
