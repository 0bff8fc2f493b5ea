package figure

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/replay"
	"github.com/offline-router/offline-router/internal/sweep"
)

// tiedTable is a sweep of one workload whose objective (minimize mean
// TTFT, worker-share CV at most 0.5) ends in a tie of a and b; c is far
// behind on the objective and on the front's other metric.
func tiedTable() *sweep.Table {
	point := func(id string, ttft, cv float64) sweep.PointResult {
		return sweep.PointResult{Point: sweep.Point{ID: id, Workload: sweep.Builtin, Varied: []string{"--policy=kv", "--x=" + id}}, Policy: "kv",
			Report: replay.Deterministic{Policies: []replay.Metrics{{Policy: "kv", MeanTTFTMS: ttft, WorkerShareCV: cv, PrefixHitRate: 0.5}}}}
	}
	limit := sweep.Limit{Value: 0.5}
	t := &sweep.Table{Deterministic: sweep.TableResult{
		Objective: sweep.Objective{Minimize: "mean_ttft_ms", SubjectTo: map[string]sweep.Bound{"worker_share_cv": {Max: &limit}}},
		Front:     sweep.Front{X: "mean_ttft_ms", XLower: true, Y: "worker_share_cv", YLower: true},
		Points:    []sweep.PointResult{point("a", 100, 0.2), point("b", 101, 0.1), point("c", 400, 0.4)},
	}}
	t.Deterministic.Workloads = []sweep.WorkloadResult{{Workload: sweep.Builtin, Test: "tie", Tied: []string{"a", "b"}, Pareto: []string{"a", "b"}}}
	return t
}

// TestSweepPanelsPlotTheFront: the panels' axes are the front's two
// metrics, and the zoom frames the tied points (none is recommended).
// Catches axes fixed on hit rate and TTFT p99, and a zoom that leaves the
// tie out.
func TestSweepPanelsPlotTheFront(t *testing.T) {
	tab := tiedTable()
	r := &tab.Deterministic
	var pts []*sweep.PointResult
	for i := range r.Points {
		pts = append(pts, &r.Points[i])
	}
	// A front of one point: the zoom must still reach the other tied one.
	w := r.Workloads[0]
	w.Pareto = []string{"a"}
	all, zoom, key, err := sweepPanels(pts, w, r.Front, []string{"kv"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(all.X.Label.Text, "mean_ttft_ms") || !strings.HasPrefix(all.Y.Label.Text, "worker_share_cv") {
		t.Errorf("axes %q and %q, want the front's metrics", all.X.Label.Text, all.Y.Label.Text)
	}
	if !(zoom.X.Min < 100 && zoom.X.Max > 101 && zoom.Y.Min < 0.1 && zoom.Y.Max > 0.2) || zoom.X.Max > 400 || zoom.Title.Text != "The tied points" {
		t.Errorf("the zoom frames x %v..%v, y %v..%v: want both tied points, not c", zoom.X.Min, zoom.X.Max, zoom.Y.Min, zoom.Y.Max)
	}
	if len(key) != 1 || !strings.Contains(key[0], "mean_ttft_ms 100") {
		t.Errorf("key %q", key)
	}
	if err := SaveSweep(filepath.Join(t.TempDir(), "tie.png"), tab); err != nil {
		t.Fatal(err)
	}
}
