package replay

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Experiment is one replay experiment, typed: the workload, the cluster,
// the router's config and the contenders set side by side on them. replay
// builds one from its flags; a sweep's point is one, built once when the
// sweep checks its points.
type Experiment struct {
	Workload Workload
	// TracePath is the trace file ("-": stdin), or "" for a generated
	// workload (Workload says which).
	TracePath    string
	MaxLineBytes int // a longer trace line is refused by its number
	Cluster      ClusterConfig
	Replicas     Replicas
	// Router is the config every contender starts from; each runs its own.
	Router     protocol.Config
	Contenders []Contender
	Goodput    SLO
	// Streams, when set, receive the one contender's command and response
	// streams.
	Streams Streams
	// Progress, if set, gives each contender's run a progress callback.
	Progress func(contender string, total int) func(done, total int)
	// Records, if set, is given each contender's per-request records as
	// soon as its run ends, in contender order (repeat 0: one run each), to
	// be written as the runs go; its error ends Run. The results keep them
	// too (Result.Records). Unset, no records are kept (Options.Records).
	Records func(contender string, repeat int, recs []Record) error
}

// Contender is what a comparison sets beside the others: a name and the
// router config it runs.
type Contender struct {
	Name   string
	Router protocol.Config
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
	var trace []Request
	var info TraceInfo
	bs := e.Router.BlockSize
	switch {
	case e.Workload.Synthetic != nil:
		trace, info.Source = e.Workload.Synthetic.Requests(e.Router.Seed, bs), "synthetic"
	case e.TracePath == "":
		trace, info.Source = Builtin(e.Router.Seed, e.Workload.BuiltinSessions, bs), "builtin"
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
		var sum string
		var err error
		if trace, sum, err = ReadMooncakeDigest(in, bs, e.MaxLineBytes); err != nil {
			return nil, info, fmt.Errorf("%s: %w", e.TracePath, err)
		}
		info.Source, info.SHA256 = "file", sum
	}
	info.Requests = len(trace)
	SpeedUp(trace, e.Workload.ArrivalSpeedupRatio)
	return trace, info, nil
}

// Setup is the report's deterministic part before any contender ran: what
// the experiment set up.
func (e *Experiment) Setup(info TraceInfo) Deterministic {
	d := Deterministic{ProtocolVersion: protocol.Version, Trace: info, Workload: e.Workload,
		Cluster: e.Cluster, Replicas: e.Replicas, Router: e.Router, Seed: e.Router.Seed, Goodput: e.Goodput}
	d.Cluster.Pools = e.Cluster.PoolSizes()
	return d
}

// Run replays the trace under each contender in turn and gives the
// report (its run part's host and costs filled, the tool version and
// trace path the caller's) and each contender's result, for the figures.
// It ends early, between two commands, with ErrStopped when ctx ends.
func (e *Experiment) Run(ctx context.Context, trace []Request, info TraceInfo) (*Report, []*Result, error) {
	rep := &Report{SchemaVersion: protocol.ReportSchemaVersion, Deterministic: e.Setup(info),
		Run: RunInfo{TracePath: e.TracePath, Host: Host{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}}}
	var results []*Result
	for _, c := range e.Contenders {
		res, err := e.runOne(ctx, trace, c, e.Replicas, e.Streams, e.Records != nil)
		if err != nil {
			return nil, nil, fmt.Errorf("replay of policy %s: %w", c.Name, err)
		}
		if e.Records != nil {
			if err := e.Records(c.Name, 0, res.Records()); err != nil {
				return nil, nil, fmt.Errorf("the records of policy %s: %w", c.Name, err)
			}
		}
		if e.Replicas.Count > 1 { // what the replicas cost, against one router
			base, err := e.runOne(ctx, trace, c, Replicas{Count: 1}, Streams{}, false)
			if err != nil {
				return nil, nil, fmt.Errorf("replay of policy %s with one router: %w", c.Name, err)
			}
			res.Metrics.OneRouter = OneRouterOf(&base.Metrics)
		}
		results = append(results, res)
		rep.Deterministic.Policies = append(rep.Deterministic.Policies, res.Metrics)
		rep.Run.Policies = append(rep.Run.Policies, res.Cost)
	}
	return rep, results, nil
}

// runOne replays one contender on its own copy of the trace (later turns'
// arrival times are filled in as it runs), keeping its records if asked.
func (e *Experiment) runOne(ctx context.Context, trace []Request, c Contender, replicas Replicas, s Streams, records bool) (*Result, error) {
	opt := Options{Cluster: e.Cluster, Router: c.Router, Goodput: e.Goodput, Concurrency: e.Workload.ReplayConcurrency,
		Replicas: replicas, Stop: ctx.Done(), Records: records, Commands: s.Commands, Responses: s.Responses,
		DecodeCommands: s.DecodeCommands, DecodeResponses: s.DecodeResponses}
	if e.Progress != nil {
		opt.Progress = e.Progress(c.Name, len(trace))
	}
	return Run(append([]Request(nil), trace...), opt)
}
