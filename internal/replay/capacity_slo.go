package replay

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"golang.org/x/sync/errgroup"
)

// CapacitySearch is how the capacity at SLO is searched for: the share of
// requests that must meet every goodput level, the relative width the
// bracket is narrowed to, and the most replays (each of every repeat) a
// contender is given.
type CapacitySearch struct {
	Attainment float64
	Tolerance  float64
	MaxProbes  int
}

// Defaults of a capacity search (replay --capacity).
const (
	DefaultCapacityAttainment = 0.9
	DefaultCapacityTolerance  = 0.02
	// DefaultCapacityProbes is enough to bracket a capacity up to 2^5
	// times (or down to 2^-5 of) the starting rate and narrow the bracket
	// to 2%: 6 probes bracket it, 6 halvings take a bracket of width 1 to
	// under 2%.
	DefaultCapacityProbes = 12
)

// The speed-ups a search stays within: --arrival-speedup-ratio's range.
const (
	minSpeedUp = 1e-9
	maxSpeedUp = 1e9
)

// Bounds of a contender's capacity (CapacityResult.Bound).
const (
	// BoundTolerance: a probe met the target and the next probed rate
	// above it, within the tolerance, did not.
	BoundTolerance = "tolerance"
	// BoundBracket: as BoundTolerance, but the probes ran out before the
	// bracket was that narrow.
	BoundBracket = "bracket"
	// BoundAtLeast: every probe met the target; the capacity is at least
	// the highest probed.
	BoundAtLeast = "at_least"
	// BoundBelow: no probe met the target; the capacity is below the
	// lowest probed (sustainable_rate 0).
	BoundBelow = "below"
)

// CapacityReport is the report's capacity part (replay --capacity): for
// each contender the highest offered request rate at which the share of
// requests meeting every goodput level stays at or above the target.
type CapacityReport struct {
	// AttainmentTarget is the share of the requests offered (rejected and
	// unfinished ones count as misses) that must meet every goodput level.
	AttainmentTarget float64 `json:"attainment_target"`
	// RelativeTolerance is how narrow the search makes its bracket: the
	// failing rate above the sustainable one is within (1 + tolerance) of
	// it.
	RelativeTolerance float64 `json:"relative_tolerance"`
	// MaxProbes bounds each contender's probes (each a replay of every
	// repeat).
	MaxProbes int `json:"max_probes"`
	// StartSpeedUp is the --arrival-speedup-ratio the search starts from.
	StartSpeedUp float64 `json:"start_speedup_ratio"`
	// UnitRate is the offered rate at speed-up 1, in requests/s: the
	// trace's requests over the span of its stamped arrivals (first turns;
	// later turns count in the requests), or a synthetic workload's one
	// request per arrival interval. A probe's offered rate is this times
	// its speed-up.
	UnitRate float64 `json:"unit_rate"`
	// Repeats is how many repeats each probe ran; a probe's attainment is
	// their mean.
	Repeats int `json:"repeats"`
	// Baseline is the contender the ratios are to ("": none).
	Baseline   string           `json:"baseline"`
	Contenders []CapacityResult `json:"contenders"`
}

// CapacityResult is one contender's capacity and the probes that found it.
type CapacityResult struct {
	Name string `json:"name"`
	// SustainableRate is the highest probed offered rate (requests/s) that
	// met the target; 0 when none did (Bound below).
	SustainableRate float64 `json:"sustainable_rate"`
	// FailingRate is the lowest probed rate above it that did not; null
	// when every probe met the target.
	FailingRate *float64 `json:"failing_rate" jsonschema:"nullable"`
	// Bound says how far SustainableRate is known: tolerance, bracket,
	// at_least or below.
	Bound string `json:"bound"`
	// RatioToBaseline is SustainableRate over the baseline's, when both
	// were bracketed (Bound tolerance or bracket); else null.
	RatioToBaseline *float64 `json:"ratio_to_baseline" jsonschema:"nullable"`
	// Probes are the points tried, in the order the search tried them.
	Probes []CapacityProbe `json:"probes"`
	// With several repeats, RepeatRates are the sustainable rates of a
	// search of each repeat alone (repeat k at seed + k, the same for every
	// contender), and Interval their mean and 95% Student-t interval: how
	// far the rate moves with the seed. SustainableRate stays the search
	// on the repeats' mean attainment.
	RepeatRates []float64 `json:"repeat_rates,omitempty"`
	Interval    *Estimate `json:"interval,omitempty"`
}

// CapacityProbe is one offered rate a search tried.
type CapacityProbe struct {
	SpeedUp     float64 `json:"speedup_ratio"`
	OfferedRate float64 `json:"offered_rate"`
	// Attainment is the mean over repeats of each repeat's share of
	// requests meeting every goodput level, with its 95% Student-t
	// interval across repeats (null with one).
	Attainment Estimate `json:"attainment"`
	Met        bool     `json:"met"`
	// MedianTTFTMS and P99TTFTMS are the completed requests' TTFT
	// percentiles, the repeats' means.
	MedianTTFTMS float64 `json:"median_ttft_ms"`
	P99TTFTMS    float64 `json:"p99_ttft_ms"`
}

// Check says what is wrong with the search's settings, naming the flag.
func (s CapacitySearch) Check() error {
	switch {
	case !(s.Attainment > 0 && s.Attainment <= 1):
		return fmt.Errorf("--attainment %v: expected a share above 0 and at most 1", s.Attainment)
	case !(s.Tolerance >= 1e-4 && s.Tolerance <= 1):
		return fmt.Errorf("--capacity-tolerance %v: expected a relative width from 0.0001 to 1", s.Tolerance)
	case s.MaxProbes < 2:
		return fmt.Errorf("capacity search: at least 2 probes, got %d", s.MaxProbes)
	}
	return nil
}

// Shaped is a copy of base (the requests as stamped: LoadUnshaped) with
// its arrivals shaped at speed-up ratio, as Load shapes them.
func Shaped(base []Request, ratio float64) []Request {
	out := slices.Clone(base)
	SpeedUp(out, ratio)
	return out
}

// UnitRate is the offered rate of base (the requests as stamped) at
// speed-up 1, in requests/s (CapacityReport.UnitRate).
func (e *Experiment) UnitRate(base []Request) (float64, error) {
	if s := e.Workload.Synthetic; s != nil {
		if !(s.ArrivalIntervalMS > 0) {
			return 0, fmt.Errorf("--arrival-interval-ms 0 sends every request at once: a capacity search needs a rate to scale (give an interval)")
		}
		return 1000 / s.ArrivalIntervalMS, nil
	}
	first, last := math.Inf(1), math.Inf(-1)
	for i := range base {
		if base[i].isRoot() {
			first, last = math.Min(first, base[i].Arrival), math.Max(last, base[i].Arrival)
		}
	}
	if !(last > first) {
		return 0, fmt.Errorf("the trace's arrivals span no time (every stamped request at one timestamp): a capacity search needs a rate to scale")
	}
	return float64(len(base)) / ((last - first) / 1000), nil
}

// Capacity searches each contender's capacity at SLO (the experiment's
// Goodput) on base, the requests as stamped (LoadUnshaped; a generated workload
// is made anew at each later repeat's seed and the probe's speed-up), from
// the experiment's own speed-up. Contenders search at once, Jobs at a
// time, each its probes in turn; the report does not depend on Jobs.
func (e *Experiment) Capacity(ctx context.Context, base []Request, s CapacitySearch) (*CapacityReport, error) {
	if !e.Goodput.Set() {
		return nil, fmt.Errorf("--capacity measures attainment of the --goodput levels: give --goodput ttft:MS tpot:MS")
	}
	if e.Workload.ReplayConcurrency > 0 {
		return nil, fmt.Errorf("--capacity scales the offered rate, which the closed loop of --replay-concurrency does not have: drop one of them")
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	unit, err := e.UnitRate(base)
	if err != nil {
		return nil, err
	}
	rep := &CapacityReport{AttainmentTarget: s.Attainment, RelativeTolerance: s.Tolerance, MaxProbes: s.MaxProbes,
		StartSpeedUp: e.Workload.ArrivalSpeedupRatio, UnitRate: unit, Repeats: e.repeats(), Baseline: e.Baseline,
		Contenders: make([]CapacityResult, len(e.Contenders))}
	jobs := max(e.Jobs, 1)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(jobs)
	for c := range e.Contenders {
		g.Go(func() error {
			probe := func(ratio float64) (CapacityProbe, error) {
				return e.probe(gctx, base, c, ratio, max(jobs/len(e.Contenders), 1), s.Attainment)
			}
			res, err := searchCapacity(e.Workload.ArrivalSpeedupRatio, unit, s, probe)
			if err != nil {
				return fmt.Errorf("capacity of policy %s: %w", e.Contenders[c].Name, err)
			}
			if e.repeats() > 1 {
				if res.RepeatRates, err = e.repeatRates(gctx, base, c, s, unit); err != nil {
					return fmt.Errorf("capacity of policy %s: %w", e.Contenders[c].Name, err)
				}
				est := MeanInterval(res.RepeatRates)
				res.Interval = &est
			}
			res.Name = e.Contenders[c].Name
			rep.Contenders[c] = res
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	rep.ratios()
	return rep, nil
}

// repeatRates searches contender c's capacity at each repeat alone: the
// run of seed + k, on repeat k's requests (a generated workload made at
// its seed), one replay a probe.
func (e *Experiment) repeatRates(ctx context.Context, base []Request, c int, s CapacitySearch, unit float64) ([]float64, error) {
	rates := make([]float64, e.repeats())
	for k := range rates {
		one := *e
		one.Repeats, one.Router.Seed = 1, e.seed(k)
		reqs := base
		if k > 0 && e.TracePath == "" {
			var err error
			if reqs, _, err = one.LoadUnshaped(); err != nil {
				return nil, err
			}
		}
		u := unit
		if k > 0 && e.TracePath == "" {
			var err error
			if u, err = one.UnitRate(reqs); err != nil {
				return nil, err
			}
		}
		res, err := searchCapacity(e.Workload.ArrivalSpeedupRatio, u, s, func(ratio float64) (CapacityProbe, error) {
			return one.probe(ctx, reqs, c, ratio, 1, s.Attainment)
		})
		if err != nil {
			return nil, fmt.Errorf("repeat %d: %w", k, err)
		}
		rates[k] = res.SustainableRate
	}
	return rates, nil
}

// ratios sets each contender's ratio to the baseline's rate, where both
// were bracketed.
func (r *CapacityReport) ratios() {
	i := slices.IndexFunc(r.Contenders, func(c CapacityResult) bool { return c.Name == r.Baseline })
	if i < 0 {
		return
	}
	b := &r.Contenders[i]
	for k := range r.Contenders {
		c := &r.Contenders[k]
		if c.bracketed() && b.bracketed() {
			c.RatioToBaseline = ptr(c.SustainableRate / b.SustainableRate)
		}
	}
}

func (c *CapacityResult) bracketed() bool {
	return c.Bound == BoundTolerance || c.Bound == BoundBracket
}

// probe replays contender c at speed-up ratio, every repeat, and measures
// its attainment: each repeat's requests meeting every level over all its
// requests (its records, rejected ones included), averaged.
func (e *Experiment) probe(ctx context.Context, base []Request, c int, ratio float64, jobs int, target float64) (CapacityProbe, error) {
	p := *e
	p.Contenders, p.Baseline, p.Jobs = e.Contenders[c:c+1], "", jobs
	p.Workload.ArrivalSpeedupRatio = ratio
	p.Streams, p.StreamsDone, p.Progress = Streams{}, nil, nil
	shares := make([]float64, e.repeats())
	var mu sync.Mutex
	p.Records = func(_ string, repeat int, recs []Record) error {
		met := 0
		for i := range recs {
			if e.Goodput.Meets(&recs[i]) {
				met++
			}
		}
		mu.Lock()
		defer mu.Unlock()
		shares[repeat] = float64(met) / float64(max(len(recs), 1))
		return nil
	}
	rep, _, err := p.Run(ctx, Shaped(base, ratio), TraceInfo{})
	if err != nil {
		return CapacityProbe{}, err
	}
	pr := CapacityProbe{SpeedUp: ratio, Attainment: MeanInterval(shares)}
	pr.Met = pr.Attainment.Mean >= target
	m := &rep.Deterministic.Policies[0]
	pr.MedianTTFTMS, pr.P99TTFTMS = m.MedianTTFTMS, m.P99TTFTMS
	if sum := rep.Deterministic.Contenders[0].Summary; sum != nil {
		pr.MedianTTFTMS, pr.P99TTFTMS = sum["median_ttft_ms"].Mean, sum["p99_ttft_ms"].Mean
	}
	return pr, nil
}

// searchCapacity finds the highest speed-up whose probe meets the target:
// from start, doubling while probes meet it (halving while they do not)
// until one side of the target is found, then bisecting the bracket until
// its width is within the tolerance of its low end, at most s.MaxProbes
// probes in all. The steps depend only on the probes' answers, so the
// same answers give the same steps. It assumes attainment falls as load
// grows; where it does not, the rate found is one that met the target
// with a probed rate just above it that did not.
func searchCapacity(start, unit float64, s CapacitySearch, probe func(ratio float64) (CapacityProbe, error)) (CapacityResult, error) {
	var res CapacityResult
	try := func(ratio float64) (bool, error) {
		p, err := probe(ratio)
		if err != nil {
			return false, err
		}
		p.SpeedUp, p.OfferedRate = ratio, float64(unit*ratio)
		res.Probes = append(res.Probes, p)
		return p.Met, nil
	}
	lo, hi := 0.0, 0.0 // the highest speed-up met and the lowest failed; 0: none yet
	met, err := try(start)
	if err != nil {
		return res, err
	}
	if met {
		lo = start
		for hi == 0 && len(res.Probes) < s.MaxProbes && float64(2*lo) <= maxSpeedUp {
			if met, err = try(2 * lo); err != nil {
				return res, err
			} else if met {
				lo = 2 * lo
			} else {
				hi = 2 * lo
			}
		}
	} else {
		hi = start
		for lo == 0 && len(res.Probes) < s.MaxProbes && hi/2 >= minSpeedUp {
			if met, err = try(hi / 2); err != nil {
				return res, err
			} else if met {
				lo = hi / 2
			} else {
				hi = hi / 2
			}
		}
	}
	for lo > 0 && hi > 0 && float64(hi-lo) > float64(s.Tolerance*lo) && len(res.Probes) < s.MaxProbes {
		mid := (lo + hi) / 2 // not lo + (hi-lo)/2: the halving is a product by 0.5, which arm64 fuses with the sum
		if met, err = try(mid); err != nil {
			return res, err
		} else if met {
			lo = mid
		} else {
			hi = mid
		}
	}
	res.SustainableRate = float64(unit * lo)
	switch {
	case lo == 0:
		res.Bound = BoundBelow
	case hi == 0:
		res.Bound = BoundAtLeast
	case float64(hi-lo) > float64(s.Tolerance*lo):
		res.Bound = BoundBracket
	default:
		res.Bound = BoundTolerance
	}
	if hi > 0 {
		res.FailingRate = ptr(float64(unit * hi))
	}
	return res, nil
}

// WriteCapacityTable prints each contender's capacity: its sustainable
// rate ("≥" when no probe failed, "<" when none met the target), its ratio
// to the baseline and its probes, under a line saying what was searched.
func WriteCapacityTable(w io.Writer, r *CapacityReport, slo SLO) error {
	fmt.Fprintf(w, "\ncapacity at SLO (%s): the highest offered rate with attainment >= %.3g (%s), to %.3g%% (at most %d probes a contender, each %s); offered rate %.3f req/s at speed-up 1\n",
		slo.Describe(), r.AttainmentTarget, "requests meeting every level over all offered, rejected ones missing", float64(100*r.RelativeTolerance), r.MaxProbes, repeatsWord(r.Repeats), r.UnitRate)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	against := "x baseline"
	if r.Baseline != "" {
		against = "x " + r.Baseline
	}
	repeats := r.Repeats > 1
	head := fmt.Sprintf("contender\tsustainable req/s\t%s\tprobes\t", against)
	if repeats {
		head += "each repeat alone: mean [95% interval]\t"
	}
	fmt.Fprintln(tw, head)
	for _, c := range r.Contenders {
		rate := fmt.Sprintf("%.2f", c.SustainableRate)
		switch c.Bound {
		case BoundAtLeast:
			rate = ">= " + rate
		case BoundBelow:
			rate = fmt.Sprintf("< %.2f", *c.FailingRate)
		case BoundBracket:
			rate += fmt.Sprintf(" (< %.2f)", *c.FailingRate)
		}
		ratio := "-"
		switch {
		case c.Name == r.Baseline:
			ratio = "1 (baseline)"
		case c.RatioToBaseline != nil:
			ratio = fmt.Sprintf("%.3f", *c.RatioToBaseline)
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%d\t", c.Name, rate, ratio, len(c.Probes))
		if repeats && c.Interval != nil && c.Interval.CI95 != nil {
			line += fmt.Sprintf("%.2f [%.2f, %.2f]\t", c.Interval.Mean, c.Interval.CI95[0], c.Interval.CI95[1])
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range r.Contenders {
		for _, p := range c.Probes {
			if ci := p.Attainment.CI95; ci != nil && ci[0] < r.AttainmentTarget && ci[1] >= r.AttainmentTarget &&
				(p.OfferedRate == c.SustainableRate || (c.FailingRate != nil && p.OfferedRate == *c.FailingRate)) {
				fmt.Fprintf(w, "note: %s's attainment at %.2f req/s, %.3f [%.3f, %.3f], holds the target in its 95%% interval: more repeats would settle which side it is on\n",
					c.Name, p.OfferedRate, p.Attainment.Mean, ci[0], ci[1])
			}
		}
	}
	return nil
}

// repeatsWord says what a probe ran.
func repeatsWord(n int) string {
	if n == 1 {
		return "one replay"
	}
	return fmt.Sprintf("%d repeats, attainment their mean", n)
}

// Describe is the levels set, for a heading: "ttft <= 1000 ms, tpot <= 50 ms".
func (s SLO) Describe() string {
	var out []string
	for _, l := range []struct {
		name string
		ms   float64
	}{{"ttft", s.TTFTMS}, {"tpot", s.TPOTMS}, {"e2el", s.E2ELMS}} {
		if l.ms > 0 {
			out = append(out, fmt.Sprintf("%s <= %g ms", l.name, l.ms))
		}
	}
	return strings.Join(out, ", ")
}
