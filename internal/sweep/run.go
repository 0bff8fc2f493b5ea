package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
func Run(ctx context.Context, plan *Plan, opt Options, run RunPoint) (ran, resumed int, err error) {
	if err := Prepare(opt.Out, plan); err != nil {
		return 0, 0, err
	}
	dir := filepath.Join(opt.Out, PointsDir)
	mine := opt.Shard.Of(plan.Points)
	var mu sync.Mutex
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
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(opt.Jobs, 1))
	for i := range mine {
		p := &mine[i]
		path := filepath.Join(dir, p.ID+".json")
		if _, err := os.Stat(path); err == nil {
			report(p, 0, true)
			continue
		}
		g.Go(func() error {
			if ctx.Err() != nil {
				return nil // another point failed: start no more
			}
			start := time.Now()
			// A replay's report must end in .json; a partial one never
			// takes the name a resumed sweep looks for.
			tmp := filepath.Join(dir, fmt.Sprintf("%s.partial-%d.json", p.ID, os.Getpid()))
			if err := run(ctx, p, tmp); err != nil {
				os.Remove(tmp)
				return &PointError{Point: *p, Err: err}
			}
			if err := os.Rename(tmp, path); err != nil {
				return err
			}
			report(p, time.Since(start), false)
			return nil
		})
	}
	err = g.Wait()
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

// Prepare makes the sweep's folder and records the plan there, or checks
// that the folder's is the same: two sweeps sharing a folder would mix
// their reports in one table.
func Prepare(out string, plan *Plan) error {
	if err := os.MkdirAll(filepath.Join(out, PointsDir), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(plan, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	path := filepath.Join(out, PlanFile)
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	case err != nil:
		return err
	case string(old) != string(data):
		return fmt.Errorf("%s holds another sweep's plan (%s): give another --out, or remove it", out, path)
	}
	return nil
}
