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
		t.Points = append(t.Points, PointResult{Point: Point{ID: fmt.Sprint("p", i)},
			Report: replay.Deterministic{Policies: []replay.Metrics{{PrefixHitRate: m[0], P99TTFTMS: m[1], WorkerShareCV: m[2]}}}})
	}
	t.judge()
	return t
}

// TestParetoAndRecommendation works the front and the pick out by hand.
func TestParetoAndRecommendation(t *testing.T) {
	cv := 0.1
	obj := Objective{Minimize: "p99_ttft_ms", SubjectTo: map[string]Bound{"worker_share_cv": {Max: &cv}}}
	r := results(obj,
		[3]float64{0.30, 100, 0.05}, // p0: front (lowest p99)
		[3]float64{0.28, 120, 0.01}, // p1: beaten by p0 on both
		[3]float64{0.40, 150, 0.20}, // p2: front (higher hit), but outside the bound
		[3]float64{0.40, 150, 0.02}, // p3: equal to p2: neither beats the other, front
		[3]float64{0.40, 160, 0.01}, // p4: same hit as p2 and p3, slower: beaten
		[3]float64{0.35, 100, 0.09}, // p5: beats p0 (same p99, higher hit): front; p0 is beaten
	)
	if got := strings.Join(r.Pareto, " "); got != "p5 p2 p3" {
		t.Errorf("front %q, want p5 p2 p3 by rising hit rate", got)
	}
	for i, want := range []bool{false, false, true, true, false, true} {
		if r.Points[i].OnFront != want {
			t.Errorf("p%d on the front: %v, want %v", i, r.Points[i].OnFront, want)
		}
	}
	// Lowest p99 within cv <= 0.1: p0 and p5 tie at 100; the first in spec order.
	if r.Recommended == nil || *r.Recommended != "p0" || r.Points[2].MeetsBounds || !r.Points[4].MeetsBounds {
		t.Errorf("recommended %v; bounds %v %v", r.Recommended, r.Points[2].MeetsBounds, r.Points[4].MeetsBounds)
	}
	hit := Objective{Maximize: "prefix_hit_rate", SubjectTo: map[string]Bound{"worker_share_cv": {Max: &cv}}}
	if r := results(hit, [3]float64{0.3, 1, 0}, [3]float64{0.5, 1, 0.3}, [3]float64{0.4, 1, 0}); *r.Recommended != "p2" {
		t.Errorf("maximize: %s, want p2 (p1 is outside the bound)", *r.Recommended)
	}
	none := results(obj, [3]float64{0.3, 1, 0.5})
	var b bytes.Buffer
	WriteTable(&b, &Table{Deterministic: *none}, "")
	if none.Recommended != nil || !strings.Contains(b.String(), "no point meets the objective's bounds (minimize p99_ttft_ms with worker_share_cv <= 0.1)") {
		t.Errorf("no feasible point: %v\n%s", none.Recommended, b.String())
	}
}

// TestMetricByName reads every metric an objective may name.
func TestMetricByName(t *testing.T) {
	m := &replay.Metrics{Completed: 3, TotalInputTokens: 7, P99TTFTMS: 2.5}
	if Metric(m, "completed") != 3 || Metric(m, "total_input_tokens") != 7 || Metric(m, "p99_ttft_ms") != 2.5 {
		t.Error("metrics read by their JSON names are wrong")
	}
	for _, name := range MetricNames {
		Metric(m, name) // panics on a name it cannot read
	}
	if len(MetricNames) < 30 {
		t.Errorf("only %d metrics", len(MetricNames))
	}
}
