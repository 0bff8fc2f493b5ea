package sweep

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/offline-router/offline-router/internal/replay"
)

// DefaultBaseline is the baseline point's settings when the objective
// names none: plain round robin, where the grid has it.
const DefaultBaseline = "--policy=round_robin"

// value is a point's figure: the mean over its repeats, the 95% interval
// (the value itself with one repeat), and each repeat's value.
type value struct {
	mean, lo, hi float64
	repeats      []float64
}

// value is the point's figure for a metric, and whether it has it.
func (r *PointResult) value(name string) (value, bool) {
	d := &r.Report
	if name == SustainableRate { // the search on the repeats' mean, and each repeat's
		if d.Capacity == nil || len(d.Capacity.Contenders) != 1 {
			return value{}, false
		}
		c := &d.Capacity.Contenders[0]
		v := c.SustainableRate
		if c.Interval != nil && c.Interval.CI95 != nil { // a search of each repeat alone: paired across points
			return value{v, c.Interval.CI95[0], c.Interval.CI95[1], c.RepeatRates}, true
		}
		return value{v, v, v, []float64{v}}, true
	}
	if len(d.Contenders) == 1 && len(d.Contenders[0].Repeats) > 1 {
		reps := d.Contenders[0].Repeats
		xs := make([]float64, 0, len(reps))
		for i := range reps {
			v, ok := Metric(&reps[i], name)
			if !ok {
				return value{}, false
			}
			xs = append(xs, v)
		}
		e := replay.MeanInterval(xs)
		return value{e.Mean, e.CI95[0], e.CI95[1], xs}, true
	}
	v, ok := Metric(r.metrics(), name)
	return value{v, v, v, []float64{v}}, ok
}

// Mean is the point's figure for a metric, the mean over its repeats, and
// whether it has it.
func (r *PointResult) Mean(name string) (float64, bool) {
	v, ok := r.value(name)
	return v.mean, ok
}

// settings are the point's grid settings as the table prints them.
func (r *PointResult) settings() string { return strings.Join(r.Varied, " ") }

// front is the objective's pair of metrics.
func (o *Objective) front() Front {
	f := Front{X: o.metric(), XLower: o.Minimize != ""}
	for _, name := range slices.Sorted(maps.Keys(o.SubjectTo)) {
		if name != "rejected" && name != f.X {
			b := o.SubjectTo[name]
			f.Y, f.YLower = name, b.Max != nil
			return f
		}
	}
	if f.X == "prefix_hit_rate" {
		f.Y, f.YLower = "p99_ttft_ms", true
	} else {
		f.Y = "prefix_hit_rate"
	}
	return f
}

// judgeWorkload marks the front among the points of one workload that
// serve every request, and recommends the best point within the bounds
// when it is distinguishable from the runner-up.
func (t *TableResult) judgeWorkload(w *WorkloadResult, idx []int, tried map[string]map[string][]float64) {
	pts, o := t.Points, &t.Objective
	baseline := cmp.Or(o.Baseline, DefaultBaseline)
	var base *PointResult
	for _, i := range idx {
		if contenderOf(&pts[i].Point, t.Scenario) == baseline {
			base = &pts[i]
			w.Baseline = &pts[i].ID
		}
	}
	// Both metrics turned so that less is better.
	at := func(i int, name string, lower bool) float64 {
		v, _ := pts[i].value(name)
		if lower {
			return v.mean
		}
		return -v.mean
	}
	x := func(i int) float64 { return at(i, t.Front.X, t.Front.XLower) }
	y := func(i int) float64 { return at(i, t.Front.Y, t.Front.YLower) }
	var serving []int
	for _, i := range idx {
		_, hasX := pts[i].value(t.Front.X)
		_, hasY := pts[i].value(t.Front.Y)
		if o.servesEnough(&pts[i]) && hasX && hasY {
			serving = append(serving, i)
		}
	}
	// By x, then y: a point is on the front when no point before it is as
	// good on y, or it equals the one that set the best.
	order := slices.Clone(serving)
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Or(cmp.Compare(x(a), x(b)), cmp.Compare(y(a), y(b))) })
	best := -1
	for _, i := range order {
		if best < 0 || y(i) < y(best) || y(i) == y(best) && x(i) == x(best) {
			if best < 0 || y(i) < y(best) {
				best = i
			}
			pts[i].OnFront = true
			w.Pareto = append(w.Pareto, pts[i].ID)
		}
	}
	var eligible []int
	for _, i := range idx {
		p := &pts[i]
		if v, ok := p.value(o.metric()); ok {
			p.Objective = replay.Estimate{Mean: v.mean}
			if len(v.repeats) > 1 {
				p.Objective.CI95 = &[2]float64{v.lo, v.hi}
			}
			if b, ok := base.valueOf(o.metric()); ok && b != 0 {
				r := v.mean / b
				p.VsBaseline = &r
			}
		}
		p.MeetsBounds = o.servesEnough(p) && o.keeps(p, base)
		if _, ok := p.value(o.metric()); ok && p.MeetsBounds {
			eligible = append(eligible, i)
		}
	}
	obj := func(i int) float64 { return at(i, o.metric(), o.Minimize != "") }
	slices.SortStableFunc(eligible, func(a, b int) int { return cmp.Compare(obj(a), obj(b)) })
	w.Tied = []string{}
	switch {
	case len(eligible) == 0:
		w.Test = "none"
		return
	case len(eligible) == 1:
		w.Test = "alone"
		w.Recommended = &pts[eligible[0]].ID
		w.Edges = t.edges(&pts[eligible[0]], tried)
		return
	}
	top, runner := &pts[eligible[0]], &pts[eligible[1]]
	w.RunnerUp = &runner.ID
	margin, tested := pairedDifference(top, runner, o.metric())
	if !tested {
		w.Test = "one_repeat"
		if o.metric() == SustainableRate {
			w.Test = "no_interval" // a search's rate, not a mean over repeats
		}
		w.Recommended = &top.ID
		w.Edges = t.edges(top, tried)
		return
	}
	w.Margin = &margin
	if margin.CI95[0] > 0 || margin.CI95[1] < 0 {
		w.Test = "distinct"
		w.Recommended = &top.ID
		w.Edges = t.edges(top, tried)
		return
	}
	w.Test = "tie"
	w.Tied = append(w.Tied, top.ID)
	for _, i := range eligible[1:] {
		if d, ok := pairedDifference(top, &pts[i], o.metric()); ok && d.CI95[0] <= 0 && d.CI95[1] >= 0 {
			w.Tied = append(w.Tied, pts[i].ID)
		}
	}
}

// valueOf is the baseline's mean of a metric; false without a baseline.
func (r *PointResult) valueOf(name string) (float64, bool) {
	if r == nil {
		return 0, false
	}
	return r.Mean(name)
}

// pairedDifference is a's mean difference to b on a metric over their
// repeats, which share their seeds, with its 95% interval; false when
// either has one repeat (or they differ in repeats).
func pairedDifference(a, b *PointResult, metric string) (replay.Estimate, bool) {
	x, _ := a.value(metric)
	y, _ := b.value(metric)
	if len(x.repeats) < 2 || len(x.repeats) != len(y.repeats) {
		return replay.Estimate{}, false
	}
	d := make([]float64, len(x.repeats))
	for k := range d {
		d[k] = x.repeats[k] - y.repeats[k]
	}
	return replay.MeanInterval(d), true
}

// keeps reports whether the point is within every bound by its whole
// interval; a metric the point does not have (request_goodput without
// --goodput), or a bound on the baseline where there is none, keeps none.
func (o *Objective) keeps(p *PointResult, base *PointResult) bool {
	for name, b := range o.SubjectTo {
		v, ok := p.value(name)
		if !ok {
			return false
		}
		limit := func(l *Limit) (float64, bool) {
			if !l.OfBaseline {
				return l.Value, true
			}
			bv, ok := base.valueOf(name)
			return float64(l.Value * bv), ok
		}
		if b.Min != nil {
			if m, ok := limit(b.Min); !ok || v.lo < m {
				return false
			}
		}
		if b.Max != nil {
			if m, ok := limit(b.Max); !ok || v.hi > m {
				return false
			}
		}
	}
	return true
}

// String says the objective in words: "minimize p99_ttft_ms with
// worker_share_cv <= 0.1".
func (o *Objective) String() string {
	s := "minimize " + o.Minimize
	if o.Maximize != "" {
		s = "maximize " + o.Maximize
	}
	var bounds []string
	for _, name := range slices.Sorted(maps.Keys(o.SubjectTo)) {
		b := o.SubjectTo[name]
		if b.Min != nil {
			bounds = append(bounds, fmt.Sprintf("%s >= %s", name, b.Min))
		}
		if b.Max != nil {
			bounds = append(bounds, fmt.Sprintf("%s <= %s", name, b.Max))
		}
	}
	if _, ok := o.SubjectTo["rejected"]; !ok {
		bounds = append(bounds, "no request rejected")
	}
	return s + " with " + strings.Join(bounds, " and ")
}

// WriteTable prints the table: a row per point in spec order with the
// objective's metric and its ratio to the baseline, the front marked,
// then per workload the recommendation, how it stands against the
// runner-up, and how to rerun it. specDir is the spec's folder, which
// trace paths in the spec are relative to; "" when not known (a merge),
// and the rerun line then says so.
func WriteTable(w io.Writer, t *Table, specDir string) error {
	r := &t.Deterministic
	recommended, baselines := map[string]bool{}, map[string]bool{}
	for _, wl := range r.Workloads {
		if wl.Recommended != nil {
			recommended[*wl.Recommended] = true
		}
		if wl.Baseline != nil {
			baselines[*wl.Baseline] = true
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "point\t"
	if len(r.Workloads) > 1 {
		head += "workload\t"
	}
	metric := r.Objective.metric()
	fmt.Fprintln(tw, head+"settings\t"+metric+"\tvs baseline\thit rate\tTTFT p50 (ms)\tTTFT p99 (ms)\tshare CV\trejected\t")
	for _, p := range r.Points {
		mean := func(name string) float64 { v, _ := p.Mean(name); return v }
		mark := ""
		if p.OnFront {
			mark = " *"
		}
		if recommended[p.ID] {
			mark += " <- recommended"
		}
		row := p.ID + "\t"
		if len(r.Workloads) > 1 {
			row += p.Workload + "\t"
		}
		settings := p.settings()
		if settings == "" {
			settings = "(the spec's flags)"
		}
		objective := fixed(p.Objective.Mean, p.Objective.Mean)
		if p.Objective.CI95 != nil {
			objective += " ±" + fixed(float64(p.Objective.CI95[1]-p.Objective.Mean), p.Objective.Mean)
		}
		if !p.MeetsBounds {
			mark += " (outside the bounds)"
		}
		vs := "-"
		switch {
		case baselines[p.ID]:
			vs = "baseline"
		case p.VsBaseline != nil:
			vs = fmt.Sprintf("%.3fx", *p.VsBaseline)
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%.3f\t%.1f\t%.1f\t%.3f\t%s\t%s\n", row, settings, objective, vs,
			mean("prefix_hit_rate"), mean("median_ttft_ms"), mean("p99_ttft_ms"), mean("worker_share_cv"), count(mean("rejected")), mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	f := r.Front
	fmt.Fprintf(w, "\n* on the Pareto front of %s (%s) against %s (%s), among points that rejected nothing\n",
		f.X, direction(f.XLower), f.Y, direction(f.YLower))
	if d := &r.Points[0].Report; d.Repeats > 1 && len(d.Seeds) == d.Repeats {
		fmt.Fprintf(w, "each figure is the mean over %d repeats (seeds %d to %d); the objective's ± is half its 95%% interval, which a bound must keep whole\n",
			d.Repeats, d.Seeds[0], d.Seeds[d.Repeats-1])
	}
	for _, wl := range r.Workloads {
		if err := writeVerdict(w, r, &wl, specDir); err != nil {
			return err
		}
	}
	return writeSummary(w, r)
}

// writeSummary says, with several scenarios, which contender won how many
// (and tied in how many).
func writeSummary(w io.Writer, r *TableResult) error {
	if len(r.Workloads) < 2 {
		return nil
	}
	fmt.Fprintf(w, "\nover %d scenarios (workloads", len(r.Workloads))
	if len(r.Scenario) > 0 {
		fmt.Fprintf(w, " × %s", strings.Join(r.Scenario, ", "))
	}
	fmt.Fprintln(w, "):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  contender\twins\tties\tscenarios\t")
	for _, c := range r.Summary {
		if c.Wins+c.Ties == 0 {
			continue
		}
		name := c.Contender
		if name == "" {
			name = "(the spec's flags)"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t\n", name, c.Wins, c.Ties, c.Scenarios)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "  (a contender that neither won nor tied anywhere is left out)")
	return err
}

// fixed writes x in fixed point, with the decimals four significant
// digits of a value of scale's size need: 186.6 ±1.9, 0.0331 ±0.0042,
// never 1.8e+02.
func fixed(x, scale float64) string {
	decimals := 3
	for limit := 10.0; decimals > 0 && math.Abs(scale) >= limit; limit *= 10 {
		decimals--
	}
	if math.Abs(scale) < 1 {
		decimals = 4
	}
	return strconv.FormatFloat(x, 'f', decimals, 64)
}

// count writes a mean of counts: whole when it is, else to a tenth.
func count(x float64) string {
	if x == math.Trunc(x) {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'f', 1, 64)
}

func direction(lower bool) string {
	if lower {
		return "lower"
	}
	return "higher"
}

// writeVerdict prints one workload's recommendation (or the tie that
// stops one) and its rerun line.
func writeVerdict(w io.Writer, r *TableResult, wl *WorkloadResult, specDir string) error {
	on := ""
	if len(r.Workloads) > 1 {
		on = " on " + wl.Workload
		if len(wl.Scenario) > 0 {
			on += " with " + strings.Join(wl.Scenario, " ")
		}
	}
	metric := r.Objective.metric()
	if h := wl.Headroom; h != nil {
		fmt.Fprintf(w, "headroom%s: any router's prefix hit rate is at most %.3f (an infinite cache); one LRU cache of the cluster's %d blocks reaches %.3f\n",
			on, h.InfiniteCacheHitRate, h.LRUCapacityBlocks, h.ClusterLRUHitRate)
	}
	switch wl.Test {
	case "none":
		_, err := fmt.Fprintf(w, "no point%s meets the objective: %s\n", on, r.Objective.String())
		return err
	case "tie":
		_, err := fmt.Fprintf(w, "no recommendation%s for %s: %s tie on %s (each one's paired 95%% interval of its difference to the best holds 0; more repeats may part them)\n",
			on, r.Objective.String(), strings.Join(wl.Tied, ", "), metric)
		return err
	}
	p := &r.Points[slices.IndexFunc(r.Points, func(p PointResult) bool { return p.ID == *wl.Recommended })]
	fmt.Fprintf(w, "recommended%s for %s: %s, %s = %.4g\n", on, r.Objective.String(), p.ID, metric, p.Objective.Mean)
	runnerUp := func() string {
		i := slices.IndexFunc(r.Points, func(p PointResult) bool { return p.ID == *wl.RunnerUp })
		return fmt.Sprintf("%s (%s)", *wl.RunnerUp, r.Points[i].settings())
	}
	switch wl.Test {
	case "distinct":
		fmt.Fprintf(w, "  against the runner-up %s: %s %+.4g [%+.4g, %+.4g] (the paired difference over %d repeats, 95%%)\n",
			runnerUp(), metric, wl.Margin.Mean, wl.Margin.CI95[0], wl.Margin.CI95[1], p.Report.Repeats)
	case "one_repeat":
		fmt.Fprintf(w, "  not tested against the runner-up %s: one repeat gives no interval (give the spec's flags \"repeats\": 5)\n", runnerUp())
	case "no_interval":
		fmt.Fprintf(w, "  not tested against the runner-up %s: a capacity is one search on the repeats' mean, with no interval of its own\n", runnerUp())
	}
	for _, e := range wl.Edges {
		fmt.Fprintf(w, "  warning: %s; extend the grid\n", e)
	}
	args := p.Flags
	note := ""
	if p.Workload != Builtin {
		trace := p.Workload
		switch {
		case specDir != "" && !filepath.IsAbs(trace):
			trace = filepath.Join(specDir, trace)
		case !filepath.IsAbs(trace):
			note = " (the trace's path is relative to the spec's folder)"
		}
		args = append([]string{trace}, args...)
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellWord(a)
	}
	_, err := fmt.Fprintf(w, "rerun it%s: offline-router replay %s\n", note, strings.Join(quoted, " "))
	return err
}
