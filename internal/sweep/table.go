package sweep

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
)

// TableSchemaVersion is the version of the merged table's layout.
const TableSchemaVersion = 1

// Table is a sweep's merged table: what the points gave (deterministic:
// the same for the same plan, however and wherever its points ran) and how
// they ran.
type Table struct {
	SchemaVersion int         `json:"schema_version"`
	Deterministic TableResult `json:"deterministic"`
	Run           []PointRun  `json:"run"`
}

// TableResult is every point's outcome and, per workload (points on other
// traffic do not compare), the Pareto front and the recommended point.
type TableResult struct {
	Description string           `json:"description"`
	Objective   Objective        `json:"objective"`
	Workloads   []WorkloadResult `json:"workloads"`
	Points      []PointResult    `json:"points"`
}

// WorkloadResult judges the points of one workload. Only points that
// served every request (or keep the objective's own bound on "rejected")
// take part: a point that turned requests away shows the latency of those
// it kept.
type WorkloadResult struct {
	Workload    string `json:"workload"`
	TraceSHA256 string `json:"trace_sha256,omitempty"`
	// Recommended is the ID of the point the objective picks; null when no
	// point keeps the objective's bounds.
	Recommended *string `json:"recommended"`
	// Pareto lists the IDs of the points no other beats on both prefix hit
	// rate (higher) and TTFT p99 (lower), by rising hit rate.
	Pareto []string `json:"pareto"`
}

// PointResult is one point and its replay's deterministic report.
type PointResult struct {
	Point
	Policy string `json:"policy"`
	// OnFront: on its workload's Pareto front. MeetsBounds: within every
	// bound of the objective, and serving every request unless the
	// objective bounds "rejected" itself.
	OnFront     bool                 `json:"pareto"`
	MeetsBounds bool                 `json:"meets_bounds"`
	Report      replay.Deterministic `json:"report"`
}

// PointRun is how one point ran: its report's run part.
type PointRun struct {
	ID string `json:"id"`
	replay.RunInfo
}

// metrics is the point's figures (a point is one policy).
func (r *PointResult) metrics() *replay.Metrics { return &r.Report.Policies[0] }

// Merge reads the reports of a sweep from one or more folders (the shards
// of one sweep, each with the same plan) into its table. Every point must
// have a report in one of them.
func Merge(dirs ...string) (*Table, error) {
	var plan *Plan
	for _, dir := range dirs {
		p, err := readPlan(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: not a sweep's folder (no %s)", dir, PlanFile)
		}
		if err != nil {
			return nil, err
		}
		if plan != nil && !reflect.DeepEqual(*plan, *p) {
			return nil, fmt.Errorf("%s holds another sweep than %s (their %s differ)", dir, dirs[0], PlanFile)
		}
		plan = p
	}
	if plan == nil {
		return nil, errors.New("merge: name at least one sweep folder")
	}
	t := &Table{SchemaVersion: TableSchemaVersion,
		Deterministic: TableResult{Description: plan.Description, Objective: plan.Objective}}
	where, err := reportFolders(dirs)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, p := range plan.Points {
		dir, ok := where[p.ID]
		if !ok {
			missing = append(missing, p.ID)
			continue
		}
		rep, err := CheckReport(filepath.Join(dir, PointsDir, p.ID+".json"), &p)
		if err != nil {
			return nil, fmt.Errorf("%w: run the sweep again, which replays that point over it", err)
		}
		t.Deterministic.Points = append(t.Deterministic.Points,
			PointResult{Point: p, Policy: rep.Deterministic.Policies[0].Policy, Report: rep.Deterministic})
		t.Run = append(t.Run, PointRun{ID: p.ID, RunInfo: rep.Run})
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%d of %d points have no report yet (%s...): run the shards that hold them, or the sweep again, which resumes",
			len(missing), len(plan.Points), missing[0])
	}
	t.Deterministic.judge()
	return t, nil
}

// reportFolders lists each folder's reports once: the folder that holds a
// point's report (ID.json), the first of dirs that does, by point ID.
func reportFolders(dirs []string) (map[string]string, error) {
	where := map[string]string{}
	for _, dir := range dirs {
		entries, err := os.ReadDir(filepath.Join(dir, PointsDir))
		if errors.Is(err, fs.ErrNotExist) {
			continue // no point has ended there yet
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if id, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() && where[id] == "" {
				where[id] = dir
			}
		}
	}
	return where, nil
}

// CheckReport reads point p's report at path, and returns it only if it
// is p's whole report: a replay report of the current schema, of one
// policy, p's own (when the plan names it), of the trace the plan
// digested. Anything else, a file cut short among them, is an error naming
// the path (fs.ErrNotExist when there is no file).
func CheckReport(path string, p *Point) (*replay.Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep replay.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("%s is not a whole report (%v)", path, err)
	}
	d := &rep.Deterministic
	switch {
	case rep.SchemaVersion != protocol.ReportSchemaVersion || len(d.Policies) != 1:
		return nil, fmt.Errorf("%s is a report of schema %d with %d policies, where a point's is of schema %d with one",
			path, rep.SchemaVersion, len(d.Policies), protocol.ReportSchemaVersion)
	case p.Policy != "" && string(d.Policies[0].Policy) != p.Policy:
		return nil, fmt.Errorf("%s replayed policy %s, where its point runs %s", path, d.Policies[0].Policy, p.Policy)
	case p.Setup != "" && d.SetupDigest() != p.Setup:
		return nil, fmt.Errorf("%s is the report of another setup than its point's (another point's report, or one edited)", path)
	case p.TraceSHA256 != "" && d.Trace.SHA256 != p.TraceSHA256:
		return nil, fmt.Errorf("%s replayed a trace (SHA-256 %.12s...) other than the plan's %s (%.12s...)",
			path, d.Trace.SHA256, p.Workload, p.TraceSHA256)
	case p.TraceSHA256 == "" && d.Trace.Source == "file":
		return nil, fmt.Errorf("%s replayed a trace file, where its point runs the %s workload", path, p.Workload)
	}
	return &rep, nil
}

// judge marks, workload by workload, the Pareto front and the recommended
// point.
func (t *TableResult) judge() {
	t.Workloads = nil
	byWorkload := map[string][]int{}
	for i := range t.Points {
		p := &t.Points[i]
		if _, ok := byWorkload[p.Workload]; !ok {
			t.Workloads = append(t.Workloads, WorkloadResult{Workload: p.Workload, TraceSHA256: p.TraceSHA256, Pareto: []string{}})
		}
		byWorkload[p.Workload] = append(byWorkload[p.Workload], i)
	}
	for w := range t.Workloads {
		t.judgeWorkload(&t.Workloads[w], byWorkload[t.Workloads[w].Workload])
	}
}

func (t *TableResult) judgeWorkload(w *WorkloadResult, idx []int) {
	pts, o := t.Points, &t.Objective
	hit := func(i int) float64 { return pts[i].metrics().PrefixHitRate }
	p99 := func(i int) float64 { return pts[i].metrics().P99TTFTMS }
	var serving []int
	for _, i := range idx {
		if o.servesEnough(pts[i].metrics()) {
			serving = append(serving, i)
		}
	}
	// By rising TTFT p99, then falling hit rate: a point is on the front
	// when no point before it has as high a hit rate, or it equals the one
	// that set the best (then neither beats the other).
	order := slices.Clone(serving)
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(p99(a), p99(b)), cmp.Compare(hit(b), hit(a)))
	})
	best := -1
	var front []int
	for _, i := range order {
		if best < 0 || hit(i) > hit(best) || hit(i) == hit(best) && p99(i) == p99(best) {
			if best < 0 || hit(i) > hit(best) {
				best = i
			}
			pts[i].OnFront = true
			front = append(front, i)
		}
	}
	slices.SortStableFunc(front, func(a, b int) int { return cmp.Or(cmp.Compare(hit(a), hit(b)), cmp.Compare(a, b)) })
	for _, i := range front {
		w.Pareto = append(w.Pareto, pts[i].ID)
	}
	var pick *PointResult
	for _, i := range idx {
		p := &pts[i]
		p.MeetsBounds = o.servesEnough(p.metrics()) && o.keeps(p.metrics())
		if _, ok := Metric(p.metrics(), o.metric()); !ok || !p.MeetsBounds {
			continue
		}
		if pick == nil || o.better(p.metrics(), pick.metrics()) {
			pick = p
		}
	}
	if pick != nil {
		w.Recommended = &pick.ID
	}
}

func (o *Objective) metric() string { return o.Minimize + o.Maximize }

// Names reports whether the objective reads a metric, to pick or to bound.
func (o *Objective) Names(metric string) bool {
	_, bounded := o.SubjectTo[metric]
	return o.metric() == metric || bounded
}

// better reports whether a beats b on the objective (a tie is not).
func (o *Objective) better(a, b *replay.Metrics) bool {
	x, _ := Metric(a, o.metric())
	y, _ := Metric(b, o.metric())
	if o.Minimize != "" {
		return x < y
	}
	return x > y
}

// keeps reports whether m is within every bound; a metric the point does
// not have (request_goodput without --goodput) keeps none.
func (o *Objective) keeps(m *replay.Metrics) bool {
	for name, b := range o.SubjectTo {
		v, ok := Metric(m, name)
		if !ok || b.Min != nil && v < *b.Min || b.Max != nil && v > *b.Max {
			return false
		}
	}
	return true
}

// servesEnough: a point rejects no request, unless the objective bounds
// rejections itself.
func (o *Objective) servesEnough(m *replay.Metrics) bool {
	_, bounded := o.SubjectTo["rejected"]
	return bounded || m.Rejected == 0
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
			bounds = append(bounds, fmt.Sprintf("%s >= %g", name, *b.Min))
		}
		if b.Max != nil {
			bounds = append(bounds, fmt.Sprintf("%s <= %g", name, *b.Max))
		}
	}
	if _, ok := o.SubjectTo["rejected"]; !ok {
		bounds = append(bounds, "no request rejected")
	}
	return s + " with " + strings.Join(bounds, " and ")
}

// Metric is the metric of m named by its JSON key (one of MetricNames),
// and whether m has it (request_goodput is null without --goodput).
func Metric(m *replay.Metrics, name string) (float64, bool) {
	i, ok := metricField[name]
	if !ok {
		panic("no metric " + name) // the spec's check names only MetricNames
	}
	switch f := reflect.ValueOf(m).Elem().Field(i); f.Kind() {
	case reflect.Int:
		return float64(f.Int()), true
	case reflect.Uint64:
		return float64(f.Uint()), true
	case reflect.Float64:
		return f.Float(), true
	default: // a *float64, MetricNames holds no other kind
		if f.IsNil() {
			return 0, false
		}
		return f.Elem().Float(), true
	}
}

// WriteTable prints the table: a row per point in spec order, the front
// marked, then per workload the recommendation and how to rerun it.
// specDir is the spec's folder, which trace paths in the spec are relative
// to; "" when not known (a merge), and the rerun line then says so.
func WriteTable(w io.Writer, t *Table, specDir string) error {
	r := &t.Deterministic
	recommended := map[string]bool{}
	for _, wl := range r.Workloads {
		if wl.Recommended != nil {
			recommended[*wl.Recommended] = true
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "point\t"
	if len(r.Workloads) > 1 {
		head += "workload\t"
	}
	fmt.Fprintln(tw, head+"settings\thit rate\tTTFT p50 (ms)\tTTFT p99 (ms)\tshare CV\trejected\t")
	for _, p := range r.Points {
		m := p.metrics()
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
		settings := strings.Join(p.Varied, " ")
		if settings == "" {
			settings = "(the spec's flags)"
		}
		fmt.Fprintf(tw, "%s%s\t%.3f\t%.1f\t%.1f\t%.3f\t%d\t%s\n", row, settings, m.PrefixHitRate, m.MedianTTFTMS, m.P99TTFTMS, m.WorkerShareCV, m.Rejected, mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n* on the Pareto front of hit rate (higher) against TTFT p99 (lower), among points that rejected nothing")
	for _, wl := range r.Workloads {
		on := ""
		if len(r.Workloads) > 1 {
			on = " on " + wl.Workload
		}
		if wl.Recommended == nil {
			fmt.Fprintf(w, "no point%s meets the objective: %s\n", on, r.Objective.String())
			continue
		}
		p := &r.Points[slices.IndexFunc(r.Points, func(p PointResult) bool { return p.ID == *wl.Recommended })]
		v, _ := Metric(p.metrics(), r.Objective.metric())
		fmt.Fprintf(w, "recommended%s for %s: %s, %s = %.4g\n", on, r.Objective.String(), p.ID, r.Objective.metric(), v)
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
		fmt.Fprintf(w, "rerun it%s: offline-router replay %s\n", note, strings.Join(quoted, " "))
	}
	return nil
}
