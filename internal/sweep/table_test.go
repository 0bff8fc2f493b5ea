package sweep

import (
	"bytes"
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
