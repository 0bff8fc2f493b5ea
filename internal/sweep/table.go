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

// TableResult is every point's outcome, the Pareto front of prefix hit rate
// (higher is better) against TTFT p99 (lower is better), and the point the
// objective recommends.
type TableResult struct {
	Description string    `json:"description"`
	Objective   Objective `json:"objective"`
	// Recommended is the ID of the point the objective picks; null when no
	// point keeps the objective's bounds.
	Recommended *string `json:"recommended"`
	// Pareto lists the IDs of the points no other beats on both hit rate
	// and TTFT p99, by rising hit rate.
	Pareto []string      `json:"pareto"`
	Points []PointResult `json:"points"`
}

// PointResult is one point and its replay's deterministic report.
type PointResult struct {
	Point
	Policy      string               `json:"policy"`
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
		var p Plan
		data, err := os.ReadFile(filepath.Join(dir, PlanFile))
		if err != nil {
			return nil, fmt.Errorf("%s: not a sweep's folder: %w", dir, err)
		}
		if err := json.Unmarshal(data, &p); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, PlanFile), err)
		}
		if plan != nil && !reflect.DeepEqual(*plan, p) {
			return nil, fmt.Errorf("%s holds another sweep than %s (their %s differ)", dir, dirs[0], PlanFile)
		}
		plan = &p
	}
	if plan == nil {
		return nil, errors.New("merge: name at least one sweep folder")
	}
	t := &Table{SchemaVersion: TableSchemaVersion,
		Deterministic: TableResult{Description: plan.Description, Objective: plan.Objective, Pareto: []string{}}}
	var missing []string
	for _, p := range plan.Points {
		rep, err := findReport(dirs, p.ID)
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, p.ID)
			continue
		}
		if err != nil {
			return nil, err
		}
		if rep.SchemaVersion != protocol.ReportSchemaVersion || len(rep.Deterministic.Policies) != 1 {
			return nil, fmt.Errorf("point %s: its report is not one policy's, schema %d", p.ID, protocol.ReportSchemaVersion)
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

func findReport(dirs []string, id string) (*replay.Report, error) {
	for _, dir := range dirs {
		path := filepath.Join(dir, PointsDir, id+".json")
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var rep replay.Report
		if err := json.Unmarshal(data, &rep); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return &rep, nil
	}
	return nil, fs.ErrNotExist
}

// judge marks the Pareto front and the recommended point.
func (t *TableResult) judge() {
	pts := t.Points
	order := make([]int, len(pts))
	for i := range order {
		order[i] = i
	}
	hit := func(i int) float64 { return pts[i].metrics().PrefixHitRate }
	p99 := func(i int) float64 { return pts[i].metrics().P99TTFTMS }
	// By rising TTFT p99, then falling hit rate: a point is on the front
	// when no point before it has as high a hit rate, or it equals the one
	// that set the best (then neither beats the other).
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(p99(a), p99(b)), cmp.Compare(hit(b), hit(a)))
	})
	best := -1
	for _, i := range order {
		if best < 0 || hit(i) > hit(best) || hit(i) == hit(best) && p99(i) == p99(best) {
			if best < 0 || hit(i) > hit(best) {
				best = i
			}
			pts[i].OnFront = true
		}
	}
	front := slices.DeleteFunc(order, func(i int) bool { return !pts[i].OnFront })
	slices.SortStableFunc(front, func(a, b int) int { return cmp.Or(cmp.Compare(hit(a), hit(b)), cmp.Compare(a, b)) })
	for _, i := range front {
		t.Pareto = append(t.Pareto, pts[i].ID)
	}
	o := &t.Objective
	var pick *PointResult
	for i := range pts {
		p := &pts[i]
		p.MeetsBounds = o.keeps(p.metrics())
		if !p.MeetsBounds {
			continue
		}
		if pick == nil || o.better(p.metrics(), pick.metrics()) {
			pick = p
		}
	}
	if pick != nil {
		t.Recommended = &pick.ID
	}
}

func (o *Objective) metric() string { return o.Minimize + o.Maximize }

// better reports whether a beats b on the objective (a tie is not).
func (o *Objective) better(a, b *replay.Metrics) bool {
	x, y := Metric(a, o.metric()), Metric(b, o.metric())
	if o.Minimize != "" {
		return x < y
	}
	return x > y
}

// keeps reports whether m is within every bound.
func (o *Objective) keeps(m *replay.Metrics) bool {
	for name, b := range o.SubjectTo {
		v := Metric(m, name)
		if b.Min != nil && v < *b.Min || b.Max != nil && v > *b.Max {
			return false
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
			bounds = append(bounds, fmt.Sprintf("%s >= %g", name, *b.Min))
		}
		if b.Max != nil {
			bounds = append(bounds, fmt.Sprintf("%s <= %g", name, *b.Max))
		}
	}
	if len(bounds) > 0 {
		s += " with " + strings.Join(bounds, " and ")
	}
	return s
}

// Metric is the metric of m named by its JSON key (one of MetricNames).
func Metric(m *replay.Metrics, name string) float64 {
	v := reflect.ValueOf(m).Elem()
	t := v.Type()
	for i := range t.NumField() {
		if strings.Split(t.Field(i).Tag.Get("json"), ",")[0] == name {
			switch f := v.Field(i); f.Kind() {
			case reflect.Int:
				return float64(f.Int())
			case reflect.Uint64:
				return float64(f.Uint())
			case reflect.Float64:
				return f.Float()
			}
		}
	}
	panic("no metric " + name) // the spec's check names only MetricNames
}

// WriteTable prints the table: a row per point in spec order, the front
// marked, then the recommendation and how to rerun it. specDir is the spec's
// folder, which trace paths in the spec are relative to; "" when not known
// (a merge), and the rerun line then says so.
func WriteTable(w io.Writer, t *Table, specDir string) error {
	r := &t.Deterministic
	workloads := map[string]bool{}
	for _, p := range r.Points {
		workloads[p.Workload] = true
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "point\t"
	if len(workloads) > 1 {
		head += "workload\t"
	}
	fmt.Fprintln(tw, head+"settings\thit rate\tTTFT p50 (ms)\tTTFT p99 (ms)\tshare CV\trejected\t")
	for _, p := range r.Points {
		m := p.metrics()
		mark := ""
		if p.OnFront {
			mark = " *"
		}
		if r.Recommended != nil && *r.Recommended == p.ID {
			mark += " <- recommended"
		}
		row := p.ID + "\t"
		if len(workloads) > 1 {
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
	fmt.Fprintf(w, "\n* on the Pareto front of hit rate (higher) against TTFT p99 (lower): %d of %d points\n", len(r.Pareto), len(r.Points))
	if r.Recommended == nil {
		_, err := fmt.Fprintf(w, "no point meets the objective's bounds (%s)\n", r.Objective.String())
		return err
	}
	i := slices.IndexFunc(r.Points, func(p PointResult) bool { return p.ID == *r.Recommended })
	p := &r.Points[i]
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
	_, err := fmt.Fprintf(w, "recommended for %s: %s, %s = %.4g\nrerun it%s: offline-router replay %s\n",
		r.Objective.String(), p.ID, r.Objective.metric(), Metric(p.metrics(), r.Objective.metric()), note, strings.Join(args, " "))
	return err
}
