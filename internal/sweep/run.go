package sweep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/offline-router/offline-router/internal/outfile"
)

// Shard is a share of a sweep's points: the I-th of N (1-based, as Slurm's
// array indices run). Point k (0-based, in spec order) belongs to shard
// k mod N + 1: stable for a given spec, and the shards differ in size by
// one point at most.
type Shard struct{ I, N int }

// All is the whole sweep as one shard.
var All = Shard{1, 1}

// ParseShard reads "I/N".
func ParseShard(s string) (Shard, error) {
	i, n, ok := strings.Cut(s, "/")
	si, err1 := strconv.Atoi(i)
	sn, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || sn < 1 || si < 1 || si > sn {
		return Shard{}, fmt.Errorf("--shard %q: expected I/N with 1 <= I <= N, e.g. 2/8", s)
	}
	return Shard{si, sn}, nil
}

// Of is the points of the shard.
func (s Shard) Of(points []Point) []Point {
	var out []Point
	for k := s.I - 1; k < len(points); k += s.N {
		out = append(out, points[k])
	}
	return out
}

// Layout of a sweep's folder.
const (
	PlanFile   = "plan.json"  // the points, in spec order, with the description and objective
	PointsDir  = "points"     // one replay report per point, ID.json
	TableFile  = "sweep.json" // the merged table
	FigureFile = "sweep.png"  // its figure
)

// PlanSchemaVersion is the version of plan.json's layout: a folder's plan
// is recognised by it, so that any other JSON object (a table, a report
// written over the plan by mistake) is not taken for one.
const PlanSchemaVersion = 1

// Plan is what a sweep's folder says it runs: enough to merge its reports
// without the spec or its traces.
type Plan struct {
	SchemaVersion int       `json:"schema_version"`
	Description   string    `json:"description"`
	Objective     Objective `json:"objective"`
	Scenario      []string  `json:"scenario,omitempty"` // the flags whose values make a scenario
	Points        []Point   `json:"points"`
}

// RunPoint runs one point's replay, writing its report to the path given
// whole or not at all. When ctx ends it returns early, writing nothing.
type RunPoint func(ctx context.Context, p *Point, report string) error

// Progress hears of each point of the shard as it ends (or is found done).
type Progress func(done, total int, p *Point, wall time.Duration, resumed bool)

// Options says where and how a sweep runs.
type Options struct {
	Out      string
	Jobs     int // points at once; at least 1
	Shard    Shard
	Progress Progress // may be nil
	// Redo, if set, hears of a point whose file is not its whole report
	// (cut short, another point's, an older schema), and which is
	// replayed again.
	Redo func(path string, why error)
}

// Run runs the shard's points that have no report yet in opt.Out, at most
// opt.Jobs at once, and returns how many ran and how many were found done.
// A point is done when its file is its own whole report (CheckReport); a
// report appears only once complete, so an interrupted sweep resumes
// where it stopped. The first point that fails stops the others from
// starting; its error names it. When ctx ends (the process is told to
// stop), the points under way stop too, writing nothing, and Run returns
// ctx's error.
func Run(ctx context.Context, plan *Plan, opt Options, run RunPoint) (ran, resumed int, err error) {
	if err := Prepare(opt.Out, plan); err != nil {
		return 0, 0, err
	}
	dir := filepath.Join(opt.Out, PointsDir)
	mine := opt.Shard.Of(plan.Points)
	var mu sync.Mutex // guards the counts
	done := 0
	report := func(p *Point, wall time.Duration, found bool) {
		mu.Lock()
		defer mu.Unlock()
		done++
		if found {
			resumed++
		} else {
			ran++
		}
		if opt.Progress != nil {
			opt.Progress(done, len(mine), p, wall, found)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(opt.Jobs, 1))
	for i := range mine {
		if gctx.Err() != nil {
			break // stopped, or a point failed: nothing more starts or is counted
		}
		p := &mine[i]
		path := filepath.Join(dir, p.ID+".json")
		switch _, err := CheckReport(path, p); {
		case err == nil:
			report(p, 0, true)
			continue
		case !errors.Is(err, fs.ErrNotExist) && opt.Redo != nil:
			opt.Redo(path, err)
		}
		g.Go(func() error {
			if gctx.Err() != nil {
				return nil
			}
			start := time.Now()
			if err := run(gctx, p, path); err != nil {
				if gctx.Err() != nil {
					return nil // stopped by ctx or by another point's failure, which is the one reported
				}
				return &PointError{Point: *p, Err: err}
			}
			report(p, time.Since(start), false)
			return nil
		})
	}
	err = g.Wait()
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	return ran, resumed, err
}

// PointError is a point whose replay failed.
type PointError struct {
	Point Point
	Err   error
}

func (e *PointError) Error() string {
	return fmt.Sprintf("point %s (%s on %s): %v", e.Point.ID, strings.Join(e.Point.Varied, " "), e.Point.Workload, e.Err)
}

func (e *PointError) Unwrap() error { return e.Err }

// Prepare makes the sweep's folder and records the plan there. A folder
// holds one sweep: its points may not change (two sweeps sharing a folder
// would mix their reports in one table), but its description and objective
// may, and the plan is then rewritten.
func Prepare(out string, plan *Plan) error {
	plan.SchemaVersion = PlanSchemaVersion
	// The plan is read first: a folder refused is left as it was.
	old, err := readPlan(out)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case !samePoints(old.Points, plan.Points):
		return fmt.Errorf("%s holds another sweep (its %s lists other points, or a trace changed since): give another --out, or remove it",
			out, PlanFile)
	}
	if err := os.MkdirAll(filepath.Join(out, PointsDir), 0o755); err != nil {
		return err
	}
	if old != nil && old.Description == plan.Description && reflect.DeepEqual(old.Objective, plan.Objective) && slices.Equal(old.Scenario, plan.Scenario) {
		return nil // the same points, above
	}
	data, err := json.MarshalIndent(plan, "", "  ")
	if err != nil {
		return err
	}
	return outfile.Write(filepath.Join(out, PlanFile), append(data, '\n'))
}

// readPlan reads a sweep folder's plan, strictly: a file that is not a
// plan of this layout is refused, naming it.
func readPlan(dir string) (*Plan, error) {
	path := filepath.Join(dir, PlanFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p Plan
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return nil, fmt.Errorf("%s is not a sweep's plan (%v): was it written over? Remove the folder and run the sweep again", path, err)
	}
	if p.SchemaVersion != PlanSchemaVersion || len(p.Points) == 0 {
		return nil, fmt.Errorf("%s is not a sweep's plan of schema %d (it gives schema %d and %d points): run the sweep again into a new --out",
			path, PlanSchemaVersion, p.SchemaVersion, len(p.Points))
	}
	return &p, nil
}

// samePoints compares points as a plan records them.
func samePoints(a, b []Point) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
