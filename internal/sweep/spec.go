// Package sweep runs a grid of replays and says which point to deploy: a
// spec names workloads, replay flags every point takes, and a grid of flag
// values; each point is one replay (its own report), and the points'
// reports merge into one table with the Pareto front of prefix hit rate
// against TTFT p99 and the point an objective recommends. A point is a
// replay command line, so any replay flag can be swept and any point can be
// rerun by hand. Running a point is the caller's (the CLI's replay); this
// package expands, shards, pools, resumes and merges.
package sweep

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/offline-router/offline-router/internal/replay"
)

// Builtin names the built-in workload in a spec's workloads.
const Builtin = "builtin"

// MaxPoints bounds a spec's grid: a sweep past it is a typo's product.
const MaxPoints = 100000

// Spec is a sweep as its file gives it.
type Spec struct {
	// Description says what the sweep asks; it heads the table and figure.
	Description string `json:"description"`
	// Workloads are trace files (relative to the spec's folder) or
	// "builtin"; every grid point runs on each.
	Workloads []string `json:"workloads"`
	// Flags are replay flags every point takes, name (without "--") to value.
	Flags Object `json:"flags"`
	// Grid is a list of blocks; each maps flag names to lists of values, and
	// gives the points of every combination of them (the last flag varying
	// fastest), with Flags beneath.
	Grid []Object `json:"grid"`
	// Objective picks the recommended point.
	Objective Objective `json:"objective"`
	// Scenario names grid flags whose values, with the workload, make a
	// scenario (the engine, the cluster's size, its cache, the load): each
	// scenario is judged apart, with its own recommendation, front and
	// figure row, and the table counts what each contender wins.
	Scenario []string `json:"scenario"`

	dir string // the spec file's folder, which workloads are relative to
}

// Objective is what the recommended point is best at, and the bounds it
// must keep: the lowest (or highest) metric among the points within every
// bound, the first in spec order on a tie.
type Objective struct {
	Comment   string           `json:"comment,omitempty"` // why this objective, for the reader
	Minimize  string           `json:"minimize,omitempty"`
	Maximize  string           `json:"maximize,omitempty"`
	SubjectTo map[string]Bound `json:"subject_to,omitempty"`
	// Baseline is the point the others are measured against on each
	// workload, by its grid settings as the table prints them
	// ("--policy=round_robin", the default, when the grid has it).
	Baseline string `json:"baseline,omitempty"`
}

// Bound limits a metric: min and max are inclusive, either may be absent.
// With repeats a bound is kept only by the whole 95% interval: a max by its
// upper end, a min by its lower.
type Bound struct {
	Min *Limit `json:"min,omitempty"`
	Max *Limit `json:"max,omitempty"`
}

// Limit is a bound's value: a number, or a multiple of the baseline
// point's value, written "0.6x baseline".
type Limit struct {
	Value      float64
	OfBaseline bool
}

// UnmarshalJSON reads a number or "Fx baseline".
func (l *Limit) UnmarshalJSON(data []byte) error {
	var text string
	if err := json.Unmarshal(data, &text); err != nil {
		l.OfBaseline = false
		if err := json.Unmarshal(data, &l.Value); err != nil {
			return errors.New(`expected a number, or a multiple of the baseline as "0.6x baseline"`)
		}
		return nil
	}
	factor, ok := strings.CutSuffix(strings.TrimSpace(text), "x baseline")
	f, err := strconv.ParseFloat(strings.TrimSpace(factor), 64)
	if !ok || err != nil || !(f > 0) || f > 1e6 {
		return fmt.Errorf("%q: expected a number, or a multiple of the baseline as \"0.6x baseline\"", text)
	}
	*l = Limit{Value: f, OfBaseline: true}
	return nil
}

// MarshalJSON writes the limit as it was written.
func (l Limit) MarshalJSON() ([]byte, error) {
	if l.OfBaseline {
		return json.Marshal(l.String())
	}
	return json.Marshal(l.Value)
}

func (l Limit) String() string {
	if l.OfBaseline {
		return fmt.Sprintf("%gx baseline", l.Value)
	}
	return fmt.Sprintf("%g", l.Value)
}

// Point is one replay of a sweep.
type Point struct {
	// ID names the point's report (points/ID.json): a digest of its
	// workload and flags, so a report is found again only by the same
	// point, whatever else the spec gained or lost.
	ID string `json:"id"`
	// Workload is the trace's path as the spec gives it, or "builtin".
	Workload string `json:"workload"`
	// TraceSHA256 is the trace file's digest when the plan was made; ""
	// for builtin.
	TraceSHA256 string `json:"trace_sha256,omitempty"`
	// Flags are the replay flags, --name=value, the spec's flags then the
	// grid's.
	Flags []string `json:"flags"`
	// Varied are the grid's flags alone, for tables and labels.
	Varied []string `json:"varied"`
	// Policy is the policy the point's flags give, as replay reads them
	// (the caller's to fill: this package does not parse replay's flags).
	// A report of another policy is not the point's.
	Policy string `json:"policy,omitempty"`
	// Setup is the SHA-256 of the setup the point's flags give
	// (replay.Deterministic.SetupDigest; the caller's to fill, as Policy):
	// a report of another setup, another point's copied here, is not the
	// point's.
	Setup string `json:"setup_sha256,omitempty"`

	trace string // the trace's path as this machine opens it; "" for builtin
}

// Args is the point's replay command line after "replay".
func (p *Point) Args() []string {
	if p.trace == "" {
		return slices.Clone(p.Flags)
	}
	return append([]string{p.trace}, p.Flags...)
}

// Load reads a spec file. Unknown keys are refused, naming them.
func Load(path string) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	spec, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	spec.dir = filepath.Dir(path)
	return spec, nil
}

// Parse reads a spec from its JSON. A key given twice, at any depth, is
// refused: encoding/json would keep the last silently. So is a spec nested
// deeper than MaxDepth, before encoding/json reads it (which would go to
// 10,000 levels).
func Parse(data []byte) (*Spec, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("the spec is empty: an object with workloads, flags, grid and objective (docs/sweep.md)")
	}
	if err := checkText(data); err != nil {
		return nil, err
	}
	if err := noRepeatedKeys(data, MaxDepth); err != nil {
		return nil, err
	}
	var s Spec
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("something follows the spec's object")
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return &s, nil
}

// reserved are the replay flags a sweep sets itself, or that would make a
// point more than one replay.
var reserved = map[string]string{
	"report": "the sweep writes each point's report", "plot": "the sweep draws its own figure",
	"emit-commands": "a sweep emits no streams", "emit-responses": "a sweep emits no streams",
	"quiet": "the sweep shows its own progress", "q": "the sweep shows its own progress",
	"compare": "a point is one contender: put the policies in a grid block", "policies": "a point is one contender: put the policies (or contenders) in a grid block",
	"cpuprofile": "a sweep profiles nothing",
	"jobs":       "the sweep's --jobs runs points at once (each point runs its repeats in turn)",
	"baseline":   `a point is one contender: the objective's "baseline" names the baseline point`, "config": "give the config's keys as flags",
	"help": "a point runs, it does not explain itself", "h": "a point runs, it does not explain itself",
	"version":            "a point runs, it does not print a version",
	"benchmark-duration": "points compare pair by pair over the same requests, and a recycled replay's contenders each run the plays they get through",
}

// notInGrid are the flags a grid may not vary: points compare pair by
// pair only at the same seeds and repeats.
var notInGrid = map[string]string{
	"seed":    `a grid of seeds makes the sweep recommend a seed: give "repeats" in "flags" (and "seed" there, for other seeds)`,
	"repeats": `points compare pair by pair only over the same repeats: give "repeats" in "flags"`,
}

func (s *Spec) check() error {
	if len(s.Workloads) == 0 {
		return errors.New(`"workloads": name at least one trace file, or "builtin"`)
	}
	given := map[string]bool{}
	for i, w := range s.Workloads {
		if w == "" {
			return fmt.Errorf(`"workloads"[%d]: empty; a trace file's path, or "builtin"`, i)
		}
		if given[w] {
			return fmt.Errorf(`"workloads"[%d]: %q is given twice`, i, w)
		}
		given[w] = true
	}
	for _, o := range append([]Object{s.Flags}, s.Grid...) {
		for _, kv := range o {
			if why, ok := reserved[kv.Name]; ok {
				return fmt.Errorf("flag %q: %s", kv.Name, why)
			}
			if strings.HasPrefix(kv.Name, "-") || kv.Name == "" {
				return fmt.Errorf("flag %q: name flags without their dashes", kv.Name)
			}
		}
	}
	for _, kv := range s.Flags {
		if len(kv.Values) != 1 {
			return fmt.Errorf(`"flags".%s: one value (a list of values belongs in "grid")`, kv.Name)
		}
	}
	for i, block := range s.Grid {
		for _, kv := range block {
			if why, ok := notInGrid[kv.Name]; ok {
				return fmt.Errorf(`"grid"[%d].%s: %s`, i, kv.Name, why)
			}
			if len(kv.Values) == 0 {
				return fmt.Errorf(`"grid"[%d].%s: no values`, i, kv.Name)
			}
			if s.Flags.has(kv.Name) {
				return fmt.Errorf(`"grid"[%d].%s: also in "flags"; give it in one place`, i, kv.Name)
			}
		}
	}
	if err := s.checkScenario(); err != nil {
		return err
	}
	return s.Objective.check()
}

// checkScenario: each scenario flag is named once, without its dashes,
// and varied by a grid block (a flag no block varies makes no scenario).
func (s *Spec) checkScenario() error {
	for i, name := range s.Scenario {
		switch {
		case name == "" || strings.HasPrefix(name, "-"):
			return fmt.Errorf(`"scenario"[%d]: %q: name a grid flag without its dashes ("workers", "arrival-speedup-ratio")`, i, name)
		case slices.Contains(s.Scenario[:i], name):
			return fmt.Errorf(`"scenario"[%d]: %s is given twice`, i, name)
		case !slices.ContainsFunc(s.Grid, func(b Object) bool { return b.has(name) }):
			return fmt.Errorf(`"scenario"[%d]: no grid block varies %s: a scenario flag takes its values from the grid`, i, name)
		}
	}
	return nil
}

func (o *Objective) check() error {
	if (o.Minimize == "") == (o.Maximize == "") {
		return errors.New(`"objective": give one of "minimize" and "maximize", naming a metric`)
	}
	names := []string{o.Minimize + o.Maximize}
	for name, b := range o.SubjectTo {
		names = append(names, name)
		if b.Min == nil && b.Max == nil {
			return fmt.Errorf(`"objective"."subject_to".%s: give "min", "max" or both`, name)
		}
		if b.Min != nil && b.Max != nil && b.Min.OfBaseline == b.Max.OfBaseline && b.Min.Value > b.Max.Value {
			return fmt.Errorf(`"objective"."subject_to".%s: min %v is above max %v: no point could keep it`, name, *b.Min, *b.Max)
		}
	}
	for _, name := range names {
		if !slices.Contains(MetricNames, name) {
			return fmt.Errorf("objective: %q is not a metric of the report; one of %s", name, strings.Join(MetricNames, ", "))
		}
	}
	return nil
}

// Points expands the spec: each workload, then each grid block in order,
// each block's combinations with its last flag varying fastest. A spec
// without a grid is one point per workload.
func (s *Spec) Points() ([]Point, error) {
	base := s.Flags.flags()
	blocks := s.Grid
	if len(blocks) == 0 {
		blocks = []Object{nil}
	}
	// Counted before any is made: a typo's grid is refused, not built.
	total := 0
	for _, b := range blocks {
		n := 1
		for _, kv := range b {
			n *= len(kv.Values)
			if n > MaxPoints {
				return nil, fmt.Errorf("the grid makes more than %d points", MaxPoints)
			}
		}
		if total += n * len(s.Workloads); total > MaxPoints {
			return nil, fmt.Errorf("the sweep makes more than %d points", MaxPoints)
		}
	}
	var combos [][]string
	for _, b := range blocks {
		n := 1
		for _, kv := range b {
			n *= len(kv.Values)
		}
		for i := range n {
			var varied []string
			for j, rest := len(b)-1, i; j >= 0; j-- {
				kv := b[j]
				varied = append(varied, "--"+kv.Name+"="+kv.Values[rest%len(kv.Values)])
				rest /= len(kv.Values)
			}
			slices.Reverse(varied)
			combos = append(combos, varied)
		}
	}
	var points []Point
	seen := map[string]int{}
	for _, w := range s.Workloads {
		trace, sum := "", ""
		if w != Builtin {
			trace = w
			if !filepath.IsAbs(w) {
				trace = filepath.Join(s.dir, w)
			}
			var err error
			if sum, err = fileSHA256(trace); err != nil {
				return nil, fmt.Errorf("workload %s: %w", w, err)
			}
		}
		for _, varied := range combos {
			flags := append(slices.Clone(base), varied...)
			p := Point{ID: pointID(w, sum, flags), Workload: w, TraceSHA256: sum, Flags: flags, Varied: varied, trace: trace}
			if j, ok := seen[p.ID]; ok {
				return nil, fmt.Errorf("grid blocks repeat a point: %s on %s (point %d and %d)", strings.Join(varied, " "), w, j+1, len(points)+1)
			}
			seen[p.ID] = len(points)
			points = append(points, p)
		}
	}
	return points, s.checkBaseline(points)
}

// pointID digests what a point replays: the workload's name and content
// (a trace edited in place gives new points, not the old reports) and the
// flags.
func pointID(workload, traceSHA string, flags []string) string {
	sum := sha256.Sum256([]byte(workload + "\x00" + traceSHA + "\x00" + strings.Join(flags, "\x00")))
	return hex.EncodeToString(sum[:6])
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// MetricNames are the report's numeric metrics, by their JSON names, that
// an objective may name (request_goodput among them: present only when the
// points run with --goodput); metricField is each one's field of
// replay.Metrics, found once rather than by a walk of its tags per lookup.
var MetricNames, metricField = func() ([]string, map[string]int) {
	var names []string
	field := map[string]int{}
	t := reflect.TypeFor[replay.Metrics]()
	for i := range t.NumField() {
		f := t.Field(i)
		switch k := f.Type.Kind(); {
		case k == reflect.Int, k == reflect.Uint64, k == reflect.Float64,
			k == reflect.Pointer && f.Type.Elem().Kind() == reflect.Float64:
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			names, field[name] = append(names, name), i
		}
	}
	return append(names, SustainableRate), field
}()

// SustainableRate names a point's capacity at SLO (replay --capacity: the
// "capacity" flag), an objective's metric beside the report's own.
const SustainableRate = "sustainable_rate"

// checkBaseline refuses a baseline the objective names that some workload
// has no point of, and a bound on the baseline with no baseline point.
func (s *Spec) checkBaseline(points []Point) error {
	o := &s.Objective
	relative := ""
	for _, name := range slices.Sorted(maps.Keys(o.SubjectTo)) {
		if b := o.SubjectTo[name]; b.Min != nil && b.Min.OfBaseline || b.Max != nil && b.Max.OfBaseline {
			relative = name
		}
	}
	if o.Baseline == "" && relative == "" {
		return nil
	}
	baseline := cmp.Or(o.Baseline, DefaultBaseline)
	scenarios := &TableResult{Scenario: s.Scenario}
	group := func(p *Point) string { return p.Workload + "\x00" + strings.Join(scenarios.scenarioOf(p), "\x00") }
	has := map[string]bool{}
	for i := range points {
		if contenderOf(&points[i], s.Scenario) == baseline {
			has[group(&points[i])] = true
		}
	}
	for i := range points {
		p := &points[i]
		if has[group(p)] {
			continue
		}
		w := p.Workload
		if scenario := scenarios.scenarioOf(p); len(scenario) > 0 {
			w += " with " + strings.Join(scenario, " ")
		}
		if o.Baseline == "" {
			return fmt.Errorf(`"objective"."subject_to".%s is bounded against the baseline, and workload %s has no point %s (the default): add it to the grid, or name another in "objective"."baseline"`, relative, w, baseline)
		}
		return fmt.Errorf(`"objective"."baseline" %q: workload %s has no point of these settings (the table's settings column without the scenario's flags, e.g. --policy=round_robin)`, baseline, w)
	}
	return nil
}
