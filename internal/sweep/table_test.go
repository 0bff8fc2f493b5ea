package sweep

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/replay"
)

func results(objective Objective, metrics ...[3]float64) *TableResult {
	t := &TableResult{Objective: objective}
	for i, m := range metrics {
		t.Points = append(t.Points, PointResult{Point: Point{ID: fmt.Sprint("p", i), Workload: Builtin},
			Report: replay.Deterministic{Policies: []replay.Metrics{{PrefixHitRate: m[0], P99TTFTMS: m[1], WorkerShareCV: m[2]}}}})
	}
	t.judge()
	return t
}

// TestParetoAndRecommendation works the front and the pick out by hand.
func TestParetoAndRecommendation(t *testing.T) {
	cv := 0.1
	// The front is the objective's metric against the first it bounds
	// (by name): p99 TTFT (lower) against hit rate (higher, a min bound).
	obj := Objective{Minimize: "p99_ttft_ms", SubjectTo: map[string]Bound{"worker_share_cv": {Max: &Limit{Value: cv}}, "prefix_hit_rate": {Min: &Limit{}}}}
	r := results(obj,
		[3]float64{0.30, 100, 0.05}, // p0: front (lowest p99)
		[3]float64{0.28, 120, 0.01}, // p1: beaten by p0 on both
		[3]float64{0.40, 150, 0.20}, // p2: front (higher hit), but outside the bound
		[3]float64{0.40, 150, 0.02}, // p3: equal to p2: neither beats the other, front
		[3]float64{0.40, 160, 0.01}, // p4: same hit as p2 and p3, slower: beaten
		[3]float64{0.35, 100, 0.09}, // p5: beats p0 (same p99, higher hit): front; p0 is beaten
	)
	if got := strings.Join(r.Workloads[0].Pareto, " "); got != "p5 p2 p3" {
		t.Errorf("front %q, want p5 p2 p3 by rising p99", got)
	}
	for i, want := range []bool{false, false, true, true, false, true} {
		if r.Points[i].OnFront != want {
			t.Errorf("p%d on the front: %v, want %v", i, r.Points[i].OnFront, want)
		}
	}
	// Lowest p99 within cv <= 0.1: p0 and p5 tie at 100; the first in spec order.
	if r.Workloads[0].Recommended == nil || *r.Workloads[0].Recommended != "p0" || r.Points[2].MeetsBounds || !r.Points[4].MeetsBounds {
		t.Errorf("recommended %v; bounds %v %v", r.Workloads[0].Recommended, r.Points[2].MeetsBounds, r.Points[4].MeetsBounds)
	}
	hit := Objective{Maximize: "prefix_hit_rate", SubjectTo: map[string]Bound{"worker_share_cv": {Max: &Limit{Value: cv}}}}
	if r := results(hit, [3]float64{0.3, 1, 0}, [3]float64{0.5, 1, 0.3}, [3]float64{0.4, 1, 0}); *r.Workloads[0].Recommended != "p2" {
		t.Errorf("maximize: %s, want p2 (p1 is outside the bound)", *r.Workloads[0].Recommended)
	}
	none := results(obj, [3]float64{0.3, 1, 0.5})
	var b bytes.Buffer
	WriteTable(&b, &Table{Deterministic: *none}, "")
	if none.Workloads[0].Recommended != nil || !strings.Contains(b.String(), "no point meets the objective: minimize p99_ttft_ms with prefix_hit_rate >= 0 and worker_share_cv <= 0.1 and no request rejected") {
		t.Errorf("no feasible point: %v\n%s", none.Workloads[0].Recommended, b.String())
	}
}

// TestMetricByName reads every metric an objective may name.
func TestMetricByName(t *testing.T) {
	m := &replay.Metrics{Completed: 3, TotalInputTokens: 7, P99TTFTMS: 2.5}
	get := func(name string) float64 { v, _ := Metric(m, name); return v }
	if get("completed") != 3 || get("total_input_tokens") != 7 || get("p99_ttft_ms") != 2.5 {
		t.Error("metrics read by their JSON names are wrong")
	}
	if _, ok := Metric(m, "request_goodput"); ok {
		t.Error("request_goodput without --goodput is there")
	}
	g := 1.5
	m.RequestGoodput = &g
	if v, ok := Metric(m, "request_goodput"); !ok || v != 1.5 {
		t.Error("request_goodput with --goodput is not there")
	}
	for _, name := range MetricNames {
		Metric(m, name) // panics on a name it cannot read
	}
	if len(MetricNames) < 30 {
		t.Errorf("only %d metrics", len(MetricNames))
	}
}

// TestRejectionsAndWorkloads: a point that turned requests away is neither
// on the front nor recommended unless the objective bounds rejections
// itself; each workload is judged on its own.
func TestRejectionsAndWorkloads(t *testing.T) {
	r := results(Objective{Minimize: "mean_ttft_ms"},
		[3]float64{0.3, 100, 0}, [3]float64{0.9, 10, 0}, [3]float64{0.2, 200, 0})
	r.Points[1].Report.Policies[0].Rejected = 211 // served nothing: TTFT 0
	r.Points[2].Workload = "other.jsonl"
	r.Points[0].Report.Policies[0].MeanTTFTMS, r.Points[2].Report.Policies[0].MeanTTFTMS = 50, 70
	r.Points[1].OnFront, r.Points[0].OnFront, r.Points[2].OnFront = false, false, false
	r.judge()
	if len(r.Workloads) != 2 || r.Workloads[1].Workload != "other.jsonl" {
		t.Fatalf("workloads %+v", r.Workloads)
	}
	if got := strings.Join(r.Workloads[0].Pareto, " "); got != "p0" || *r.Workloads[0].Recommended != "p0" || r.Points[1].MeetsBounds {
		t.Errorf("a point that rejected requests: front %q, recommended %s", got, *r.Workloads[0].Recommended)
	}
	if *r.Workloads[1].Recommended != "p2" || !r.Points[2].OnFront {
		t.Errorf("the other workload's point is judged against the first's: %+v", r.Workloads[1])
	}
	most := 1000.0
	r.Objective.SubjectTo = map[string]Bound{"rejected": {Max: &Limit{Value: most}}}
	r.Workloads = nil
	r.judge()
	if *r.Workloads[0].Recommended != "p1" {
		t.Errorf("with rejections bounded by the objective: %s, want p1", *r.Workloads[0].Recommended)
	}
}

// repeated is a point of the builtin workload whose mean TTFT over its
// repeats is each of ttfts, with settings.
func repeated(id, settings string, ttfts ...float64) PointResult {
	p := PointResult{Point: Point{ID: id, Workload: Builtin, Varied: strings.Fields(settings)}}
	c := replay.ContenderReport{Name: id}
	for _, v := range ttfts {
		c.Repeats = append(c.Repeats, replay.Metrics{MeanTTFTMS: v, PrefixHitRate: 0.5})
	}
	p.Report = replay.Deterministic{Repeats: len(ttfts), Policies: c.Repeats[:1], Contenders: []replay.ContenderReport{c}}
	return p
}

// TestRecommendationNeedsADistinctBest: with repeats, the best point is
// recommended only when the paired interval of its difference to the
// runner-up holds no 0; else none is, and the tied set is named. A bound
// against the baseline is kept only by the whole interval.
func TestRecommendationNeedsADistinctBest(t *testing.T) {
	judge := func(o Objective, pts ...PointResult) *WorkloadResult {
		r := &TableResult{Objective: o, Points: pts}
		r.judge()
		return &r.Workloads[0]
	}
	min := Objective{Minimize: "mean_ttft_ms"}
	// a beats b at every seed by 10 ± 1: distinct. c is far behind.
	w := judge(min, repeated("a", "--policy=kv", 100, 90, 110), repeated("b", "--policy=llmd", 110, 101, 119),
		repeated("c", DefaultBaseline, 200, 190, 210))
	if w.Test != "distinct" || w.Recommended == nil || *w.Recommended != "a" || *w.RunnerUp != "b" || w.Margin.Mean >= 0 {
		t.Errorf("a distinct best: %+v", w)
	}
	if w.Baseline == nil || *w.Baseline != "c" {
		t.Errorf("the baseline point: %v, want c", w.Baseline)
	}
	// a and b swap places across seeds: a tie, and c, far behind, not in it.
	w = judge(min, repeated("a", "--policy=kv", 100, 120, 110), repeated("b", "--policy=llmd", 115, 105, 111),
		repeated("c", DefaultBaseline, 200, 190, 210))
	if w.Test != "tie" || w.Recommended != nil || strings.Join(w.Tied, " ") != "a b" {
		t.Errorf("a tie: test %s, recommended %v, tied %v", w.Test, w.Recommended, w.Tied)
	}
	var b bytes.Buffer
	r := &TableResult{Objective: min, Points: []PointResult{repeated("a", "--policy=kv", 100, 120, 110), repeated("b", "--policy=llmd", 115, 105, 111)}}
	r.judge()
	WriteTable(&b, &Table{Deterministic: *r}, "")
	if !strings.Contains(b.String(), "no recommendation for minimize mean_ttft_ms with no request rejected: a, b tie on mean_ttft_ms") {
		t.Errorf("the table does not name the tie:\n%s", b.String())
	}
	// Against the baseline: a's mean 100 is within 0.52x c's 200 (104),
	// but its interval (about ±5) is not; at 0.6x all of it is, and c,
	// 1x itself, is not.
	bounded := func(f float64) Objective {
		return Objective{Minimize: "mean_ttft_ms", SubjectTo: map[string]Bound{"mean_ttft_ms": {Max: &Limit{Value: f, OfBaseline: true}}}}
	}
	pts := func() []PointResult {
		return []PointResult{repeated("a", "--policy=kv", 100, 98, 102), repeated("c", DefaultBaseline, 200, 200, 200)}
	}
	if w := judge(bounded(0.52), pts()...); w.Recommended != nil || w.Test != "none" {
		t.Errorf("0.52x baseline: %v recommended (%s), want none (a's interval goes past 104)", w.Recommended, w.Test)
	}
	if w := judge(bounded(0.6), pts()...); w.Recommended == nil || *w.Recommended != "a" || w.Test != "alone" {
		t.Errorf("0.6x baseline: %v recommended (%s), want a alone", w.Recommended, w.Test)
	}
}

// TestLimitJSON: a bound is a number or "Fx baseline", and is written back
// as it was given.
func TestLimitJSON(t *testing.T) {
	for _, text := range []string{`0.1`, `"0.6x baseline"`, `2`} {
		var l Limit
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if back, _ := json.Marshal(l); string(back) != text {
			t.Errorf("%s comes back as %s", text, back)
		}
	}
	for _, bad := range []string{`"0.6 baseline"`, `"x baseline"`, `"-1x baseline"`, `true`, `"fast"`} {
		var l Limit
		if err := json.Unmarshal([]byte(bad), &l); err == nil {
			t.Errorf("%s is taken as %+v", bad, l)
		}
	}
}

// TestFixedPoint: the table's figures are fixed point, to four
// significant digits of their scale, and counts whole when they are.
// Catches exponents (%g) and a half-width written to other decimals than
// its mean.
func TestFixedPoint(t *testing.T) {
	for _, c := range []struct {
		x, scale float64
		want     string
	}{{186.6, 186.6, "186.6"}, {185.0, 189.9, "185.0"}, {0.03313, 0.03313, "0.0331"}, {4.2, 0.5, "4.2000"}, {12345, 12345, "12345"}, {1.5, 42, "1.50"}} {
		if got := fixed(c.x, c.scale); got != c.want {
			t.Errorf("fixed(%v, %v) = %s, want %s", c.x, c.scale, got, c.want)
		}
	}
	if count(3) != "3" || count(72.666) != "72.7" {
		t.Errorf("count: %s, %s", count(3), count(72.666))
	}
}

// TestScenariosEdgesAndTally: with "workers" a scenario flag, each value
// of it is judged apart, against its own baseline; a recommendation at a
// grid block's largest value is warned of (not one at a floor of 0); the
// summary counts each contender's wins and ties across scenarios.
// Catches scenarios judged together, a baseline taken across scenarios,
// an edge missed or a floor warned of, and a wrong tally.
func TestScenariosEdgesAndTally(t *testing.T) {
	pt := func(id, settings string, ttft ...float64) PointResult { return repeated(id, settings, ttft...) }
	r := &TableResult{Objective: Objective{Minimize: "mean_ttft_ms"}, Scenario: []string{"workers"}, Points: []PointResult{
		pt("a4", "--workers=4 --policy=kv --scale=1", 100, 101, 102),
		pt("b4", "--workers=4 --policy=kv --scale=8", 50, 51, 52), // best at 4 workers, at the block's top
		pt("r4", "--workers=4 --policy=round_robin", 200, 201, 202),
		pt("a8", "--workers=8 --policy=kv --scale=1", 60, 70, 65), // ties b8 at 8 workers
		pt("b8", "--workers=8 --policy=kv --scale=8", 66, 64, 67),
		pt("r8", "--workers=8 --policy=round_robin", 90, 91, 92),
		pt("t4", "--workers=4 --policy=kv --temp=0 --x=5", 300, 300, 300),
		pt("t8", "--workers=8 --policy=kv --temp=0.5 --x=5", 300, 300, 300),
	}}
	r.judge()
	if len(r.Workloads) != 2 || strings.Join(r.Workloads[0].Scenario, " ") != "--workers=4" || strings.Join(r.Workloads[1].Scenario, " ") != "--workers=8" {
		t.Fatalf("scenarios %+v", r.Workloads)
	}
	w4, w8 := &r.Workloads[0], &r.Workloads[1]
	if w4.Recommended == nil || *w4.Recommended != "b4" || w4.Baseline == nil || *w4.Baseline != "r4" || *w8.Baseline != "r8" {
		t.Errorf("4 workers: recommended %v, baseline %v; 8: baseline %v", w4.Recommended, w4.Baseline, w8.Baseline)
	}
	if len(w4.Edges) != 1 || !strings.Contains(w4.Edges[0], "--scale=8 is the largest value its grid block tries (1, 8)") {
		t.Errorf("edges %q", w4.Edges)
	}
	if w8.Test != "tie" || strings.Join(w8.Tied, " ") != "a8 b8" {
		t.Errorf("8 workers: %s, tied %v", w8.Test, w8.Tied)
	}
	if r.Points[1].VsBaseline == nil || *r.Points[1].VsBaseline != 51.0/201 {
		t.Errorf("b4 against its scenario's baseline: %v", r.Points[1].VsBaseline)
	}
	got := map[string][3]int{}
	for _, c := range r.Summary {
		got[c.Contender] = [3]int{c.Wins, c.Ties, c.Scenarios}
	}
	if got["--policy=kv --scale=8"] != [3]int{1, 1, 2} || got["--policy=kv --scale=1"] != [3]int{0, 1, 2} || r.Summary[0].Contender != "--policy=kv --scale=8" {
		t.Errorf("summary %+v", r.Summary)
	}
	// A knob at 0, the smallest tried, is at its floor: no warning.
	r = &TableResult{Objective: Objective{Minimize: "mean_ttft_ms"}, Points: []PointResult{
		pt("z", "--policy=kv --temp=0", 10, 11, 12), pt("h", "--policy=kv --temp=0.5", 50, 51, 52)}}
	r.judge()
	if len(r.Workloads[0].Edges) != 0 {
		t.Errorf("a floor warned of: %q", r.Workloads[0].Edges)
	}
}

// TestHeadroomPerScenario: each scenario states the headroom of its
// requests, from its points' reports, in the JSON and the printed table.
// Catches headroom dropped, or taken from another scenario.
func TestHeadroomPerScenario(t *testing.T) {
	a, b := repeated("a", "--workers=4 --policy=kv", 10), repeated("b", "--workers=8 --policy=kv", 10)
	a.Report.Headroom = &replay.Headroom{InfiniteCacheHitRate: 0.65, ClusterLRUHitRate: 0.3, LRUCapacityBlocks: 100}
	b.Report.Headroom = &replay.Headroom{InfiniteCacheHitRate: 0.65, ClusterLRUHitRate: 0.4, LRUCapacityBlocks: 200}
	r := &TableResult{Objective: Objective{Minimize: "mean_ttft_ms"}, Scenario: []string{"workers"}, Points: []PointResult{a, b}}
	r.judge()
	if r.Workloads[0].Headroom.LRUCapacityBlocks != 100 || r.Workloads[1].Headroom.LRUCapacityBlocks != 200 {
		t.Errorf("headroom %+v, %+v", r.Workloads[0].Headroom, r.Workloads[1].Headroom)
	}
	var out bytes.Buffer
	WriteTable(&out, &Table{Deterministic: *r}, "")
	if !strings.Contains(out.String(), "headroom on builtin with --workers=8: any router's prefix hit rate is at most 0.650 (an infinite cache); one LRU cache of the cluster's 200 blocks reaches 0.400") {
		t.Errorf("the table:\n%s", out.String())
	}
}

// TestSustainableRate: an objective on the capacity at SLO reads each
// point's search, and the best is not tested against the runner-up (a
// search's rate has no interval). Catches the rate read from the metrics
// (absent there), and a test claimed where none was made.
func TestSustainableRate(t *testing.T) {
	pt := func(id, settings string, rate float64) PointResult {
		p := repeated(id, settings, 10, 11)
		p.Report.Capacity = &replay.CapacityReport{Contenders: []replay.CapacityResult{{Name: id, SustainableRate: rate}}}
		return p
	}
	r := &TableResult{Objective: Objective{Maximize: SustainableRate}, Points: []PointResult{
		pt("kv", "--policy=kv", 22.2), pt("rr", DefaultBaseline, 11.6), pt("ll", "--policy=least_loaded", 13.2)}}
	r.judge()
	w := &r.Workloads[0]
	if w.Recommended == nil || *w.Recommended != "kv" || w.Test != "no_interval" || *w.RunnerUp != "ll" {
		t.Errorf("recommended %v (%s), runner-up %v", w.Recommended, w.Test, w.RunnerUp)
	}
	if v := r.Points[0].VsBaseline; v == nil || *v != 22.2/11.6 {
		t.Errorf("kv against the baseline: %v", v)
	}
	if _, ok := Metric(&replay.Metrics{}, SustainableRate); ok {
		t.Error("sustainable_rate read from the metrics")
	}
	// With each repeat's own search, the rates pair up across points.
	for i, rates := range [][]float64{{22, 23, 22.5}, {11, 11.5, 12}, {13, 13.5, 13.2}} {
		c := &r.Points[i].Report.Capacity.Contenders[0]
		est := replay.MeanInterval(rates)
		c.RepeatRates, c.Interval = rates, &est
	}
	r.judge()
	if w := &r.Workloads[0]; w.Test != "distinct" || *w.Recommended != "kv" || w.Margin.CI95[0] <= 0 {
		t.Errorf("with repeat rates: %s, margin %+v", w.Test, w.Margin)
	}
}
