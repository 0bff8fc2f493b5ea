package sweep

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
)

// TableSchemaVersion is the version of the merged table's layout.
const TableSchemaVersion = 2

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
	Description string    `json:"description"`
	Objective   Objective `json:"objective"`
	// Scenario names the flags whose values, with the workload, make a
	// scenario: each is judged apart, and Summary counts, per contender
	// (a point's settings but the scenario's), the scenarios it wins.
	Scenario  []string         `json:"scenario"`
	Front     Front            `json:"front"`
	Workloads []WorkloadResult `json:"workloads"`
	Summary   []Tally          `json:"summary"`
	Points    []PointResult    `json:"points"`
}

// WorkloadResult judges the points of one workload. Only points that
// served every request (or keep the objective's own bound on "rejected")
// take part: a point that turned requests away shows the latency of those
// it kept.
type WorkloadResult struct {
	Workload    string `json:"workload"`
	TraceSHA256 string `json:"trace_sha256,omitempty"`
	// Scenario is the scenario flags' values of these points, --flag=value
	// in the spec's order (none without scenario flags).
	Scenario []string `json:"scenario"`
	// Recommended is the ID of the point the objective picks; null when no
	// point keeps the objective's bounds.
	Recommended *string `json:"recommended"`
	// Pareto lists the IDs of the points no other beats on both of the
	// front's metrics (TableResult.Front), best on the objective first.
	Pareto []string `json:"pareto"`
	// Baseline is the ID of the point the others are measured against
	// (the objective's baseline settings); null when the workload has none.
	Baseline *string `json:"baseline"`
	// Test says how the recommendation stands against the runner-up on
	// the objective's metric: distinct (the paired 95% interval of their
	// per-repeat difference holds no 0), tie (it does: no point is
	// recommended and Tied names the points that tie with the best),
	// one_repeat (not tested: one repeat gives no interval), alone (no
	// runner-up) or none (no point keeps the bounds).
	Test string `json:"test"`
	// RunnerUp and Margin: the second best point and the best's mean
	// difference to it over the repeats, with its 95% interval.
	RunnerUp *string          `json:"runner_up"`
	Margin   *replay.Estimate `json:"margin"`
	Tied     []string         `json:"tied"`
	// Edges warn of a recommended knob at its grid's edge, where the best
	// may lie beyond: the knob and the side.
	Edges []string `json:"edges"`
	// Headroom is how far any router could take the hit rate on the
	// scenario's requests: the infinite-cache bound, and one LRU cache of
	// the cluster's capacity (the first point's, where the points differ
	// in cluster size).
	Headroom *replay.Headroom `json:"headroom"`
}

// Front names the two metrics of the Pareto front and the figure: the
// objective's, and the first it bounds (by name; prefix_hit_rate when it
// bounds none), each with its good direction.
type Front struct {
	X      string `json:"x"`
	XLower bool   `json:"x_lower_is_better"`
	Y      string `json:"y"`
	YLower bool   `json:"y_lower_is_better"`
}

// PointResult is one point and its replay's deterministic report.
type PointResult struct {
	Point
	Policy string `json:"policy"`
	// OnFront: on its workload's Pareto front. MeetsBounds: within every
	// bound of the objective, and serving every request unless the
	// objective bounds "rejected" itself.
	OnFront     bool `json:"pareto"`
	MeetsBounds bool `json:"meets_bounds"`
	// Objective is the point's value of the objective's metric (the mean
	// over its repeats) with its 95% interval (none with one repeat), and
	// VsBaseline its ratio to the baseline point's (null without one).
	Objective  replay.Estimate      `json:"objective"`
	VsBaseline *float64             `json:"objective_vs_baseline"`
	Report     replay.Deterministic `json:"report"`
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
		Deterministic: TableResult{Description: plan.Description, Objective: plan.Objective, Scenario: plan.Scenario}}
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
	t.Front = t.Objective.front()
	if t.Scenario == nil {
		t.Scenario = []string{}
	}
	byScenario := map[string][]int{}
	var keys []string
	for i := range t.Points {
		p := &t.Points[i]
		scenario := t.scenarioOf(&p.Point)
		key := scenarioKey(p.Workload, scenario)
		if _, ok := byScenario[key]; !ok {
			keys = append(keys, key)
			t.Workloads = append(t.Workloads, WorkloadResult{Workload: p.Workload, TraceSHA256: p.TraceSHA256, Scenario: scenario,
				Pareto: []string{}, Tied: []string{}, Edges: []string{}})
		}
		byScenario[key] = append(byScenario[key], i)
	}
	tried := t.triedValues()
	for w, key := range keys {
		t.judgeWorkload(&t.Workloads[w], byScenario[key], tried)
		t.Workloads[w].Headroom = t.Points[byScenario[key][0]].Report.Headroom
	}
	t.tally()
}

func (o *Objective) metric() string { return o.Minimize + o.Maximize }

// Names reports whether the objective reads a metric, to pick or to bound.
func (o *Objective) Names(metric string) bool {
	_, bounded := o.SubjectTo[metric]
	return o.metric() == metric || bounded
}

// servesEnough: a point rejects no request at any repeat, unless the
// objective bounds rejections itself.
func (o *Objective) servesEnough(p *PointResult) bool {
	_, bounded := o.SubjectTo["rejected"]
	rejected, _ := p.value("rejected")
	return bounded || rejected.mean == 0
}

// Metric is the metric of m named by its JSON key (one of MetricNames),
// and whether m has it (request_goodput is null without --goodput).
func Metric(m *replay.Metrics, name string) (float64, bool) {
	if name == SustainableRate {
		return 0, false // the report's capacity part's, not a metric's (PointResult.value)
	}
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
