package replay

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
	"golang.org/x/sync/errgroup"
)

// Experiment is one replay experiment, typed: the workload, the cluster,
// the router's config and the contenders set side by side on them. replay
// builds one from its flags; a sweep's point is one, built once when the
// sweep checks its points.
type Experiment struct {
	Workload Workload
	// TracePath is the trace file ("-": stdin), or "" for a generated
	// workload (Workload says which).
	TracePath string
	// TraceFormat is the trace's format (FormatAuto: DetectFormat's), and
	// WekaBasis a Weka trace's nested basis (BasisFromFile: the file's).
	TraceFormat  Format
	WekaBasis    NestedBasis
	MaxLineBytes int // a longer trace line is refused by its number
	Cluster      cluster.Config
	Replicas     Replicas
	Signals      Signals // the KV event channel (the zero value: perfect)
	// Router is the config every contender starts from; each runs its own.
	Router     protocol.Config
	Contenders []Contender
	Goodput    SLO
	// Repeats runs each contender this many times (at least 1): repeat k
	// at seed Router.Seed+k, for the router's ties and sampling and for a
	// generated workload, the same for every contender (common random
	// numbers). Repeat 0 is the run of Router.Seed itself.
	Repeats int
	// Baseline names the contender the others are measured against ("":
	// none).
	Baseline string
	// Jobs is how many runs go at once (at least 1); the report does not
	// depend on it.
	Jobs int
	// Streams, when set, receive the one contender's command and response
	// streams at repeat 0; StreamsDone, if set, hears when that run has
	// ended, its streams whole, however the others end.
	Streams     Streams
	StreamsDone func()
	// Progress, if set, gives each contender's run a progress callback.
	Progress func(contender string, total int) func(done, total int)
	// Records, if set, is given every run's per-request records once all
	// have run, contender by contender, repeats in turn; its error ends
	// Run. Records are kept for it and for the bootstrap against the
	// baseline, and not otherwise (Options.Records).
	Records func(contender string, repeat int, recs []Record) error
}

// Contender is what a comparison sets beside the others: a name and the
// router config it runs.
type Contender struct {
	Name      string
	Router    protocol.Config
	Overrides []string // the config keys it sets over the experiment's, KEY=VALUE, for the report
}

// Streams are the router's command and response streams (the prefill
// router's, disaggregated), and the decode router's.
type Streams struct {
	Commands, Responses             io.Writer
	DecodeCommands, DecodeResponses io.Writer
}

// Load makes the requests to replay: the trace read as it streams (a line
// past MaxLineBytes refused by its number in as much memory, the digest
// taken as it is read), or the generated workload; arrivals shaped by the
// workload's speed-up.
func (e *Experiment) Load() ([]Request, TraceInfo, error) {
	trace, info, err := e.LoadUnshaped()
	if err != nil {
		return nil, info, err
	}
	SpeedUp(trace, e.Workload.ArrivalSpeedupRatio)
	return trace, info, nil
}

// LoadUnshaped is Load before the speed-up: the requests as stamped, which
// Shaped makes into those of any speed-up, their LoRA requests' ids salted
// (saltAdapters).
func (e *Experiment) LoadUnshaped() ([]Request, TraceInfo, error) {
	var trace []Request
	var info TraceInfo
	bs := e.Router.BlockSize
	switch {
	case e.Workload.Synthetic != nil:
		trace, info.Source = e.Workload.Synthetic.Requests(e.Router.Seed, bs), "synthetic"
	case e.TracePath == "" && e.Workload.BuiltinPlays > 0:
		trace, info.Source = AgenticBuiltin(e.Router.Seed, e.Workload.BuiltinPlays, e.Workload.BuiltinFreshSubagents, bs), "builtin"
		if err := checkGraph(trace); err != nil { // sets the lineage; a refusal would be the generator's bug
			return nil, info, fmt.Errorf("the built-in agentic workload: %w", err)
		}
	case e.TracePath == "":
		trace, info.Source = Builtin(e.Router.Seed, e.Workload.BuiltinSessions, e.Workload.BuiltinLoRAAdapters, bs), "builtin"
	default:
		in := io.Reader(os.Stdin)
		if e.TracePath != "-" {
			f, err := os.Open(e.TracePath)
			if err != nil {
				return nil, info, err
			}
			defer f.Close()
			in = f
		}
		f := e.TraceFormat
		var detected bool
		if f == FormatAuto {
			first, all, err := firstRecord(in, e.MaxLineBytes)
			if err == nil {
				f, err = first.format()
			}
			if err != nil {
				return nil, info, fmt.Errorf("%s: %w", e.TracePath, err)
			}
			in, detected = all, true
		}
		var sum string
		var err error
		opts := readOptions{blockSize: bs, maxLineBytes: e.MaxLineBytes, basis: e.WekaBasis, accept: e.knownClass, pack: true, detected: detected}
		if trace, sum, err = readTrace(in, f, opts); err != nil {
			return nil, info, fmt.Errorf("%s: %w", e.TracePath, err)
		}
		info.Source, info.SHA256, info.Format = "file", sum, string(f)
	}
	saltAdapters(trace)
	info.Requests = len(trace)
	info.LoRARequests, info.LoRAAdapters = adapterUse(trace)
	return trace, info, nil
}

// knownClass refuses a request whose policy_class is not one of a
// contender's policy classes, naming the first such contender: its router
// would refuse the place (unknown_policy_class) in the middle of the run,
// where the request's trace line is no longer known. A contender without
// classes takes any name, as Dynamo ignores the name then.
func (e *Experiment) knownClass(r *Request) error {
	for i := range e.Contenders {
		c := &e.Contenders[i]
		if _, err := classOf(&c.Router, r.PolicyClass); err != nil {
			return fmt.Errorf("field \"policy_class\": contender %s: %w", c.Name, err)
		}
	}
	return nil
}

// Setup is the report's deterministic part before any contender ran: what
// the experiment set up.
func (e *Experiment) Setup(info TraceInfo) Deterministic {
	d := Deterministic{ProtocolVersion: protocol.Version, Follows: protocol.Followed, Trace: info, Workload: e.Workload,
		Cluster: e.Cluster, Replicas: e.Replicas, Router: e.Router, Seed: e.Router.Seed, Goodput: e.Goodput,
		Repeats: e.repeats(), Baseline: e.Baseline}
	if !e.Signals.Perfect() {
		d.Signals = &e.Signals
	}
	d.Cluster.Pools = e.Cluster.PoolSizes()
	for k := range d.Repeats {
		d.Seeds = append(d.Seeds, e.seed(k))
	}
	return d
}

func (e *Experiment) repeats() int { return max(e.Repeats, 1) }

// seed is repeat k's seed: the stated rule, Router.Seed + k (mod 2^64), so
// that repeat k is the replay of --seed S+k.
func (e *Experiment) seed(k int) uint64 { return e.Router.Seed + uint64(k) }

// run is one contender's replay at one repeat.
type run struct {
	contender, repeat int
	result            *Result
}

// Run replays the trace under each contender at each repeat, Jobs at a
// time, and gives the report (its run part's host and costs filled, the
// tool version the caller's) and repeat 0's result of each contender, for
// the figures. The trace is repeat 0's; a generated workload is made
// again at each later repeat's seed. It ends early, between two commands,
// with ErrStopped when ctx ends; the first run that fails stops the
// others.
func (e *Experiment) Run(ctx context.Context, trace []Request, info TraceInfo) (*Report, []*Result, error) {
	rep := &Report{SchemaVersion: protocol.ReportSchemaVersion, Deterministic: e.Setup(info),
		Run: RunInfo{TracePath: e.TracePath, Host: Host{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}}}
	rep.Deterministic.Headroom = headroomOf(trace, &e.Cluster, e.Workload.ReplayConcurrency > 0)
	traces := make([][]Request, e.repeats())
	traces[0] = trace
	for k := 1; k < len(traces); k++ {
		traces[k] = trace
		if e.TracePath == "" { // generated: the workload's own seed changes too
			again := *e
			again.Router.Seed = e.seed(k)
			var err error
			if traces[k], _, err = again.Load(); err != nil {
				return nil, nil, err
			}
		}
	}
	runs := make([]run, 0, len(e.Contenders)*len(traces))
	for c := range e.Contenders {
		for k := range traces {
			runs = append(runs, run{contender: c, repeat: k})
		}
	}
	progress := e.progress(runs, traces)
	// Records are kept for --requests-out and for the bootstrap against
	// the baseline.
	keep := e.Records != nil || e.Baseline != ""
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(e.Jobs, 1))
	for i := range runs {
		r := &runs[i]
		g.Go(func() error {
			c := e.Contenders[r.contender]
			c.Router.Seed = e.seed(r.repeat)
			var streams Streams
			if r.repeat == 0 {
				streams = e.Streams
			}
			res, err := e.runOne(gctx, traces[r.repeat], c, e.Replicas, streams, keep, progress)
			if err != nil {
				return fmt.Errorf("replay of policy %s%s: %w", c.Name, repeatLabel(r.repeat), err)
			}
			if e.Replicas.Count > 1 { // what the replicas cost, against one router
				base, err := e.runOne(gctx, traces[r.repeat], c, Replicas{Count: 1}, Streams{}, false, nil)
				if err != nil {
					return fmt.Errorf("replay of policy %s%s with one router: %w", c.Name, repeatLabel(r.repeat), err)
				}
				res.Metrics.OneRouter = OneRouterOf(&base.Metrics)
			}
			if streams != (Streams{}) && e.StreamsDone != nil {
				e.StreamsDone()
			}
			res.Metrics.Contender = c.Name
			r.result = res
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	var results []*Result
	for i := range runs {
		if runs[i].repeat == 0 {
			res := runs[i].result
			results = append(results, res)
			rep.Deterministic.Policies = append(rep.Deterministic.Policies, res.Metrics)
			rep.Run.Policies = append(rep.Run.Policies, res.Cost)
		}
	}
	if e.Records != nil { // in order: contender by contender, repeats in turn
		for _, r := range runs {
			if err := e.Records(e.Contenders[r.contender].Name, r.repeat, r.result.Records()); err != nil {
				return nil, nil, fmt.Errorf("the records of policy %s%s: %w", e.Contenders[r.contender].Name, repeatLabel(r.repeat), err)
			}
		}
	}
	e.compare(rep, runs)
	return rep, results, nil
}

// repeatLabel names a repeat after the first in a message.
func repeatLabel(k int) string {
	if k == 0 {
		return ""
	}
	return fmt.Sprintf(" (repeat %d)", k)
}

// progress is the callback each run reports its requests to: one run's
// own, or for several a sum over them all.
func (e *Experiment) progress(runs []run, traces [][]Request) func(int) func(done, total int) {
	if e.Progress == nil {
		return nil
	}
	if len(runs) == 1 {
		bar := e.Progress(e.Contenders[0].Name, len(traces[0]))
		return func(int) func(done, total int) { return bar }
	}
	total := 0
	for _, r := range runs {
		total += len(traces[r.repeat])
	}
	var mu sync.Mutex
	sum := 0
	bar := e.Progress(fmt.Sprintf("%d runs", len(runs)), total)
	return func(int) func(done, total int) {
		last := 0
		return func(done, _ int) {
			mu.Lock()
			defer mu.Unlock()
			sum += done - last
			last = done
			bar(sum, total)
		}
	}
}

// runOne replays one contender on its own copy of the trace (later turns'
// arrival times are filled in as it runs), keeping its records if asked.
func (e *Experiment) runOne(ctx context.Context, trace []Request, c Contender, replicas Replicas, s Streams, records bool, progress func(int) func(done, total int)) (*Result, error) {
	opt := Options{Cluster: e.Cluster, Router: c.Router, Goodput: e.Goodput, Concurrency: e.Workload.ReplayConcurrency,
		Replicas: replicas, Signals: e.Signals, Stop: ctx.Done(), Records: records, Commands: s.Commands, Responses: s.Responses,
		DecodeCommands: s.DecodeCommands, DecodeResponses: s.DecodeResponses}
	if progress != nil {
		opt.Progress = progress(len(trace))
	}
	if e.Workload.BenchmarkDurationS > 0 {
		return e.recycledRun(trace, opt)
	}
	return Run(append([]Request(nil), trace...), opt)
}
