package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
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

// Plan is what a sweep's folder says it runs: enough to merge its reports
// without the spec or its traces.
type Plan struct {
	Description string    `json:"description"`
	Objective   Objective `json:"objective"`
	Points      []Point   `json:"points"`
}

// RunPoint runs one point's replay, writing its report to the path given.
type RunPoint func(ctx context.Context, p *Point, report string) error

// Progress hears of each point of the shard as it ends (or is found done).
type Progress func(done, total int, p *Point, wall time.Duration, resumed bool)

// Options says where and how a sweep runs.
type Options struct {
	Out      string
	Jobs     int // points at once; at least 1
	Shard    Shard
	Progress Progress // may be nil
}

// Run runs the shard's points that have no report yet in opt.Out, at most
// opt.Jobs at once, and returns how many ran and how many were found done.
// A point's report appears only once complete (written beside, then
// renamed), so an interrupted sweep resumes where it stopped. The first
// point that fails stops the others from starting; its error names it.
// When ctx ends (the process is told to stop), Run returns at once with
// ctx's error: the replays under way cannot be stopped midway, so their
// partial reports are removed, and none of them will be renamed.
func Run(ctx context.Context, plan *Plan, opt Options, run RunPoint) (ran, resumed int, err error) {
	if err := Prepare(opt.Out, plan); err != nil {
		return 0, 0, err
	}
	dir := filepath.Join(opt.Out, PointsDir)
	mine := opt.Shard.Of(plan.Points)
	var mu sync.Mutex // guards the counts, inflight and stopped
	done := 0
	inflight := map[string]bool{} // partial reports being written
	stopped := false
	report := func(p *Point, wall time.Duration, found bool) {
		if stopped { // Run has returned: it reports nothing more
			return
		}
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
	point := func(p *Point, path string) error {
		if gctx.Err() != nil {
			return nil // another point failed, or the sweep was stopped: start no more
		}
		start := time.Now()
		// A replay's report must end in .json; a partial one never takes
		// the name a resumed sweep looks for.
		tmp := filepath.Join(dir, fmt.Sprintf("%s.partial-%d.json", p.ID, os.Getpid()))
		mu.Lock()
		inflight[tmp] = true
		mu.Unlock()
		err := run(gctx, p, tmp)
		mu.Lock()
		defer mu.Unlock()
		delete(inflight, tmp)
		switch {
		case stopped:
			os.Remove(tmp)
			return nil
		case err != nil:
			os.Remove(tmp)
			return &PointError{Point: *p, Err: err}
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		report(p, time.Since(start), false)
		return nil
	}
	finished := make(chan error, 1)
	go func() {
		for i := range mine {
			if gctx.Err() != nil {
				break // stopped, or a point failed: nothing more starts or is counted
			}
			p := &mine[i]
			path := filepath.Join(dir, p.ID+".json")
			if _, err := os.Stat(path); err == nil {
				mu.Lock()
				report(p, 0, true)
				mu.Unlock()
				continue
			}
			g.Go(func() error { return point(p, path) })
		}
		finished <- g.Wait()
	}()
	select {
	case err = <-finished:
	case <-ctx.Done():
		mu.Lock()
		stopped = true
		for tmp := range inflight {
			os.Remove(tmp)
		}
		mu.Unlock()
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
	if err := os.MkdirAll(filepath.Join(out, PointsDir), 0o755); err != nil {
		return err
	}
	old, err := readPlan(out)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case !samePoints(old.Points, plan.Points):
		return fmt.Errorf("%s holds another sweep (its %s lists other points, or a trace changed since): give another --out, or remove it",
			out, PlanFile)
	case old.Description == plan.Description && reflect.DeepEqual(old.Objective, plan.Objective): // the same points, above
		return nil
	}
	data, err := json.MarshalIndent(plan, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(out, PlanFile)
	tmp := fmt.Sprintf("%s.partial-%d", path, os.Getpid())
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readPlan reads a sweep folder's plan.
func readPlan(dir string) (*Plan, error) {
	data, err := os.ReadFile(filepath.Join(dir, PlanFile))
	if err != nil {
		return nil, err
	}
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, PlanFile), err)
	}
	return &p, nil
}

// samePoints compares points as a plan records them.
func samePoints(a, b []Point) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
