package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/offline-router/offline-router/internal/figure"
	"github.com/offline-router/offline-router/internal/outfile"
	"github.com/offline-router/offline-router/internal/replay"
	"github.com/offline-router/offline-router/internal/sweep"
)

type sweepOptions struct {
	out      string
	jobs     int
	shard    string
	quiet    bool
	emit     string
	shards   int
	cpus     int
	image    string
	claim    string
	jobName  string
	report   string
	plotFile string
}

func newSweepCommand() *cobra.Command {
	o := &sweepOptions{}
	cmd := &cobra.Command{
		Use:   "sweep SPEC.json --out DIR [--jobs J] [--shard I/N] [--emit slurm|kubernetes]",
		Short: "Replay a grid of policies, knobs and cluster settings, and recommend one (locally, or as a Slurm array or Kubernetes Indexed Job)",
		Long: `Runs every point of a sweep spec, each a replay with its own flags, and
says which to deploy. The spec (docs/sweep.md; examples/sweep.json) names
the workloads (trace files, or "builtin"), replay flags every point takes
("repeats": 5 runs each point five times, at seeds seed to seed+4, the same
for every point), a grid of flag values (blocks whose combinations are the
points: policies or contenders, their knobs, worker counts, cluster
settings) and an objective, e.g. the lowest p99_ttft_ms with
worker_share_cv at most 0.1, or median_ttft_ms at most "0.6x baseline" (the
baseline point, --policy=round_robin by default). With repeats, a bound
holds only if a point's whole 95% interval does, and the best point is
recommended only when the paired interval of its difference to the
runner-up holds no 0; otherwise the table names the points that tie.

DIR receives plan.json (the points), points/ID.json (each point's replay
report, written whole or not at all), and once every point has one,
sweep.json (the merged table: every point's deterministic report, the
Pareto front of the objective's metric against the first it bounds, the
recommended point or the tied set) and sweep.png (the figure). The table is printed. Points run --jobs at a
time (one per CPU by default); results do not depend on --jobs. Every file
is written whole or not at all. A sweep run again skips the points whose
file is their whole report (any other file there is named and its point
replayed), so an interrupted sweep resumes.

Beyond one machine: --shard I/N runs only shard I of N (point k, counted
from 0 in spec order, is in shard k mod N + 1), and "sweep merge DIR..."
merges the folders' reports. --emit slurm prints a job-array script whose
task I runs --shard I/N; --emit kubernetes (with --image) prints a
ReadWriteMany claim, a staging pod and an Indexed Job whose pod k runs
--shard-index k/N (docs/sweep.md). Each says how to submit, wait and merge.

Exit status: 0 when the points ran (or were found done); 2 for a bad spec
or a point whose flags replay refuses, found before any point runs; 1 when
a point's replay failed (the others stop starting; rerun to resume) or an
output could not be written; 128+n when signal n (SIGHUP, SIGINT, SIGTERM)
stopped it: the points under way stop and write nothing, and the same
command resumes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSweep(cmd, o, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.out, "out", "", "the sweep's folder (required): plan, reports, table and figure")
	f.IntVar(&o.jobs, "jobs", runtime.NumCPU(), "points replayed at once")
	f.StringVar(&o.shard, "shard", "1/1", "run only shard I of N (1-based), as a job array's task")
	f.Var(sweep.IndexShard{Shard: &o.shard}, "shard-index", "--shard K+1/N, K counted from 0 as a Kubernetes Indexed Job's completion index (the emitted Job's pods)")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress")
	f.StringVar(&o.emit, "emit", "", "print a job for a cluster instead of running: slurm (job-array script) or kubernetes (Indexed Job manifest)")
	f.IntVar(&o.shards, "shards", 0, "--emit: shards (array tasks, pods); default one per point, at most 64")
	f.IntVar(&o.cpus, "cpus-per-task", 1, "--emit: CPUs per shard, and so its --jobs")
	f.StringVar(&o.image, "image", "", "--emit kubernetes (required): the image built from the Dockerfile, pushed where the cluster pulls, by version tag or digest")
	f.StringVar(&o.claim, "volume-claim", "offline-router-sweep", "--emit kubernetes: the ReadWriteMany PersistentVolumeClaim the manifest makes, mounted at /sweep (a DNS-1123 subdomain)")
	f.StringVar(&o.jobName, "job-name", "offline-router-sweep", "--emit kubernetes: the Job's name (a DNS-1123 label); its staging pod is NAME-stage")
	cmd.MarkFlagRequired("out")
	cmd.MarkFlagsMutuallyExclusive("shard", "shard-index")
	cmd.AddCommand(newSweepMergeCommand())
	return cmd
}

func newSweepMergeCommand() *cobra.Command {
	o := &sweepOptions{}
	cmd := &cobra.Command{
		Use:   "merge DIR... --report FILE.json [--plot FILE.png]",
		Short: "Merge the reports of a sweep's folders (its shards) into its table",
		Long: `Reads plan.json and points/*.json from each folder (the shards of one
sweep: their plans must be the same) and writes the merged table: every
point's deterministic report, the Pareto front and the recommended point
(docs/sweep.md). Every point must have a report in one of the folders. The
table is printed; --plot draws the figure (.png, .svg or .pdf).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, dirs []string) error {
			for _, dir := range dirs {
				if st, err := os.Stat(dir); err != nil || !st.IsDir() {
					return &exitError{2, fmt.Errorf("%s: not a sweep's folder", dir)}
				}
			}
			if err := checkMergeOutputs(dirs, o.report, o.plotFile); err != nil {
				return &exitError{2, err}
			}
			t, err := sweep.Merge(dirs...)
			if err != nil {
				return &exitError{1, err}
			}
			return o.writeTable(cmd.OutOrStdout(), t, "")
		},
	}
	cmd.Flags().StringVar(&o.report, "report", "", "write the merged table (JSON) here (required)")
	cmd.Flags().StringVar(&o.plotFile, "plot", "", "draw the sweep's figure here (.png, .svg or .pdf)")
	cmd.MarkFlagRequired("report")
	return cmd
}

func runSweep(cmd *cobra.Command, o *sweepOptions, specPath string) error {
	shard, err := sweep.ParseShard(o.shard)
	if err != nil {
		return &exitError{2, err}
	}
	if o.jobs < 1 {
		return &exitError{2, fmt.Errorf("--jobs %d: expected at least 1", o.jobs)}
	}
	if err := o.noIgnoredFlags(cmd.Flags()); err != nil {
		return &exitError{2, err}
	}
	spec, err := sweep.Load(specPath)
	if err != nil {
		return &exitError{2, err}
	}
	points, err := spec.Points()
	if err != nil {
		return &exitError{2, fmt.Errorf("%s: %w", specPath, err)}
	}
	experiments, err := checkPoints(points, &spec.Objective)
	if err != nil {
		return &exitError{2, fmt.Errorf("%s: %w", specPath, err)}
	}
	plan := &sweep.Plan{Description: spec.Description, Objective: spec.Objective, Scenario: spec.Scenario, Points: points}
	if o.emit != "" {
		return o.emitJob(cmd.OutOrStdout(), specPath, plan)
	}
	if err := checkSweepFolder(o.out, specPath, points); err != nil {
		return &exitError{2, err}
	}
	if err := sweep.Prepare(o.out, plan); err != nil {
		return &exitError{2, fmt.Errorf("--out %s: %w", o.out, err)}
	}
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	redo := func(path string, why error) { fmt.Fprintf(stderr, "sweep: %v: replaying that point again\n", why) }
	ran, resumed, err := sweep.Run(ctx, plan, sweep.Options{Out: o.out, Jobs: o.jobs, Shard: shard,
		Progress: o.progress(len(shard.Of(points))), Redo: redo}, pointRunner(experiments))
	if sig := signalOf(ctx); sig != 0 {
		return &exitError{exitCodeFor(sig), fmt.Errorf("sweep stopped by %s: %d points replayed, %d found done; the same command resumes it", unix.SignalName(sig), ran, resumed)}
	}
	if err != nil {
		return &exitError{1, err}
	}
	if shard != sweep.All {
		fmt.Fprintf(stderr, "shard %d/%d: %d points replayed, %d found done; when every shard has run:\n  offline-router sweep merge %s --report %s\n",
			shard.I, shard.N, ran, resumed, o.out, filepath.Join(o.out, sweep.TableFile))
		return nil
	}
	if resumed > 0 && !o.quiet {
		fmt.Fprintf(stderr, "%d points replayed, %d found done (resumed)\n", ran, resumed)
	}
	t, err := sweep.Merge(o.out)
	if err != nil {
		return &exitError{1, err}
	}
	o.report, o.plotFile = filepath.Join(o.out, sweep.TableFile), filepath.Join(o.out, sweep.FigureFile)
	return o.writeTable(cmd.OutOrStdout(), t, filepath.Dir(specPath))
}

// writeTable prints the table and writes its JSON and figure; a file it
// cannot write is a failure of the run (exit 1), not of the flags.
func (o *sweepOptions) writeTable(w io.Writer, t *sweep.Table, specDir string) error {
	if o.plotFile != "" {
		if err := figure.CheckFormat(o.plotFile); err != nil {
			return &exitError{2, err}
		}
	}
	data, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return &exitError{1, err}
	}
	if err := outfile.Write(o.report, append(data, '\n')); err != nil {
		return &exitError{1, err}
	}
	if err := sweep.WriteTable(w, t, specDir); err != nil {
		return &exitError{1, err}
	}
	if o.plotFile != "" {
		if err := figure.SaveSweep(o.plotFile, t); err != nil {
			return &exitError{1, err}
		}
	}
	return nil
}

// noIgnoredFlags refuses the flags of the mode not chosen, as replay does:
// a job's flags without --emit, and --jobs with it (each shard's is
// --cpus-per-task).
func (o *sweepOptions) noIgnoredFlags(flags *pflag.FlagSet) error {
	if o.emit == "" {
		for _, name := range []string{"shards", "cpus-per-task", "image", "volume-claim", "job-name"} {
			if flags.Changed(name) {
				return fmt.Errorf("--%s shapes the job --emit prints: give --emit slurm or kubernetes, or drop it", name)
			}
		}
		return nil
	}
	if flags.Changed("jobs") {
		return errors.New("--jobs is each shard's --cpus-per-task with --emit: give that instead")
	}
	return nil
}

// checkSweepFolder refuses, before any point runs, a folder whose files
// the sweep could not write at the end (its table or figure a folder) or
// that would write over one of its inputs (the spec, a trace), however
// spelt.
func checkSweepFolder(out, specPath string, points []sweep.Point) error {
	if out == "" {
		return errors.New("--out '': give the sweep's folder")
	}
	inputs := []placedFile{place("the spec", specPath)}
	traces := map[string]bool{} // each workload once: every point of it reads the same file
	for i := range points {
		if p := &points[i]; p.TraceSHA256 != "" && !traces[p.Workload] {
			traces[p.Workload] = true
			inputs = append(inputs, place("the trace "+p.Workload, p.Args()[0]))
		}
	}
	for _, name := range []string{sweep.PlanFile, sweep.TableFile, sweep.FigureFile} {
		path := filepath.Join(out, name)
		if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
			return fmt.Errorf("--out %s: %s is not a regular file: remove it, or give another --out", out, path)
		}
		f := place(path, path)
		for _, in := range inputs {
			if f.same(in) {
				return fmt.Errorf("--out %s: the sweep writes %s, which is %s: give another --out", out, path, in.label)
			}
		}
	}
	return nil
}

// checkMergeOutputs refuses, before anything is read, a merge output that
// is one of its inputs (a folder's plan or a point's report, however
// spelt) or that cannot be written.
func checkMergeOutputs(dirs []string, report, plot string) error {
	if strings.ToLower(filepath.Ext(report)) != ".json" {
		return fmt.Errorf("--report %s: the file must end in .json", report)
	}
	if plot != "" {
		if err := figure.CheckFormat(plot); err != nil {
			return err
		}
	}
	var inputs []output
	for _, dir := range dirs {
		inputs = append(inputs, output{"the plan " + filepath.Join(dir, sweep.PlanFile), filepath.Join(dir, sweep.PlanFile)})
		reports, _ := filepath.Glob(filepath.Join(dir, sweep.PointsDir, "*.json"))
		for _, r := range reports {
			inputs = append(inputs, output{"the point's report " + r, r})
		}
	}
	return checkOutputs(inputs, []output{{"report", report}, {"plot", plot}})
}

// checkPoints runs every point's flags through replay's own checks before
// any point runs, so that a typo in the last block fails the sweep at once,
// and reads each trace at each block size the points give it. It gives
// each point's experiment, by point ID.
func checkPoints(points []sweep.Point, objective *sweep.Objective) (map[string]*pointPlan, error) {
	needsGoodput := objective.Names("request_goodput")
	needsCapacity := objective.Names(sweep.SustainableRate)
	type read struct {
		trace     string
		blockSize uint64
	}
	traces := map[read]bool{}
	experiments := map[string]*pointPlan{}
	for i := range points {
		p := &points[i]
		cmd, o := replayCommand()
		fail := func(err error) error {
			return fmt.Errorf("point %d (%s): %w", i+1, strings.Join(p.Varied, " "), err)
		}
		if err := cmd.ParseFlags(p.Args()); err != nil {
			return nil, fail(err)
		}
		args := cmd.Flags().Args()
		if err := replayArgs(cmd, args); err != nil {
			return nil, fail(err)
		}
		exp, err := o.experiment(cmd, args)
		if err != nil {
			return nil, fail(err)
		}
		if len(exp.Contenders) != 1 {
			return nil, fail(errors.New("a point is one contender: give one --policy or --contender a point (a grid block's list makes the others)"))
		}
		exp.Jobs = 1 // the sweep's --jobs runs points at once
		p.Policy = string(exp.Contenders[0].Router.Policy)
		setup := exp.Setup(replay.TraceInfo{})
		p.Setup = setup.SetupDigest()
		if needsGoodput && !exp.Goodput.Set() {
			return nil, fail(errors.New("the objective names request_goodput, which a point reports only with --goodput: give goodput in the spec's flags"))
		}
		if needsCapacity && !o.capacity {
			return nil, fail(errors.New("the objective names sustainable_rate, which a point reports only with --capacity: give capacity (and goodput) in the spec's flags"))
		}
		if key := (read{p.Workload, exp.Router.BlockSize}); exp.TracePath != "" && !traces[key] {
			if _, _, _, err := o.load(exp); err != nil {
				return nil, fmt.Errorf("workload %s at block size %d: %w", p.Workload, exp.Router.BlockSize, err)
			}
			traces[key] = true
		}
		plan := &pointPlan{exp: exp}
		if o.capacity {
			plan.capacity = &o.search
		}
		experiments[p.ID] = plan
	}
	return experiments, nil
}

// pointPlan is what a point runs: its experiment and, with the
// "capacity" flag, the capacity search after it.
type pointPlan struct {
	exp      *replay.Experiment
	capacity *replay.CapacitySearch
}

// pointRunner runs each point's experiment in this process, and writes
// its report whole or not at all.
func pointRunner(experiments map[string]*pointPlan) sweep.RunPoint {
	return func(ctx context.Context, p *sweep.Point, report string) error {
		plan := experiments[p.ID]
		exp := plan.exp
		fail := func(err error) error { return fmt.Errorf("replay %s: %w", strings.Join(p.Args(), " "), err) }
		var trace, base []replay.Request
		var info replay.TraceInfo
		var err error
		if plan.capacity == nil {
			trace, info, err = exp.Load()
		} else if base, info, err = exp.LoadUnshaped(); err == nil { // as replay --capacity loads it
			trace = replay.Shaped(base, exp.Workload.ArrivalSpeedupRatio)
		}
		if err != nil {
			return fail(err)
		}
		rep, _, err := exp.Run(ctx, trace, info)
		if err == nil && plan.capacity != nil {
			rep.Deterministic.Capacity, err = exp.Capacity(ctx, base, *plan.capacity)
		}
		if err != nil {
			return fail(err)
		}
		rep.Run.ToolVersion = toolVersion()
		data, err := rep.Encode()
		if err != nil {
			return fail(err)
		}
		return outfile.Write(report, data)
	}
}

// progress shows the shard's points as they end: a bar on a terminal, a
// line a point otherwise (a job's log).
func (o *sweepOptions) progress(total int) sweep.Progress {
	if o.quiet {
		return nil
	}
	if isatty.IsTerminal(os.Stderr.Fd()) {
		bar := progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription("sweep points"), progressbar.OptionShowCount(),
			progressbar.OptionThrottle(100e6), progressbar.OptionClearOnFinish())
		return func(done, _ int, _ *sweep.Point, _ time.Duration, _ bool) { bar.Set(done) }
	}
	return func(done, total int, p *sweep.Point, wall time.Duration, resumed bool) {
		how := fmt.Sprintf("in %.1f s", wall.Seconds())
		if resumed {
			how = "found done"
		}
		fmt.Fprintf(os.Stderr, "sweep: %d/%d %s (%s on %s) %s\n", done, total, p.ID, strings.Join(p.Varied, " "), p.Workload, how)
	}
}

// emitJob prints the Slurm script or the Kubernetes manifest.
func (o *sweepOptions) emitJob(w io.Writer, specPath string, plan *sweep.Plan) error {
	points := len(plan.Points)
	if o.shard != "1/1" {
		return &exitError{2, errors.New("--emit writes a job for every shard: drop --shard")}
	}
	shards := o.shards
	if shards == 0 {
		shards = min(points, 64)
	}
	if shards < 1 || shards > points {
		return &exitError{2, fmt.Errorf("--shards %d: expected 1 to %d (the points)", shards, points)}
	}
	if o.cpus < 1 {
		return &exitError{2, fmt.Errorf("--cpus-per-task %d: expected at least 1", o.cpus)}
	}
	switch o.emit {
	case "slurm":
		bin, err := os.Executable()
		if err != nil {
			return err
		}
		spec, err1 := filepath.Abs(specPath)
		out, err2 := filepath.Abs(o.out)
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		var script bytes.Buffer
		if err := sweep.WriteSlurm(&script, sweep.SlurmJob{Binary: bin, Spec: spec, Out: out, Shards: shards, CPUs: o.cpus}); err != nil {
			return &exitError{2, err}
		}
		// The tasks' logs go to the folder, which must exist when they start.
		if err := sweep.Prepare(out, plan); err != nil {
			return &exitError{2, err}
		}
		_, err = w.Write(script.Bytes())
		return err
	case "kubernetes":
		job := sweep.KubernetesJob{Name: o.jobName, Image: o.image, Claim: o.claim, SpecPath: specPath, Points: plan.Points,
			Out: o.out, Shards: shards, CPUs: o.cpus}
		if err := job.Check(); err != nil {
			return &exitError{2, err}
		}
		return sweep.WriteKubernetes(w, job)
	}
	return &exitError{2, fmt.Errorf("--emit %q: slurm or kubernetes", o.emit)}
}
