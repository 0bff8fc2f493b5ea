package replay

import (
	"context"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// threshold is a fake probe whose attainment is 1 up to speed-up limit
// and 0 past it: a capacity known exactly.
func threshold(limit float64, tried *[]float64) func(float64) (CapacityProbe, error) {
	return func(ratio float64) (CapacityProbe, error) {
		*tried = append(*tried, ratio)
		p := CapacityProbe{Attainment: Estimate{Mean: 0}}
		if ratio <= limit {
			p.Attainment.Mean = 1
		}
		p.Met = p.Attainment.Mean >= 0.9
		return p, nil
	}
}

var defaultSearch = CapacitySearch{Attainment: 0.9, Tolerance: 0.02, MaxProbes: DefaultCapacityProbes}

// TestSearchCapacityStepsAreTheStatedOnes: from speed-up 1 towards a
// capacity of 3.7, the search doubles to the first failure (1, 2, 4), then
// bisects until the bracket is within 2% of its low end: 3, 3.5, 3.75,
// 3.625, 3.6875 (3.75 - 3.6875 = 0.0625 <= 0.02 × 3.6875). Catches
// another growth factor, a bisection that keeps the wrong side, a stop
// rule other than the relative width, and rates not scaled by the unit.
func TestSearchCapacityStepsAreTheStatedOnes(t *testing.T) {
	var tried []float64
	res, err := searchCapacity(1, 10, defaultSearch, threshold(3.7, &tried))
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1, 2, 4, 3, 3.5, 3.75, 3.625, 3.6875}
	if !slices.Equal(tried, want) {
		t.Fatalf("probed %v, want %v", tried, want)
	}
	if res.Bound != BoundTolerance || res.SustainableRate != 36.875 || res.FailingRate == nil || *res.FailingRate != 37.5 {
		t.Errorf("%+v: want 36.875 req/s (failing at 37.5), within tolerance", res)
	}
	for i, p := range res.Probes {
		if p.SpeedUp != want[i] || p.OfferedRate != 10*want[i] {
			t.Errorf("probe %d: %+v, want speed-up %v at %v req/s", i, p, want[i], 10*want[i])
		}
	}
}

// TestSearchCapacityFindsAKnownCapacity: for capacities above, below and
// at the start, the rate found is one that met, the one above it failed,
// the two within the tolerance, in at most MaxProbes probes (capacities
// from 2^-5 to 2^5 of the start, as DefaultCapacityProbes states), the same
// steps each time. Catches a halving branch that doubles, a bracket that
// keeps a failing low end, and the probe bound dropped.
func TestSearchCapacityFindsAKnownCapacity(t *testing.T) {
	for _, tc := range []struct{ start, limit float64 }{{1, 3.7}, {1, 0.04}, {2, 2}, {1, 29.9}, {1, 31.5}, {0.5, 1}, {7, 0.2}} {
		var tried, again []float64
		res, err := searchCapacity(tc.start, 1, defaultSearch, threshold(tc.limit, &tried))
		if err != nil {
			t.Fatal(err)
		}
		searchCapacity(tc.start, 1, defaultSearch, threshold(tc.limit, &again))
		if !slices.Equal(tried, again) {
			t.Errorf("%+v: steps %v, then %v", tc, tried, again)
		}
		if len(tried) > defaultSearch.MaxProbes {
			t.Errorf("%+v: %d probes, more than %d", tc, len(tried), defaultSearch.MaxProbes)
		}
		if res.Bound != BoundTolerance || res.SustainableRate > tc.limit || res.FailingRate == nil || *res.FailingRate <= tc.limit ||
			*res.FailingRate-res.SustainableRate > 0.02*res.SustainableRate {
			t.Errorf("%+v: %s, %v to %v (probes %v)", tc, res.Bound, res.SustainableRate, res.FailingRate, tried)
		}
	}
}

// TestSearchCapacityOutOfReach: a capacity past what 12 probes reach is
// "at least" the highest probed (2^11 from 1), one under it "below" the
// lowest (2^-11): each in exactly 12 probes. Catches a search that runs
// past its bound, and a bound named the wrong way.
func TestSearchCapacityOutOfReach(t *testing.T) {
	for _, tc := range []struct {
		limit, rate float64
		bound       string
	}{{1e6, 2048, BoundAtLeast}, {1e-6, 0, BoundBelow}} {
		var tried []float64
		res, err := searchCapacity(1, 1, defaultSearch, threshold(tc.limit, &tried))
		if err != nil {
			t.Fatal(err)
		}
		if len(tried) != 12 || res.Bound != tc.bound || res.SustainableRate != tc.rate {
			t.Errorf("capacity %v: %d probes, %s %v", tc.limit, len(tried), res.Bound, res.SustainableRate)
		}
		if tc.bound == BoundBelow && (res.FailingRate == nil || *res.FailingRate != 1.0/2048) {
			t.Errorf("below: failing at %v, want the lowest probed, 1/2048", res.FailingRate)
		}
	}
	// A bracket found late: narrowed as far as the probes go, and said so.
	var tried []float64
	res, _ := searchCapacity(1, 1, CapacitySearch{Attainment: 0.9, Tolerance: 0.02, MaxProbes: 7}, threshold(40, &tried))
	if res.Bound != BoundBracket || len(tried) != 7 || res.SustainableRate != 32 || res.FailingRate == nil || *res.FailingRate != 64 {
		t.Errorf("late bracket: %s %v to %v in %v", res.Bound, res.SustainableRate, *res.FailingRate, tried)
	}
}

// capacityExperiment is a small overloaded cluster whose router turns
// requests away when busy: rejected requests are misses.
func capacityExperiment(repeats, jobs int) *Experiment {
	e := experiment(40, repeats, "round_robin", policy("kv", protocol.PolicyKV), policy("round_robin", protocol.PolicyRoundRobin))
	e.Cluster = cluster.Default(2)
	e.Goodput = SLO{TTFTMS: 200}
	e.Jobs = jobs
	for i := range e.Contenders {
		e.Contenders[i].Router.ActivePrefillTokensThreshold = ptr(100.0)
	}
	return e
}

// TestCapacityOfARealReplay: each probe's attainment is the requests
// meeting the SLO over all offered, rejected ones included (request
// goodput × duration over requests, from the probe's replay run alone);
// the rates found met the target and the failing ones did not; the
// report is the same at any Jobs; the ratio is the rates'. Catches
// attainment over completed requests, a probe run at another speed-up
// than its own, and results that depend on the order runs end.
func TestCapacityOfARealReplay(t *testing.T) {
	e := capacityExperiment(1, 1)
	base, _, err := e.LoadUnshaped()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.Capacity(context.Background(), base, CapacitySearch{Attainment: 0.8, Tolerance: 0.05, MaxProbes: 8})
	if err != nil {
		t.Fatal(err)
	}
	e2 := capacityExperiment(1, 4)
	rep2, err := e2.Capacity(context.Background(), base, CapacitySearch{Attainment: 0.8, Tolerance: 0.05, MaxProbes: 8})
	if err != nil || !reflect.DeepEqual(rep, rep2) {
		t.Fatalf("at 4 jobs: %v, a different report", err)
	}
	sawRejections := false
	for _, c := range rep.Contenders {
		if len(c.Probes) > 8 || c.Bound != BoundTolerance {
			t.Errorf("%s: %s in %d probes", c.Name, c.Bound, len(c.Probes))
		}
		for _, p := range c.Probes {
			one := *e
			one.Contenders = e.Contenders[slices.IndexFunc(e.Contenders, func(x Contender) bool { return x.Name == c.Name }):][:1]
			one.Baseline = ""
			r, _, err := one.Run(context.Background(), Shaped(base, p.SpeedUp), TraceInfo{})
			if err != nil {
				t.Fatal(err)
			}
			m := &r.Deterministic.Policies[0]
			sawRejections = sawRejections || m.Rejected > 0
			want := math.Round(*m.RequestGoodput*m.Duration) / float64(m.Requests)
			if math.Abs(p.Attainment.Mean-want) > 1e-12 || p.MedianTTFTMS != m.MedianTTFTMS || p.P99TTFTMS != m.P99TTFTMS {
				t.Errorf("%s at %v: attainment %v, TTFT %v/%v; the run gives %v, %v/%v", c.Name, p.SpeedUp, p.Attainment.Mean,
					p.MedianTTFTMS, p.P99TTFTMS, want, m.MedianTTFTMS, m.P99TTFTMS)
			}
			if p.Met != (p.Attainment.Mean >= 0.8) || (p.OfferedRate <= c.SustainableRate) != p.Met {
				t.Errorf("%s: probe %+v against a capacity of %v", c.Name, p, c.SustainableRate)
			}
		}
	}
	if !sawRejections {
		t.Error("no probe had a rejection: the test does not check that they miss")
	}
	kv, rr := rep.Contenders[0], rep.Contenders[1]
	if rr.RatioToBaseline == nil || *rr.RatioToBaseline != 1 || kv.RatioToBaseline == nil || *kv.RatioToBaseline != kv.SustainableRate/rr.SustainableRate {
		t.Errorf("ratios: kv %v, round_robin %v", kv.RatioToBaseline, rr.RatioToBaseline)
	}
}

// TestCapacityWithRepeats: a probe's attainment is the repeats' mean,
// with an interval, each repeat's workload made at its own seed and the
// probe's speed-up. Catches the mean taken from repeat 0 alone.
func TestCapacityWithRepeats(t *testing.T) {
	e := capacityExperiment(3, 2)
	e.Contenders = e.Contenders[1:]
	e.Baseline = ""
	base, _, _ := e.LoadUnshaped()
	rep, err := e.Capacity(context.Background(), base, CapacitySearch{Attainment: 0.8, Tolerance: 0.1, MaxProbes: 3})
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Contenders[0].Probes[1]
	var shares []float64
	for k := range 3 {
		one := *e
		one.Repeats, one.Router.Seed, one.Workload.ArrivalSpeedupRatio = 1, e.seed(k), p.SpeedUp
		for i := range one.Contenders {
			one.Contenders[i].Router.Seed = one.Router.Seed
		}
		trace, info, _ := one.Load()
		r, _, err := one.Run(context.Background(), trace, info)
		if err != nil {
			t.Fatal(err)
		}
		m := &r.Deterministic.Policies[0]
		shares = append(shares, math.Round(*m.RequestGoodput*m.Duration)/float64(m.Requests))
	}
	want := MeanInterval(shares)
	if math.Abs(p.Attainment.Mean-want.Mean) > 1e-12 || p.Attainment.CI95 == nil || math.Abs(p.Attainment.CI95[0]-want.CI95[0]) > 1e-12 {
		t.Errorf("attainment %+v, want %+v from %v", p.Attainment, want, shares)
	}
}

// TestRepeatRatesAreEachRepeatsSearch: with repeats, each repeat's rate
// is the search of that repeat alone, the run of seed + k (its workload
// made at that seed), and the interval is theirs. Catches repeat rates
// searched on the mean, another seed, or repeat 0's requests reused.
func TestRepeatRatesAreEachRepeatsSearch(t *testing.T) {
	e := capacityExperiment(2, 2)
	e.Contenders, e.Baseline = e.Contenders[1:], ""
	search := CapacitySearch{Attainment: 0.8, Tolerance: 0.1, MaxProbes: 4}
	base, _, _ := e.LoadUnshaped()
	rep, err := e.Capacity(context.Background(), base, search)
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Contenders[0]
	if len(c.RepeatRates) != 2 || c.Interval == nil || c.Interval.Mean != (c.RepeatRates[0]+c.RepeatRates[1])/2 {
		t.Fatalf("repeat rates %v, interval %+v", c.RepeatRates, c.Interval)
	}
	for k := range 2 {
		one := *e
		one.Repeats, one.Router.Seed = 1, e.seed(k)
		b, _, _ := one.LoadUnshaped()
		alone, err := one.Capacity(context.Background(), b, search)
		if err != nil {
			t.Fatal(err)
		}
		if got := alone.Contenders[0].SustainableRate; got != c.RepeatRates[k] {
			t.Errorf("repeat %d: %v, the search of seed %d alone %v", k, c.RepeatRates[k], one.Router.Seed, got)
		}
	}
}

// TestCapacityRefusals: no goodput levels, a closed loop, all requests at
// once: each refused, naming the flag. Catches each check dropped.
func TestCapacityRefusals(t *testing.T) {
	for why, mutate := range map[string]func(e *Experiment){
		"--goodput":            func(e *Experiment) { e.Goodput = SLO{} },
		"--replay-concurrency": func(e *Experiment) { e.Workload.ReplayConcurrency = 2 },
		"--arrival-interval-ms": func(e *Experiment) {
			e.Workload.Synthetic = &Synthetic{InputTokens: 8, OutputTokens: 2, RequestCount: 3}
		},
		"--attainment 0":        func(e *Experiment) {},
		"arrivals span no time": func(e *Experiment) {},
	} {
		e := capacityExperiment(1, 1)
		mutate(e)
		base, _, _ := e.LoadUnshaped()
		s := defaultSearch
		switch why {
		case "--attainment 0":
			s.Attainment = 0
		case "arrivals span no time":
			base = base[:1]
		}
		if _, err := e.Capacity(context.Background(), base, s); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v", why, err)
		}
	}
}

// TestShapedIsTheTraceLoadedAtItsRatio: the search's probes shape the
// requests as stamped; each is the trace loaded at the probe's ratio, to
// the bit. Catches a base shaped before (SpeedUp at ratio 1 shifts the
// later turns' unset arrivals), or a delay not scaled.
func TestShapedIsTheTraceLoadedAtItsRatio(t *testing.T) {
	e := experiment(30, 1, "")
	base, _, _ := e.LoadUnshaped()
	for _, ratio := range []float64{0.3, 1, 2.5, 7} {
		e.Workload.ArrivalSpeedupRatio = ratio
		want, _, _ := e.Load()
		if !reflect.DeepEqual(Shaped(base, ratio), want) {
			t.Errorf("speed-up %v: not the trace loaded at it", ratio)
		}
	}
}
