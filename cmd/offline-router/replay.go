package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/figure"
	"github.com/offline-router/offline-router/internal/outfile"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
	"github.com/offline-router/offline-router/internal/wire"
)

// replayBlockSize is replay's default block size: Mooncake traces' hash_ids
// are 512 tokens each.
const replayBlockSize = 512

// maxSessions bounds the built-in workload, which is held in memory.
const maxSessions = 200_000

// maxPlays bounds the built-in agentic workload, held in memory too: a
// play is some 55 requests of long prompts, and a replay of 2,000 plays
// peaks near 1 GB.
const maxPlays = 5_000

type replayOptions struct {
	serve         serveOptions // the router's config file and flags (bindConfig only)
	cluster       cluster.Config
	replicas      replay.Replicas
	workload      replay.Workload
	builtin       string // --workload: which built-in workload
	plays         int
	subagents     string // --subagent-context
	synthetic     replay.Synthetic
	goodput       []string
	policies      []string
	compare       bool
	contenders    []string
	repeats       int
	baseline      string
	jobs          int
	reportFile    string
	emitCommands  string
	emitResponses string
	plotFile      string
	requestsOut   string
	profileFile   string
	clusterFile   string
	signals       replay.Signals
	restarts      []string // --engine-restart WORKER@MS
	maxLineBytes  int
	traceFormat   string
	wekaBasis     string
	maxLoRAs      int // --max-gpu-lora-count, the cluster's when given
	// host and disk are the lower tiers' flags, the cluster's when a
	// capacity is given; hostGB and diskGB their capacities in GB.
	host, disk     cluster.TierConfig
	hostGB, diskGB float64
	cpuProfile     string
	quiet          bool
	capacity       bool
	robustness     bool
	search         replay.CapacitySearch
}

func newReplayCommand() *cobra.Command {
	cmd, _ := replayCommand()
	return cmd
}

// replayCommand is the replay command and the options its flags fill.
func replayCommand() (*cobra.Command, *replayOptions) {
	o := &replayOptions{cluster: cluster.Default(8), workload: replay.Workload{ArrivalSpeedupRatio: 1, BuiltinSessions: 300},
		search: replay.CapacitySearch{MaxProbes: replay.DefaultCapacityProbes}}
	cmd := &cobra.Command{
		Use:   "replay [TRACE] [--goodput ttft:MS tpot:MS e2el:MS]",
		Short: "Replay a trace (or a built-in or synthetic workload) through the router and a simulated cluster",
		Long: `Replays a Mooncake-style JSONL trace (timestamp ms, input_length, output_length,
hash_ids at --block-size tokens per block, 512 by default here as in Mooncake
traces; optional session_id, delay_ms for a session's later turns,
parent_session_id, priority, strict_priority, policy_class, role and
lora_name, passed to the router as a host would; a LoRA request's hash_ids
are salted by its adapter, docs/replay.md) through the router and a simulated cluster, and reports what
routing did: vLLM benchmark_serving's metrics (TTFT, TPOT, ITL, E2EL,
throughput, goodput), the prefix hit rate, the router's predicted overlap
and its regret, queue wait and how evenly requests spread.

Agent traces too (--trace-format, told from the first record by default):
mooncake-delta (later turns hold only their new input), weka (AgentX
plays with subagents; --weka-nested-basis), agentic_mooncake (v1 and v2)
and Dynamo's request-trace-v1 (dynamo, .jsonl.gz too). Their requests are
sent by their dependencies on the virtual clock (a dispatch or a
completion, plus the recorded think or tool time), carry their play's
affinity keys, and --replay-concurrency N holds N plays (docs/replay.md,
"Trace formats"). A worker caches the blocks an answer fills, under the
ids the next turn's prompt names for them.

With no TRACE it runs the built-in workload: multi-turn chat sessions
sharing a few system prompts (--sessions, seeded by --seed; with
--builtin-lora-adapters, half of them under LoRA adapters); with
--workload agentic, coding-agent plays whose subagents fork from the main
agent's context or start fresh (--plays, --subagent-context); or, given
--input-tokens, --output-tokens and --request-count, a synthetic one, as
Dynamo's replay makes it. --arrival-speedup-ratio and --replay-concurrency
shape arrivals with the meaning Dynamo's replay gives them (README);
--benchmark-duration recycles a closed loop's plays for that long.

The simulated workers run as vLLM's V1 scheduler does, step by step
(--engine iteration): chunked prefill under a budget of
--worker-max-num-batched-tokens tokens a step beside the running decodes, at
most --worker-max-num-seqs running, prefix-cache hits that skip their
tokens, KV blocks taken per request and cached after (each worker holds
--worker-kv-tokens tokens of KV, in whole blocks, or --worker-kv-blocks
blocks; --worker-kv-tokens auto sizes it from the profile's GPU memory as
vLLM does), evicted least recently freed first, preemption when a block is missing. A
step's time comes from --engine-profile (the shipped one: Llama-3.1-8B on
one H100). --engine simple is the earlier model: one FIFO prefill server at
--worker-prefill-tokens-per-ms and --worker-decode-ms-per-token a token.
They talk to the router with the wire commands a host would send; --emit-commands writes that stream,
opening with its config, so that piping it into offline-router with no flags
gives back --emit-responses byte for byte.

The router takes the same config as serve (--config and flags, Dynamo's
flag names, and Dynamo's policy config YAML, --router-policy-config). With
--kv-events=false (approximate mode) the host sends no KV events. A request
the router turns away (every worker over a busy threshold: Dynamo's HTTP
529; a queue timeout) is counted as rejected, by reason.

Comparisons: --compare, --policies or --contender NAME=POLICY:KEY=VALUE,...
(a policy with config overrides) set contenders side by side. --repeats N
runs each N times, repeat k at --seed + k for all of them, and gives means
with 95% Student-t intervals. Against --baseline (round_robin when it
runs), the table and report give each contender's ratio on mean and p99
TTFT, goodput and prefix hit rate with a 95% interval (a paired bootstrap
over sessions), and one verdict line each: "kv beats round_robin on p99
TTFT by 23% [19, 27]", or a tie when the interval holds no difference.

--capacity (with --goodput) also searches each contender's capacity at
SLO: the highest offered rate at which the share of requests offered that
meet every level stays >= --attainment (0.9), doubling or halving the
speed-up from --arrival-speedup-ratio until bracketed, then bisecting to
--capacity-tolerance (2%), at most 12 replays (of every repeat) a
contender; without contenders named it runs --compare's four. The table
and the report's capacity part give each rate, its ratio to the baseline
and every probe; --plot then draws TTFT and attainment against offered
load (docs/replay.md, "Capacity at SLO").

--report FILE.json (or - for stdout, the table then going to stderr) writes
the report: docs/report.schema.json describes it. --requests-out FILE.csv (or
.jsonl) writes one row per request per contender and repeat: its pool,
worker, tokens, queue wait, TTFT, TPOT, E2EL, preemptions and rejection
reason, from which the report's figures recompute (docs/replay.md gives the
columns). --emit-commands and --emit-responses write repeat 0's streams.

Every file is written beside its path and renamed: whole or not at all.

Exit status: 0 when every policy ran; 2 for bad flags, config, profile or
trace, found before anything runs or any file is made; 1 when a run failed
on its way or an output could not be written (the message says why;
--emit-commands and --emit-responses keep what was sent, closed by a
"# incomplete" comment); 128+n when signal n (SIGHUP, SIGINT, SIGTERM)
stopped it between two commands (no report nor rows; the streams end the same way).`,
		Args: replayArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReplay(cmd, o, args)
		},
	}
	o.serve.bindConfig(cmd)
	f := cmd.Flags()
	f.Lookup("block-size").DefValue = fmt.Sprint(replayBlockSize)
	f.IntVar(&o.cluster.Workers, "workers", o.cluster.Workers, "simulated workers")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile (pprof) of the whole replay, trace reading included, to this file")
	f.IntVar(&o.cluster.PrefillWorkers, "prefill-workers", 0, "disaggregated serving: prefill workers behind a router of their own (with --decode-workers; replaces --workers)")
	f.IntVar(&o.cluster.DecodeWorkers, "decode-workers", 0, "disaggregated serving: decode workers behind a router of their own (with --prefill-workers)")
	f.Float64Var(&o.cluster.KVTransferGBps, "kv-transfer-gbps", 50, "disaggregated serving: GB/s a prompt's KV crosses from prefill to decode worker at (bytes from the profile's model shape)")
	f.IntVar(&o.replicas.Count, "router-replicas", 1, "router instances (frontends), each with its own view, requests spread across them; the report then also gives one router's figures")
	f.StringVar(&o.replicas.Assign, "replica-assign", replay.AssignRoundRobin, "how requests spread across router replicas: round_robin, or session (a session keeps its replica)")
	f.Float64Var(&o.replicas.DelayMS, "replica-sync-delay-ms", 10, "router replicas: delay of the sync channel that tells each what the others booked")
	f.Float64Var(&o.replicas.Rate, "replica-sync-rate", 1, "router replicas: fraction of sync messages delivered (0 = no sync; which are dropped is seeded by --seed)")
	f.Float64Var(&o.signals.DelayMS, "event-delay-ms", 0, "the KV event channel: every event reaches the router this many ms late (0 = at once)")
	f.Float64Var(&o.signals.ReorderWindowMS, "event-reorder-window-ms", 0, "the KV event channel: each event later by a delay drawn uniformly from [0, this) ms, so that events within it of each other arrive in either order (seeded by --seed)")
	f.Float64Var(&o.signals.LossRate, "event-loss-rate", 0, "the KV event channel: the share of events the router never gets (seeded by --seed)")
	f.Float64Var(&o.signals.DupRate, "event-dup-rate", 0, "the KV event channel: the share of events the router gets twice, the copy --event-dup-lag-ms after the first (seeded by --seed)")
	f.Float64Var(&o.signals.DupLagMS, "event-dup-lag-ms", 1000, "with --event-dup-rate: how long after an event its copy comes, as a publisher's retry would resend it")
	f.StringArrayVar(&o.restarts, "engine-restart", nil, "WORKER@MS: that worker's engine restarts MS into the run (iteration engine): its prefix cache reset, a cleared event, its event ids from 1 again; repeatable")
	f.BoolVar(&o.cluster.DPAttention, "dp-attention", false, "iteration engine, --dp-size 2 or more: a worker's DP ranks step together, each step as long as its slowest rank's, as DP attention over an expert-parallel MoE runs (DeepSeek-style); the report gives the step time each rank lost waiting (docs/replay.md)")
	f.IntVar(&o.cluster.DPSize, "dp-size", o.cluster.DPSize, "attention data-parallel ranks per worker, each its own KV cache and batch (the --worker-* sizes are each rank's): 1 to 1024, and at most 65536 ranks in all")
	f.Var(kvTokensFlag{&o.cluster}, "worker-kv-tokens", "KV cache capacity of each worker, in tokens (whole blocks of --block-size: floor(tokens / block size) blocks), or auto: from the engine profile's GPU memory, as vLLM sizes its cache")
	f.Float64Var(&o.cluster.GPUMemoryUtilization, "gpu-memory-utilization", cluster.DefaultGPUMemoryUtilization, "with --worker-kv-tokens auto: the share of the GPU's memory the worker takes, as vLLM's flag")
	f.IntVar(&o.cluster.TotalKVBlocks, "worker-kv-blocks", o.cluster.TotalKVBlocks, "KV cache capacity of each worker, in blocks, overriding --worker-kv-tokens (default: the whole blocks its tokens make)")
	f.Lookup("worker-kv-blocks").DefValue = "0" // none: made from --worker-kv-tokens, whatever the block size
	f.IntVar(&o.cluster.MaxNumSeqs, "worker-max-num-seqs", o.cluster.MaxNumSeqs, "requests running at once on a worker")
	f.Uint64Var(&o.cluster.MaxNumBatchedTokens, "worker-max-num-batched-tokens", o.cluster.MaxNumBatchedTokens, "tokens a step may compute (iteration; the simple engine's prefill backlog); reported to the router for its busy and queue thresholds")
	for _, t := range []struct {
		name, medium string
		cfg          *cluster.TierConfig
		gb           *float64
		gbps         float64
		source       string
	}{{"host", "host memory (Dynamo's host_pinned tier, KVBM's G2)", &o.host, &o.hostGB, cluster.DefaultHostGBps, "PCIe Gen4 x16"},
		{"disk", "local disk (Dynamo's disk tier, KVBM's G3), below the host tier if any", &o.disk, &o.diskGB, cluster.DefaultDiskGBps, "one local NVMe"}} {
		f.Uint64Var(&t.cfg.KVTokens, t.name+"-kv-tokens", 0, "iteration engine: a lower KV tier in "+t.medium+" on each rank, this many tokens (whole blocks); the GPU's evicted blocks are written to it and restored from it (0 = none; docs/replay.md, \"KV offload tiers\")")
		f.Float64Var(t.gb, t.name+"-kv-gb", 0, "the "+t.name+" tier's capacity in GB (1e9 bytes) instead of --"+t.name+"-kv-tokens, in tokens by the engine profile's model shape (0 = none)")
		f.Float64Var(&t.cfg.ReadGBps, t.name+"-read-gbps", t.gbps, "the "+t.name+" tier's bandwidth to the GPU, a restore's, in GB/s (Dynamo's mocker's default: "+t.source+")")
		f.Float64Var(&t.cfg.WriteGBps, t.name+"-write-gbps", t.gbps, "the "+t.name+" tier's write bandwidth, an offload's, in GB/s (Dynamo's mocker's default: "+t.source+")")
	}
	f.StringVar(&o.cluster.Engine, "engine", o.cluster.Engine, "worker model: iteration (vLLM's scheduler step by step, timed by --engine-profile) or simple (a FIFO prefill server and a fixed time per token)")
	f.StringVar(&o.profileFile, "engine-profile", "", "iteration engine: the step-time profile: a shipped one's name ("+strings.Join(cluster.ShippedProfiles(), ", ")+") or a JSON file (default: "+cluster.DefaultProfileName+"; docs/replay.md)")
	f.StringVar(&o.clusterFile, "cluster", "", "a cluster file (YAML or JSON): an aggregated cluster of pools of workers, each with its own engine profile, count, KV cache and tiers, in place of the one-pool --workers and --worker-* flags (docs/replay.md, \"Mixed hardware\")")
	f.Float64Var(&o.cluster.PrefillTokensPerMS, "worker-prefill-tokens-per-ms", o.cluster.PrefillTokensPerMS, "simple engine: prefill speed for uncached tokens")
	f.Float64Var(&o.cluster.DecodeMSPerToken, "worker-decode-ms-per-token", o.cluster.DecodeMSPerToken, "simple engine: decode time per output token after the first (prefill makes the first, as in vLLM)")
	f.StringVar(&o.builtin, "workload", "chat", "the built-in workload, run when no trace and no synthetic workload is given: chat (multi-turn chat sessions, --sessions) or agentic (coding-agent plays: a shared system prompt and tool schema, growing contexts, tool waits, subagents; --plays, --subagent-context; docs/replay.md)")
	f.IntVar(&o.workload.BuiltinSessions, "sessions", o.workload.BuiltinSessions, "sessions of the built-in chat workload (only when no trace and no synthetic workload is given)")
	f.IntVar(&o.plays, "plays", 80, "agent plays of the built-in agentic workload (--workload agentic), a few dozen requests each")
	f.StringVar(&o.subagents, "subagent-context", "fork", "the built-in agentic workload's subagents: fork (start from the main agent's context, its answer and their task) or fresh (from the shared system prompt and their task alone, as the SemiAnalysis AgentX corpora record them)")
	f.IntVar(&o.workload.BuiltinLoRAAdapters, "builtin-lora-adapters", 0, "built-in workload: LoRA adapters lora-0 to lora-{N-1} its sessions run under, half of the sessions under none (the base model), the first adapters the most used; each adapter salts its prompts' blocks, so its sessions share no cache with another's (0 = none)")
	f.IntVar(&o.maxLoRAs, "max-gpu-lora-count", protocol.DefaultLoRACapacity, "LoRA adapters each simulated worker holds at once, as vLLM's --max-loras (Dynamo's max_gpu_lora_count, whose default this is): the router sends a request under an adapter to a worker that has it loaded or room to load it; 0 = a worker loads none. Sent in worker_ready only when a request names an adapter (lora_name)")
	f.Float64Var(&o.workload.ArrivalSpeedupRatio, "arrival-speedup-ratio", 1, "arrivals (from the first) and think times divided by this: 2 = twice the load (open loop only)")
	f.IntVar(&o.workload.ReplayConcurrency, "replay-concurrency", 0, "closed loop: this many sessions in flight, the next starting when one ends, timestamps ignored (0 = open loop)")
	f.Float64Var(&o.workload.BenchmarkDurationS, "benchmark-duration", 0, "closed loop: recycle the plays (or sessions) for this many simulated seconds, as AIPerf's --benchmark-duration: past the trace's last play the lanes start its plays again as new instances, until one opens at the duration; each contender runs the plays it gets through, so no baseline is measured against (0 = one pass; docs/replay.md)")
	f.Uint64Var(&o.synthetic.InputTokens, "input-tokens", 0, "synthetic workload: input tokens per request")
	f.Uint64Var(&o.synthetic.OutputTokens, "output-tokens", 0, "synthetic workload: output tokens per request")
	f.IntVar(&o.synthetic.RequestCount, "request-count", 0, "synthetic workload: requests")
	f.Float64Var(&o.synthetic.ArrivalIntervalMS, "arrival-interval-ms", 0, "synthetic workload: ms between arrivals (0 = all at once)")
	f.Float64Var(&o.synthetic.SharedPrefixRatio, "shared-prefix-ratio", 0, "synthetic workload: fraction of each prompt shared with its prefix group")
	f.IntVar(&o.synthetic.NumPrefixGroups, "num-prefix-groups", 0, "synthetic workload: prefix groups (0 = no sharing)")
	f.StringSliceVar(&o.goodput, "goodput", nil, "service levels for request_goodput, as vLLM's benchmark takes them: ttft:MS tpot:MS e2el:MS")
	f.BoolVar(&o.compare, "compare", false, "run kv and the baselines (round_robin, random, least_loaded) side by side; same as --policies kv,round_robin,random,least_loaded")
	f.StringSliceVar(&o.policies, "policies", nil, "run these policies side by side (comma-separated: "+replayPolicyList()+"; direct needs a worker named per request, which traces do not carry)")
	f.StringArrayVar(&o.contenders, "contender", nil, "a contender to set beside the others: [NAME=]POLICY[:KEY=VALUE,...], KEY a config-file key (e.g. kv-scale4=kv:prefill_load_scale=4, kv-hard=kv:affinity.mode=hard); repeat the flag for more; after --compare's or --policies' if given")
	f.IntVar(&o.repeats, "repeats", 1, "run each contender this many times, repeat k at --seed + k (the router's ties and sampling, the built-in workload), and give means with 95% intervals")
	f.StringVar(&o.baseline, "baseline", "", "the contender the others are measured against, with ratios, intervals and verdicts (default round_robin when it runs; none otherwise)")
	f.IntVar(&o.jobs, "jobs", runtime.NumCPU(), "runs (contenders × repeats) at once; the output does not depend on it")
	f.StringVar(&o.reportFile, "report", "", "write the JSON report to this .json file, or - for stdout (the table then goes to stderr)")
	f.StringVar(&o.emitCommands, "emit-commands", "", "write every command sent to the router to this file (one policy only)")
	f.StringVar(&o.emitResponses, "emit-responses", "", "write every response the router gave to this file (one policy only)")
	f.StringVar(&o.requestsOut, "requests-out", "", "write one row per request per contender and repeat (pool, worker, tokens, latencies, preemptions, rejection) to this .csv or .jsonl file")
	f.StringVar(&o.plotFile, "plot", "", "draw the contenders side by side (their ratios to the baseline, hit rate, TTFT, hit rate over time, per-worker load) to this .png, .svg or .pdf")
	f.StringVar(&o.traceFormat, "trace-format", "auto", "the trace's format: auto (told from its first record, docs/replay.md), mooncake, mooncake-delta, weka, agentic_mooncake or dynamo (request-trace-v1, .jsonl or .jsonl.gz)")
	f.StringVar(&o.wekaBasis, "weka-nested-basis", "", "a Weka trace's subagent request times count from the play's start (absolute, as published AgentX traces) or from the subagent's marker (relative, as raw kv-cache-tester traces); default: what the file shows, refused if it shows neither")
	f.IntVar(&o.maxLineBytes, "max-line-bytes", wire.DefaultMaxLineBytes, "a longer trace line is refused by its number (the trace is read as it streams, never whole)")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress bar")
	f.BoolVar(&o.robustness, "robustness", false, "also run every contender under each of five KV event channel faults (late by 1 s, reordered within 1 s, 10% lost, 10% duplicated, each worker's engine restarting once) and give each one's change against its own clean run, paired by repeat, with intervals under --repeats; --plot then draws them (docs/replay.md, \"Signals as deployed\")")
	f.BoolVar(&o.capacity, "capacity", false, "also search each contender's capacity at SLO: the highest offered rate at which the share of requests meeting every --goodput level stays >= --attainment (needs --goodput; without contenders named, runs --compare's four; --plot then draws TTFT and attainment against offered load)")
	f.Float64Var(&o.search.Attainment, "attainment", replay.DefaultCapacityAttainment, "with --capacity: the share of requests offered that must meet every --goodput level (rejected and unfinished ones miss)")
	f.Float64Var(&o.search.Tolerance, "capacity-tolerance", replay.DefaultCapacityTolerance, "with --capacity: the relative width the search narrows each contender's bracket to (at most 12 probes a contender)")
	return cmd, o
}

// goodputKeys are the level names of vLLM's --goodput.
var goodputKeys = []string{"ttft:", "tpot:", "e2el:"}

// isLevel reports whether a word is a --goodput level (ttft:MS, ...).
func isLevel(arg string) bool {
	return slices.ContainsFunc(goodputKeys, func(k string) bool { return strings.HasPrefix(arg, k) })
}

// replayArgs takes at most one trace, and lets --goodput's levels follow it
// separated by spaces, as vLLM's benchmark takes them.
func replayArgs(cmd *cobra.Command, args []string) error {
	traces := slices.DeleteFunc(slices.Clone(args), isLevel)
	if len(traces) > 1 {
		return fmt.Errorf("replay takes at most one TRACE, got %q", traces)
	}
	if len(traces) < len(args) && !cmd.Flags().Changed("goodput") {
		return fmt.Errorf("%q looks like a --goodput level: give it after --goodput", args[slices.IndexFunc(args, isLevel)])
	}
	return nil
}

// replayPlan is a replay whose flags passed their checks: the trace (or
// none), the router config, the policies and the goodput levels.
type replayPlan struct {
	args       []string
	cfg        protocol.Config
	contenders []replay.Contender
	slo        replay.SLO
	format     replay.Format
	basis      replay.NestedBasis
}

// plan checks the flags and the config, as far as can be done without
// reading the trace; every error is one of the flags'.
func (o *replayOptions) plan(cmd *cobra.Command, args []string) (*replayPlan, error) {
	flags := cmd.Flags()
	for _, a := range args {
		if isLevel(a) {
			o.goodput = append(o.goodput, a)
		}
	}
	args = slices.DeleteFunc(args, isLevel)
	if flags.Changed("goodput") && len(o.goodput) == 0 {
		return nil, fmt.Errorf("--goodput is given no level: give ttft:MS, tpot:MS or e2el:MS (or drop it)")
	}
	if err := o.oneReaderOfStdin(args); err != nil {
		return nil, err
	}
	src, err := o.serve.configSource(flags)
	if err != nil {
		return nil, err
	}
	if err := o.check(flags, args); err != nil {
		return nil, err
	}
	format, basis, blockSize, err := o.traceShape(args)
	if err != nil {
		return nil, err
	}
	src.Defaults = append(src.Defaults, wire.Override{Key: "block_size", Value: blockSize})
	cfg, err := src.Load()
	if err != nil {
		return nil, err
	}
	if !cfg.KVEvents && (!o.signals.Perfect() || o.robustness) {
		return nil, fmt.Errorf("the --event-* and --engine-restart flags and --robustness shape the KV event channel, and --kv-events=false sends no events: drop one of them")
	}
	if cfg.WorkerDefaults != (protocol.WorkerDefaults{}) {
		return nil, fmt.Errorf("config worker_defaults: replay announces its own workers (--workers and the --worker-* flags), as aggregated single-rank workers; drop worker_defaults")
	}
	contenders, err := o.contenderSet(src, cfg)
	if err != nil {
		return nil, err
	}
	if err := o.checkComparison(flags, contenders); err != nil {
		return nil, err
	}
	slo, err := replay.ParseSLO(o.goodput)
	if err != nil {
		return nil, err
	}
	o.cluster.BlockSize = cfg.BlockSize
	if err := o.cluster.SizeKV(); err != nil {
		if o.clusterFile != "" {
			return nil, fmt.Errorf("--cluster %s: %w", o.clusterFile, err)
		}
		return nil, clusterFlagError(err)
	}
	return &replayPlan{args: args, cfg: cfg, contenders: contenders, slo: slo, format: format, basis: basis}, nil
}

// traceShape reads --trace-format and --weka-nested-basis, and a trace
// file's own block size, which is then the default block size: a trace's
// is authoritative (its reader refuses a --block-size that differs). Of a
// trace on stdin nothing can be read ahead: its reader tells its format
// and refuses a block size that is not its own, naming it.
func (o *replayOptions) traceShape(args []string) (replay.Format, replay.NestedBasis, uint64, error) {
	format, err := replay.ParseFormat(o.traceFormat)
	if err != nil {
		return "", "", 0, err
	}
	basis, err := replay.ParseNestedBasis(o.wekaBasis)
	if err != nil {
		return "", "", 0, err
	}
	if len(args) != 1 {
		if o.traceFormat != "auto" || basis != replay.BasisFromFile {
			return "", "", 0, fmt.Errorf("--trace-format and --weka-nested-basis describe a trace file: give one, or drop them")
		}
		return format, basis, replayBlockSize, nil
	}
	blockSize := uint64(replayBlockSize)
	shown := format
	if args[0] != "-" {
		// What the first record cannot tell, its reader refuses, by line.
		if f, embedded, err := replay.SniffTrace(args[0], format, o.maxLineBytes); err == nil {
			shown = f
			if embedded > 0 {
				blockSize = embedded
			}
		}
	}
	if basis != replay.BasisFromFile && shown != replay.FormatWeka && shown != replay.FormatAuto {
		return "", "", 0, fmt.Errorf("--weka-nested-basis %s: the trace is %s, not weka", basis, shown)
	}
	return format, basis, blockSize, nil
}

// experiment is the replay the flags describe, checked as far as can be
// without reading the trace.
func (o *replayOptions) experiment(cmd *cobra.Command, args []string) (*replay.Experiment, error) {
	pl, err := o.plan(cmd, args)
	if err != nil {
		return nil, err
	}
	e := &replay.Experiment{Workload: o.workload, MaxLineBytes: o.maxLineBytes, Cluster: o.cluster, Replicas: o.replicas, Signals: o.signals,
		Router: pl.cfg, Goodput: pl.slo, Contenders: pl.contenders, Repeats: o.repeats, Baseline: o.baseline, Jobs: o.jobs}
	if len(pl.args) == 1 {
		e.TracePath, e.TraceFormat, e.WekaBasis = pl.args[0], pl.format, pl.basis
	}
	return e, nil
}

func runReplay(cmd *cobra.Command, o *replayOptions, args []string) (err error) {
	collectUnlessSet(replayGCPercent)
	ctx := cmd.Context()
	exp, err := o.experiment(cmd, args)
	if err != nil {
		return &exitError{2, err}
	}
	if o.cpuProfile != "" {
		stopProfile, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			return &exitError{2, err}
		}
		defer stopProfile()
	}
	trace, info, base, err := o.load(exp)
	if err != nil {
		return &exitError{2, err}
	}
	table, out := cmd.OutOrStdout(), cmd.OutOrStdout()
	if o.reportFile == "-" {
		table = cmd.ErrOrStderr()
	}
	title := describe(exp.TracePath, &o.workload)
	if _, err := fmt.Fprintf(table, "replay of %s: %d requests%s%s on %s%s\n\n", title, len(trace), describeAdapters(info), describeRecycling(&o.workload), o.describeCluster(), describeRepeats(exp)); err != nil {
		return &exitError{1, fmt.Errorf("writing the table: %w", err)}
	}
	streams, open, err := o.openStreams()
	if err != nil {
		return &exitError{1, err}
	}
	exp.Streams = streams
	if !o.quiet && isatty.IsTerminal(os.Stderr.Fd()) {
		exp.Progress = progressBar
	}
	rows, err := o.openRows(exp)
	if err != nil {
		for _, s := range open {
			s.f.Discard()
		}
		return &exitError{1, err}
	}
	streamed := false // the streamed run ended whole, whatever became of the others
	exp.StreamsDone = func() { streamed = true }
	rep, results, err := exp.Run(ctx, trace, info)
	for _, s := range open {
		cut := err
		if streamed {
			cut = nil
		}
		err = errors.Join(err, s.close(ctx, cut))
	}
	if err == nil && o.capacity {
		rep.Deterministic.Capacity, err = exp.Capacity(ctx, base, o.search)
	}
	if err == nil && o.robustness {
		workers := o.cluster.Workers
		if o.cluster.Disaggregated() {
			workers = o.cluster.PrefillWorkers
		}
		rep.Deterministic.Robustness, err = exp.Robustness(ctx, trace, info, rep, replay.RobustnessFaults(trace, workers, o.workload.ReplayConcurrency > 0))
	}
	if err == nil && signalOf(ctx) != 0 { // after the last command: the outputs are not written all the same
		err = fmt.Errorf("after the runs: %w", replay.ErrStopped)
	}
	if err != nil {
		if rows != nil {
			rows.Discard()
		}
		return replayFailed(ctx, err)
	}
	rep.Run.ToolVersion = toolVersion()
	// The files first: a table cut by its reader (| head) still leaves
	// them whole.
	if rows != nil {
		err = rows.Commit()
	}
	if err == nil {
		err = o.writeReport(rep, out)
	}
	switch {
	case err == nil && o.plotFile != "" && o.capacity:
		err = figure.SaveCapacity(o.plotFile, "capacity at SLO: "+title, rep.Deterministic.Capacity, exp.Goodput)
	case err == nil && o.plotFile != "" && o.robustness:
		err = figure.SaveRobustness(o.plotFile, "robustness to the KV event channel: "+title, rep.Deterministic.Robustness)
	case err == nil && o.plotFile != "":
		err = figure.SaveReplay(o.plotFile, "replay of "+title, rep, results)
	}
	terr := replay.WriteTable(table, rep)
	if terr == nil && o.capacity {
		terr = replay.WriteCapacityTable(table, rep.Deterministic.Capacity, exp.Goodput)
	}
	if terr == nil && o.robustness {
		terr = replay.WriteRobustnessTable(table, rep.Deterministic.Robustness, exp.Goodput.Set())
	}
	if terr != nil {
		err = errors.Join(err, fmt.Errorf("writing the table: %w", terr))
	}
	if err != nil {
		return &exitError{1, err}
	}
	return nil
}

// load makes the requests to replay; with --capacity also the requests as
// stamped, the search's base, from which the replay's are shaped (so that
// a trace on stdin is read once), its rate checked.
func (o *replayOptions) load(exp *replay.Experiment) (trace []replay.Request, info replay.TraceInfo, base []replay.Request, err error) {
	if !o.capacity {
		trace, info, err = exp.Load()
		return trace, info, nil, err
	}
	if base, info, err = exp.LoadUnshaped(); err != nil {
		return nil, info, nil, err
	}
	if _, err = exp.UnitRate(base); err != nil {
		return nil, info, nil, fmt.Errorf("--capacity: %w", err)
	}
	return replay.Shaped(base, exp.Workload.ArrivalSpeedupRatio), info, base, nil
}

// openRows starts the --requests-out file, if asked, and has the
// experiment write each contender's rows into it as its run ends: nothing
// is at the path until the caller commits it.
func (o *replayOptions) openRows(exp *replay.Experiment) (*outfile.File, error) {
	if o.requestsOut == "" {
		return nil, nil
	}
	f, err := outfile.Create(o.requestsOut)
	if err != nil {
		return nil, err
	}
	rw, err := replay.NewRecordWriter(f, rowsFormat(o.requestsOut))
	if err != nil {
		f.Discard()
		return nil, fmt.Errorf("--requests-out %s: %w", o.requestsOut, err)
	}
	exp.Records = rw.Write
	return f, nil
}

// rowsFormat is a --requests-out file's format, by its extension.
func rowsFormat(path string) string { return strings.ToLower(filepath.Ext(path)) }

// progressBar is a contender's bar on a terminal.
func progressBar(contender string, total int) func(done, total int) {
	bar := progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription("replay "+contender), progressbar.OptionShowCount(),
		progressbar.OptionThrottle(100e6), progressbar.OptionClearOnFinish())
	return func(done, total int) {
		bar.Set(done)
		if done == total {
			bar.Finish()
		}
	}
}

// openStreams opens the --emit-commands and --emit-responses files: one
// stream per router, FILE.prefill and FILE.decode, disaggregated.
func (o *replayOptions) openStreams() (replay.Streams, []*emitStream, error) {
	var s replay.Streams
	type stream struct {
		path string
		to   *io.Writer
	}
	streams := []stream{{o.emitCommands, &s.Commands}, {o.emitResponses, &s.Responses}}
	if o.cluster.Disaggregated() {
		streams = []stream{{o.emitCommands + ".prefill", &s.Commands}, {o.emitResponses + ".prefill", &s.Responses},
			{o.emitCommands + ".decode", &s.DecodeCommands}, {o.emitResponses + ".decode", &s.DecodeResponses}}
	}
	var open []*emitStream
	for _, out := range streams {
		if out.path == "" || out.path == ".prefill" || out.path == ".decode" {
			continue
		}
		f, err := createStream(out.path)
		if err != nil {
			for _, s := range open {
				s.f.Discard()
			}
			return s, nil, err
		}
		open = append(open, f)
		*out.to = f
	}
	return s, open, nil
}

// replayFailed is the exit of a run that did not end: 128+n when signal n
// stopped it, else 1 (the flags were good: the run itself failed).
func replayFailed(ctx context.Context, err error) error {
	if sig := signalOf(ctx); sig != 0 && errors.Is(err, replay.ErrStopped) {
		return &exitError{exitCodeFor(sig), fmt.Errorf("%s; no report, figure or rows were written", strings.Replace(err.Error(), replay.ErrStopped.Error(), "stopped by "+unix.SignalName(sig), 1))}
	}
	return &exitError{1, err}
}

// writeReport writes the JSON report where --report says, if it does.
func (o *replayOptions) writeReport(rep *replay.Report, stdout io.Writer) error {
	if o.reportFile == "" {
		return nil
	}
	data, err := rep.Encode()
	if err != nil {
		return err
	}
	if o.reportFile == "-" {
		if _, err = stdout.Write(data); err != nil {
			return fmt.Errorf("writing the report to stdout: %w", err)
		}
		return nil
	}
	return outfile.Write(o.reportFile, data)
}

// oneReaderOfStdin refuses a trace read from stdin (-) beside a config or
// profile file that is stdin too: each would get part of it, or none.
func (o *replayOptions) oneReaderOfStdin(args []string) error {
	if len(args) != 1 || args[0] != "-" {
		return nil
	}
	in, err := os.Stdin.Stat()
	if err != nil {
		return nil // no stdin to share
	}
	for _, f := range []output{{"--config", o.serve.configFile}, {"--router-policy-config", o.serve.policyConfig}, {"--engine-profile", o.profileFile}} {
		if f.path == "" {
			continue
		}
		if st, err := os.Stat(f.path); err == nil && os.SameFile(st, in) {
			return fmt.Errorf("%s %s is stdin, from which the trace (-) is read: give the trace or %s as a file", f.flag, f.path, f.flag)
		}
	}
	return nil
}

// check refuses, before anything runs, what the run would ignore or could
// not write.
func (o *replayOptions) check(flags *pflag.FlagSet, args []string) error {
	synthetic := slices.ContainsFunc([]string{"input-tokens", "output-tokens", "request-count", "arrival-interval-ms",
		"shared-prefix-ratio", "num-prefix-groups"}, flags.Changed)
	switch {
	case len(args) == 1 && synthetic:
		return fmt.Errorf("a trace is given: the synthetic workload's flags (--input-tokens, ...) do not apply")
	case (len(args) == 1 || synthetic) && flags.Changed("sessions"):
		return fmt.Errorf("--sessions sizes the built-in workload, which does not run when a trace or a synthetic workload is given")
	case (len(args) == 1 || synthetic) && flags.Changed("builtin-lora-adapters"):
		return fmt.Errorf("--builtin-lora-adapters shapes the built-in workload, which does not run when a trace or a synthetic workload is given (a trace names its adapters in lora_name)")
	case o.builtin != "chat" && o.builtin != "agentic":
		return fmt.Errorf("--workload %q: expected chat or agentic", o.builtin)
	case o.subagents != "fork" && o.subagents != "fresh":
		return fmt.Errorf("--subagent-context %q: expected fork or fresh", o.subagents)
	case (len(args) == 1 || synthetic) && (flags.Changed("workload") || flags.Changed("plays") || flags.Changed("subagent-context")):
		return fmt.Errorf("--workload, --plays and --subagent-context pick and shape the built-in workload, which does not run when a trace or a synthetic workload is given")
	case o.builtin == "chat" && (flags.Changed("plays") || flags.Changed("subagent-context")):
		return fmt.Errorf("--plays and --subagent-context shape the built-in agentic workload: give --workload agentic too")
	case o.builtin == "agentic" && (flags.Changed("sessions") || flags.Changed("builtin-lora-adapters")):
		return fmt.Errorf("--sessions and --builtin-lora-adapters shape the built-in chat workload; the agentic one (--workload agentic) is sized by --plays")
	case synthetic:
		if err := o.synthetic.Check(); err != nil {
			return err
		}
		o.workload.Synthetic, o.workload.BuiltinSessions = &o.synthetic, 0
	case len(args) == 1:
		o.workload.BuiltinSessions = 0
	case o.builtin == "agentic":
		if o.plays < 1 || o.plays > maxPlays {
			return fmt.Errorf("--plays %d: expected 1 to %d (each play's requests are held in memory)", o.plays, maxPlays)
		}
		o.workload.BuiltinSessions, o.workload.BuiltinPlays = 0, o.plays
		o.workload.BuiltinFreshSubagents = o.subagents == "fresh"
	case o.workload.BuiltinSessions < 1:
		return fmt.Errorf("--sessions %d: the built-in workload needs at least 1 session", o.workload.BuiltinSessions)
	}
	if o.maxLineBytes < 1 {
		return fmt.Errorf("--max-line-bytes %d: expected at least 1 byte", o.maxLineBytes)
	}
	if o.workload.BuiltinSessions > maxSessions {
		return fmt.Errorf("--sessions %d: at most %d (a few requests each, held in memory)", o.workload.BuiltinSessions, maxSessions)
	}
	if n := o.workload.BuiltinLoRAAdapters; n < 0 || n > protocol.MaxLoRACount {
		return fmt.Errorf("--builtin-lora-adapters %d: expected 0 to %d", n, protocol.MaxLoRACount)
	}
	if flags.Changed("max-gpu-lora-count") {
		o.cluster.MaxGPULoRACount = &o.maxLoRAs
	}
	w := &o.workload
	if !(w.ArrivalSpeedupRatio >= 1e-9 && w.ArrivalSpeedupRatio <= 1e9) {
		return fmt.Errorf("--arrival-speedup-ratio %v: expected a number from 1e-9 to 1e9", w.ArrivalSpeedupRatio)
	}
	if w.ReplayConcurrency < 0 {
		return fmt.Errorf("--replay-concurrency %d: expected 1 or more (0 = open loop)", w.ReplayConcurrency)
	}
	if d := w.BenchmarkDurationS; d != 0 {
		switch {
		case !(d > 0 && d <= protocol.MaxNumber/2000):
			return fmt.Errorf("--benchmark-duration %v: expected seconds above 0, at most 2^52 ms", d)
		case w.ReplayConcurrency == 0:
			return fmt.Errorf("--benchmark-duration recycles the plays of a closed loop: give --replay-concurrency N too")
		case flags.Changed("baseline") || o.robustness || o.capacity:
			return fmt.Errorf("--benchmark-duration has each contender run the plays it gets through, not the same requests: drop --baseline, --robustness and --capacity, which pair their runs request by request")
		}
	}
	if w.ReplayConcurrency > 0 && (flags.Changed("arrival-speedup-ratio") || flags.Changed("arrival-interval-ms")) {
		return fmt.Errorf("--replay-concurrency runs a closed loop, where arrival times do not apply: drop --arrival-speedup-ratio and --arrival-interval-ms")
	}
	if err := o.checkCapacity(flags); err != nil {
		return err
	}
	if o.compare && flags.Changed("policies") {
		return fmt.Errorf("--compare is --policies kv,round_robin,random,least_loaded: give one of them")
	}
	if (o.compare || flags.Changed("policies") || flags.Changed("contender")) && (flags.Changed("policy") || flags.Changed("router-mode")) {
		return fmt.Errorf("--policy picks one policy, and --compare, --policies or --contender what to compare: give one of them")
	}
	if o.compare || len(o.policies)+len(o.contenders) > 1 {
		for _, name := range []string{"emit-commands", "emit-responses"} {
			if flags.Changed(name) {
				return fmt.Errorf("--%s writes the stream of one policy, and several run: give one --policy", name)
			}
		}
	}
	if flags.Changed("cluster") {
		if o.clusterFile == "" {
			return fmt.Errorf("--cluster: give a cluster file's path")
		}
		if err := o.readClusterFile(flags); err != nil {
			return err
		}
	} else {
		if err := o.checkEngine(flags); err != nil {
			return err
		}
		if err := o.checkPools(flags); err != nil {
			return err
		}
		if err := o.checkKV(flags); err != nil {
			return err
		}
	}
	if err := o.checkReplicas(flags); err != nil {
		return err
	}
	if err := o.checkSignals(flags); err != nil {
		return err
	}
	if err := o.cluster.Check(); err != nil {
		var fe *cluster.FieldError
		if o.clusterFile != "" && errors.As(err, &fe) && fe.Field == "workers" {
			return fmt.Errorf("--cluster %s: its pools' %w", o.clusterFile, err)
		}
		return clusterFlagError(err)
	}
	if o.plotFile != "" {
		if err := figure.CheckFormat(o.plotFile); err != nil {
			return err
		}
	}
	if o.reportFile != "" && o.reportFile != "-" && strings.ToLower(filepath.Ext(o.reportFile)) != ".json" {
		return fmt.Errorf("--report %s: the file must end in .json (or be - for stdout)", o.reportFile)
	}
	if f := rowsFormat(o.requestsOut); o.requestsOut != "" && o.requestsOut != "-" && f != replay.RecordsCSV && f != replay.RecordsJSONL {
		return fmt.Errorf("--requests-out %s: the file must end in .csv or .jsonl", o.requestsOut)
	}
	var inputs []output
	if len(args) == 1 && args[0] != "-" {
		inputs = append(inputs, output{"the trace", args[0]})
	}
	if o.profileFile != "" {
		inputs = append(inputs, output{"--engine-profile", o.profileFile})
	}
	if o.clusterFile != "" {
		inputs = append(inputs, output{"--cluster", o.clusterFile})
	}
	if o.serve.configFile != "" {
		inputs = append(inputs, output{"--config", o.serve.configFile})
	}
	if o.serve.policyConfig != "" {
		inputs = append(inputs, output{"--router-policy-config", o.serve.policyConfig})
	}
	outs := []output{{"report", o.reportFile}, {"plot", o.plotFile}, {"requests-out", o.requestsOut}}
	for _, stream := range []output{{"emit-commands", o.emitCommands}, {"emit-responses", o.emitResponses}} {
		switch {
		case stream.path == "" || !o.cluster.Disaggregated():
			outs = append(outs, stream)
		default: // one file per router, as run writes them
			outs = append(outs, output{stream.flag, stream.path + ".prefill"}, output{stream.flag, stream.path + ".decode"})
		}
	}
	return checkOutputs(inputs, outs)
}

// checkCapacity checks --capacity's flags: its own only with it, the
// goodput levels it measures, an open loop with a rate to scale; without
// contenders named it runs --compare's four, round_robin the baseline.
func (o *replayOptions) checkCapacity(flags *pflag.FlagSet) error {
	if !o.capacity {
		for _, name := range []string{"attainment", "capacity-tolerance"} {
			if flags.Changed(name) {
				return fmt.Errorf("--%s shapes the capacity search: give --capacity too", name)
			}
		}
		return nil
	}
	switch {
	case len(o.goodput) == 0:
		return fmt.Errorf("--capacity measures the share of requests meeting --goodput's levels: give --goodput ttft:MS tpot:MS (e2el:MS)")
	case o.workload.ReplayConcurrency > 0:
		return fmt.Errorf("--capacity scales the offered rate, which the closed loop of --replay-concurrency does not have: drop one of them")
	case o.workload.Synthetic != nil && o.synthetic.ArrivalIntervalMS == 0:
		return fmt.Errorf("--arrival-interval-ms 0 sends every request at once: --capacity needs a rate to scale (give an interval)")
	}
	if err := o.search.Check(); err != nil {
		return err
	}
	if !slices.ContainsFunc([]string{"policy", "router-mode", "policies", "compare", "contender"}, flags.Changed) {
		o.compare = true
	}
	return nil
}

// checkEngine refuses the flags of the engine not chosen, and loads the
// iteration engine's profile.
func (o *replayOptions) checkEngine(flags *pflag.FlagSet) error {
	switch o.cluster.Engine {
	case cluster.EngineSimple:
		if flags.Changed("engine-profile") {
			return fmt.Errorf("--engine-profile times the iteration engine, and --engine simple runs: drop one of them")
		}
		o.cluster.Profile = nil
		return nil
	case cluster.EngineIteration:
	default:
		return fmt.Errorf("--engine %q: expected iteration or simple", o.cluster.Engine)
	}
	if o.cluster.MaxNumBatchedTokens < 1 {
		return fmt.Errorf("--worker-max-num-batched-tokens 0: a step must compute at least one token")
	}
	for _, name := range []string{"worker-prefill-tokens-per-ms", "worker-decode-ms-per-token"} {
		if flags.Changed(name) {
			return fmt.Errorf("--%s sets the simple engine's speed; the iteration engine's steps are timed by --engine-profile (or give --engine simple)", name)
		}
	}
	p := cluster.DefaultProfile()
	if o.profileFile != "" {
		var err error
		if p, err = cluster.LoadProfile(o.profileFile, "."); err != nil {
			return fmt.Errorf("--engine-profile: %w", err)
		}
	}
	o.cluster.Profile = &p
	return nil
}

// checkSignals reads the event channel's flags: restarts need the
// iteration engine (and a worker the cluster has, which the run checks).
func (o *replayOptions) checkSignals(flags *pflag.FlagSet) error {
	s := &o.signals
	if err := s.Check(); err != nil {
		return err
	}
	restartable, pool := o.cluster.Workers, "workers"
	if o.cluster.Disaggregated() {
		restartable, pool = o.cluster.PrefillWorkers, "prefill workers (a decode worker's engine does not restart)"
	}
	for _, v := range o.restarts {
		r, err := replay.ParseRestart(v)
		if err != nil {
			return fmt.Errorf("--engine-restart %w", err)
		}
		if r.Worker > uint64(restartable) {
			return fmt.Errorf("--engine-restart %s: the cluster's %s are 1 to %d", v, pool, restartable)
		}
		s.Restarts = append(s.Restarts, r)
	}
	if !flags.Changed("event-dup-rate") && flags.Changed("event-dup-lag-ms") {
		return fmt.Errorf("--event-dup-lag-ms times the copies of --event-dup-rate: give it too")
	}
	switch {
	case o.robustness && !s.Perfect():
		return fmt.Errorf("--robustness runs its own faults against a clean channel: drop the --event-* and --engine-restart flags")
	case o.robustness && o.capacity:
		return fmt.Errorf("--robustness and --capacity each run every contender again: give one of them")
	case o.robustness && o.cluster.Engine != cluster.EngineIteration:
		return fmt.Errorf("--robustness restarts engines, which the iteration engine does: drop --engine simple")
	case s.Perfect():
		return nil
	case len(s.Restarts) > 0 && o.cluster.Engine != cluster.EngineIteration:
		return fmt.Errorf("--engine-restart restarts the iteration engine: drop --engine simple")
	}
	return nil
}

// onePoolFlags are the flags a cluster file's pools replace, with what to
// do instead.
var onePoolFlags = []struct{ flag, instead string }{
	{"workers", "give each pool's workers in the file"},
	{"engine-profile", "give each pool's profile in the file"},
	{"worker-kv-tokens", "give each pool's kv_tokens in the file"},
	{"worker-kv-blocks", "give each pool's kv_blocks in the file"},
	{"gpu-memory-utilization", "give each pool's gpu_memory_utilization in the file"},
	{"worker-max-num-seqs", "give each pool's max_num_seqs in the file"},
	{"worker-max-num-batched-tokens", "give each pool's max_num_batched_tokens in the file"},
	{"worker-prefill-tokens-per-ms", "a cluster file's pools run the iteration engine"},
	{"worker-decode-ms-per-token", "a cluster file's pools run the iteration engine"},
	{"prefill-workers", "a cluster file's pools are aggregated (disaggregated serving takes the one-pool flags)"},
	{"decode-workers", "a cluster file's pools are aggregated (disaggregated serving takes the one-pool flags)"},
	{"kv-transfer-gbps", "a cluster file's pools are aggregated (disaggregated serving takes the one-pool flags)"},
	{"host-kv-tokens", "give each pool's host_tier in the file"}, {"host-kv-gb", "give each pool's host_tier in the file"},
	{"host-read-gbps", "give each pool's host_tier in the file"}, {"host-write-gbps", "give each pool's host_tier in the file"},
	{"disk-kv-tokens", "give each pool's disk_tier in the file"}, {"disk-kv-gb", "give each pool's disk_tier in the file"},
	{"disk-read-gbps", "give each pool's disk_tier in the file"}, {"disk-write-gbps", "give each pool's disk_tier in the file"},
}

// readClusterFile reads --cluster into the cluster's hardware pools, which
// the one-pool flags would contradict; they are sized with the block size.
func (o *replayOptions) readClusterFile(flags *pflag.FlagSet) error {
	for _, f := range onePoolFlags {
		if flags.Changed(f.flag) {
			return fmt.Errorf("--cluster gives each pool's workers, profile, cache and tiers: drop --%s (%s)", f.flag, f.instead)
		}
	}
	if o.cluster.Engine != cluster.EngineIteration {
		return fmt.Errorf("--cluster runs the iteration engine, each pool by its profile: drop --engine %s", o.cluster.Engine)
	}
	data, err := readConfigFile("--cluster", o.clusterFile)
	if err != nil {
		return err
	}
	pools, description, err := cluster.ReadClusterFile(o.clusterFile, data)
	if err != nil {
		return fmt.Errorf("--cluster %s: %w", o.clusterFile, err)
	}
	c := &o.cluster
	c.Hardware, c.Description, c.Profile, c.Workers = pools, description, nil, 0
	for _, p := range pools {
		c.Workers += p.Workers
	}
	// Each pool has its own: none of the cluster's is read.
	c.KVTokens, c.KVSizing, c.TotalKVBlocks, c.GPUMemoryUtilization, c.MaxNumSeqs, c.MaxNumBatchedTokens = 0, "", 0, 0, 0, 0
	c.KVTransferGBps = 0 // aggregated: nothing crosses
	return nil
}

// checkPools checks a disaggregated cluster's flags: both pools, no
// --workers, the iteration engine with a model shape, a bandwidth.
func (o *replayOptions) checkPools(flags *pflag.FlagSet) error {
	c := &o.cluster
	prefill, decode := flags.Changed("prefill-workers"), flags.Changed("decode-workers")
	switch {
	case !prefill && !decode:
		if flags.Changed("kv-transfer-gbps") {
			return fmt.Errorf("--kv-transfer-gbps times a disaggregated cluster's KV transfer: give --prefill-workers and --decode-workers too")
		}
		c.KVTransferGBps = 0
		return nil
	case prefill != decode:
		return fmt.Errorf("--prefill-workers and --decode-workers go together: give both")
	case flags.Changed("workers"):
		return fmt.Errorf("--prefill-workers and --decode-workers replace --workers: drop it")
	case c.PrefillWorkers < 1 || c.DecodeWorkers < 1 || c.PrefillWorkers > protocol.MaxRanks || c.DecodeWorkers > protocol.MaxRanks:
		return fmt.Errorf("--prefill-workers %d, --decode-workers %d: expected 1 to %d each", c.PrefillWorkers, c.DecodeWorkers, protocol.MaxRanks)
	case c.Engine != cluster.EngineIteration:
		return fmt.Errorf("disaggregated serving runs the iteration engine: drop --engine simple")
	case c.Profile.CheckModel() != nil:
		return fmt.Errorf("disaggregated serving sizes the KV it sends by the profile's model shape: --engine-profile %s: %v", o.profileFile, c.Profile.CheckModel())
	case !(c.KVTransferGBps >= 1e-3 && c.KVTransferGBps <= 1e6):
		return fmt.Errorf("--kv-transfer-gbps %v: expected 0.001 to 1e6 GB/s", c.KVTransferGBps)
	}
	c.Workers = max(c.PrefillWorkers, c.DecodeWorkers) // for the checks on ranks a router holds
	return nil
}

// checkKV says how the KV cache is sized: --worker-kv-tokens (a number or
// auto) or --worker-kv-blocks, not both; --gpu-memory-utilization only
// with auto. Its blocks are made once the block size is known (SizeKV).
func (o *replayOptions) checkKV(flags *pflag.FlagSet) error {
	c := &o.cluster
	if err := o.checkTiers(flags); err != nil {
		return err
	}
	if flags.Changed("worker-kv-blocks") {
		if flags.Changed("worker-kv-tokens") {
			return fmt.Errorf("--worker-kv-blocks and --worker-kv-tokens both size the KV cache: give one of them")
		}
		c.KVSizing = cluster.KVSizingBlocks
	}
	if c.KVSizing != cluster.KVSizingProfile {
		if flags.Changed("gpu-memory-utilization") {
			return fmt.Errorf("--gpu-memory-utilization sizes the KV cache from the engine profile's memory: give --worker-kv-tokens auto too")
		}
		c.GPUMemoryUtilization = 0 // not used, not reported
	}
	return nil
}

// clusterFlags are the flags that set the cluster's fields, by the
// field's JSON key.
var clusterFlags = map[string]string{
	"workers": "workers", "dp_size": "dp-size", "dp_attention": "dp-attention", "worker_kv_blocks": "worker-kv-blocks", "worker_kv_tokens": "worker-kv-tokens",
	"worker_max_num_seqs": "worker-max-num-seqs", "worker_prefill_tokens_per_ms": "worker-prefill-tokens-per-ms",
	"worker_decode_ms_per_token": "worker-decode-ms-per-token", "max_gpu_lora_count": "max-gpu-lora-count",
	"gpu_memory_utilization": "gpu-memory-utilization",
	"host_tier.kv_tokens":    "host-kv-tokens", "host_tier.kv_bytes": "host-kv-gb", "host_tier.read_gbps": "host-read-gbps", "host_tier.write_gbps": "host-write-gbps",
	"disk_tier.kv_tokens": "disk-kv-tokens", "disk_tier.kv_bytes": "disk-kv-gb", "disk_tier.read_gbps": "disk-read-gbps", "disk_tier.write_gbps": "disk-write-gbps",
}

// clusterFlagError names the flag of a cluster field out of range.
func clusterFlagError(err error) error {
	var fe *cluster.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	flag, ok := clusterFlags[fe.Field]
	if !ok {
		return err
	}
	value := fe.Value
	if strings.HasSuffix(fe.Field, ".kv_bytes") {
		value = float64(fe.Value.(uint64)) / 1e9 // the flag's GB
	}
	return fmt.Errorf("--%s %v: expected %s", flag, value, fe.Want)
}

// checkTiers makes the cluster's lower tiers from their flags: a tier is
// on when its capacity is given, in tokens or GB.
func (o *replayOptions) checkTiers(flags *pflag.FlagSet) error {
	for _, t := range []struct {
		name string
		cfg  *cluster.TierConfig
		gb   float64
		to   **cluster.TierConfig
	}{{"host", &o.host, o.hostGB, &o.cluster.HostTier}, {"disk", &o.disk, o.diskGB, &o.cluster.DiskTier}} {
		tokens, gb := flags.Changed(t.name+"-kv-tokens"), flags.Changed(t.name+"-kv-gb")
		switch {
		case tokens && gb:
			return fmt.Errorf("--%s-kv-tokens and --%s-kv-gb both size the %s tier: give one of them", t.name, t.name, t.name)
		case gb && !(t.gb >= 0 && t.gb <= 1e9):
			return fmt.Errorf("--%s-kv-gb %v: expected 0 (no %s tier) to 1e9 GB", t.name, t.gb, t.name)
		case !tokens && !gb:
			for _, bw := range []string{"-read-gbps", "-write-gbps"} {
				if flags.Changed(t.name + bw) {
					return fmt.Errorf("--%s%s sets the %s tier's bandwidth: give its capacity too, --%s-kv-tokens or --%s-kv-gb", t.name, bw, t.name, t.name, t.name)
				}
			}
		}
		t.cfg.KVBytes = uint64(t.gb * 1e9)
		if t.cfg.KVTokens == 0 && t.cfg.KVBytes == 0 {
			continue // 0, as a sweep may give it: no tier
		}
		*t.to = t.cfg
	}
	return nil
}

// kvTokensFlag is --worker-kv-tokens: a number of tokens, or auto.
type kvTokensFlag struct{ c *cluster.Config }

func (f kvTokensFlag) String() string {
	if f.c.KVSizing == cluster.KVSizingProfile {
		return "auto"
	}
	return strconv.FormatUint(f.c.KVTokens, 10)
}

func (f kvTokensFlag) Set(s string) error {
	if s == "auto" {
		f.c.KVSizing = cluster.KVSizingProfile
		return nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("expected a number of tokens or auto")
	}
	f.c.KVTokens, f.c.KVSizing = n, cluster.KVSizingTokens
	return nil
}

func (kvTokensFlag) Type() string { return "tokens" }

// checkReplicas checks the router replicas' flags.
func (o *replayOptions) checkReplicas(flags *pflag.FlagSet) error {
	r := &o.replicas
	if r.Count == 1 {
		for _, name := range []string{"replica-assign", "replica-sync-delay-ms", "replica-sync-rate"} {
			if flags.Changed(name) {
				return fmt.Errorf("--%s shapes several router replicas: give --router-replicas too", name)
			}
		}
		return nil
	}
	switch {
	case r.Count < 1 || r.Count > 64:
		return fmt.Errorf("--router-replicas %d: expected 1 to 64", r.Count)
	case r.Assign != replay.AssignRoundRobin && r.Assign != replay.AssignSession:
		return fmt.Errorf("--replica-assign %q: expected round_robin or session", r.Assign)
	case !(r.DelayMS >= 0 && r.DelayMS <= 1e9):
		return fmt.Errorf("--replica-sync-delay-ms %v: expected 0 to 1e9", r.DelayMS)
	case !(r.Rate >= 0 && r.Rate <= 1):
		return fmt.Errorf("--replica-sync-rate %v: expected 0 to 1", r.Rate)
	case o.emitCommands != "" || o.emitResponses != "":
		return fmt.Errorf("--emit-commands and --emit-responses write one router's stream: drop them with --router-replicas")
	}
	return nil
}

// output is a file a flag asks replay to write (or, as an input, what
// reads it).
type output struct{ flag, path string }

// checkOutputs makes sure, before anything runs, that each output can be
// written and that none of them is another or an input, however spelt:
// through links, by file identity where the file exists.
func checkOutputs(inputs, outs []output) error {
	var seen []placedFile
	for _, in := range inputs {
		seen = append(seen, place(in.flag, in.path))
	}
	for _, out := range outs {
		switch {
		case out.path == "":
			continue
		case out.path == "-" && out.flag == "report":
			continue // stdout
		case out.path == "-":
			return fmt.Errorf("--%s -: give a file (only --report writes to stdout)", out.flag)
		}
		f := place("--"+out.flag, out.path)
		for _, other := range seen {
			if f.same(other) {
				return fmt.Errorf("--%s %s is also %s: give each output its own file", out.flag, out.path, other.label)
			}
		}
		seen = append(seen, f)
		if err := writable(out.path); err != nil {
			return fmt.Errorf("--%s %s: %w", out.flag, out.path, err)
		}
	}
	return nil
}

// placedFile is where a path leads: the file, if it exists, and the path
// with its folder's links resolved.
type placedFile struct {
	label, path string
	info        os.FileInfo
}

func place(label, path string) placedFile {
	f := placedFile{label: label, path: path}
	if abs, err := filepath.Abs(path); err == nil {
		f.path = abs
		if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
			f.path = filepath.Join(dir, filepath.Base(abs))
		}
	}
	f.info, _ = os.Stat(path)
	return f
}

func (f placedFile) same(g placedFile) bool {
	if f.info != nil && g.info != nil {
		return os.SameFile(f.info, g.info)
	}
	return f.path == g.path
}

// writable checks that path is not a folder and that its folder takes the
// file, by starting it as the run will (beside it) and discarding it.
func writable(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("is a folder: give a file name")
	}
	f, err := outfile.Create(path)
	if err != nil {
		return err // names the path and why
	}
	f.Discard()
	return nil
}

// policyNames lists the policies for a message.
// policySet is the plain policies to run: --policies, --compare's four, or
// the config's one when no contender is given either.
func (o *replayOptions) policySet(configured protocol.Policy) ([]protocol.Policy, error) {
	if o.compare {
		return []protocol.Policy{protocol.PolicyKV, protocol.PolicyRoundRobin, protocol.PolicyRandom, protocol.PolicyLeastLoaded}, nil
	}
	if len(o.policies) == 0 {
		if len(o.contenders) > 0 {
			return nil, nil
		}
		return []protocol.Policy{configured}, nil
	}
	var out []protocol.Policy
	for _, name := range o.policies {
		p := protocol.Policy(name)
		c := protocol.DefaultConfig()
		c.Policy = p
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("--policies: %q is not a policy (%s)", name, replayPolicyList())
		}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("--policies: %s is given twice", name)
		}
		out = append(out, p)
	}
	return out, nil
}

// contenderSet is what the run sets side by side: the plain policies, then
// each --contender, its settings applied over the config's (file and
// flags) and checked as a config is.
func (o *replayOptions) contenderSet(src wire.ConfigSource, cfg protocol.Config) ([]replay.Contender, error) {
	// A run of the config alone is named after the policy its aggregated
	// role places with: worker_selection.default's instance's, when set.
	placesWith, _, _, _ := cfg.Selection(protocol.RoleAggregated)
	policies, err := o.policySet(placesWith)
	if err != nil {
		return nil, err
	}
	var out []replay.Contender
	for _, p := range policies {
		c := cfg
		c.Policy = p
		out = append(out, replay.Contender{Name: string(p), Router: c})
	}
	for _, text := range o.contenders {
		spec, err := replay.ParseContender(text)
		if err != nil {
			return nil, err
		}
		if i := slices.IndexFunc(out, func(c replay.Contender) bool { return c.Name == spec.Name }); i >= 0 {
			return nil, fmt.Errorf("--contender %q: a contender is already named %s: give it a name of its own (NAME=POLICY:...)", text, spec.Name)
		}
		for _, kv := range spec.Settings {
			key, _, _ := strings.Cut(kv, "=")
			for _, o := range src.Overrides {
				if key == o.Key || strings.HasPrefix(key, o.Key+".") || strings.HasPrefix(o.Key, key+".") {
					return nil, fmt.Errorf("--contender %q sets %s, which %s sets for every contender: give it in one place", text, key, o.Flag)
				}
			}
		}
		withIt := src
		withIt.Overrides = append(slices.Clone(src.Overrides), spec.Overrides()...)
		c, err := withIt.Load()
		if err != nil {
			return nil, err
		}
		out = append(out, replay.Contender{Name: spec.Name, Router: c, Overrides: spec.Settings})
	}
	if err := o.noDirect(out); err != nil {
		return nil, err
	}
	if o.compare || len(o.policies)+len(o.contenders) > 0 {
		for _, c := range out {
			// A worker_selection instance replaces the config's policy: the
			// comparison would run the instance's in every contender.
			if p, _, _, _ := c.Router.Selection(protocol.RoleAggregated); p != c.Router.Policy {
				return nil, fmt.Errorf("contender %s would place with worker_selection.default's instance %q (policy %s), not with %s: the instance is every contender's, so the comparison would compare nothing; drop worker_selection.default (--router-policy-config, --config) to compare policies",
					c.Name, c.Router.WorkerSelection.Default, p, c.Router.Policy)
			}
		}
	}
	return out, nil
}

// noDirect refuses a contender that would place with policy direct, in any
// role the cluster serves: direct sends a request to the worker it names,
// and a trace names none (Dynamo's direct mode refuses such a request,
// "worker ID required").
func (o *replayOptions) noDirect(contenders []replay.Contender) error {
	roles := []protocol.Role{protocol.RoleAggregated}
	if o.cluster.Disaggregated() {
		roles = []protocol.Role{protocol.RolePrefill, protocol.RoleDecode}
	}
	const why = "policy direct needs each request's worker_id, which replay traces do not carry; use --contender NAME=kv:... or another policy"
	for _, c := range contenders {
		for _, role := range roles {
			p, _, _, _ := c.Router.Selection(role)
			switch {
			case p != protocol.PolicyDirect:
			case c.Router.Policy == protocol.PolicyDirect:
				return fmt.Errorf("contender %s: %s", c.Name, why)
			default:
				return fmt.Errorf("contender %s places %s requests with a worker_selection instance of type direct: %s", c.Name, role, why)
			}
		}
	}
	return nil
}

// checkComparison checks --repeats, --jobs and --baseline, and picks the
// default baseline: round_robin when it runs beside others.
func (o *replayOptions) checkComparison(flags *pflag.FlagSet, contenders []replay.Contender) error {
	if o.repeats < 1 || o.repeats > maxRepeats {
		return fmt.Errorf("--repeats %d: expected 1 to %d", o.repeats, maxRepeats)
	}
	if o.jobs < 1 {
		return fmt.Errorf("--jobs %d: expected at least 1", o.jobs)
	}
	names := make([]string, len(contenders))
	for i, c := range contenders {
		names[i] = c.Name
	}
	switch {
	case flags.Changed("baseline") && !slices.Contains(names, o.baseline):
		return fmt.Errorf("--baseline %q: not a contender of this run (%s)", o.baseline, strings.Join(names, ", "))
	case flags.Changed("baseline") && len(contenders) < 2:
		return fmt.Errorf("--baseline %s: one contender runs, with nothing to measure against it: give --compare, --policies or --contender", o.baseline)
	case !flags.Changed("baseline") && len(contenders) > 1 && slices.Contains(names, string(protocol.PolicyRoundRobin)) && o.workload.BenchmarkDurationS == 0:
		o.baseline = string(protocol.PolicyRoundRobin)
	}
	return nil
}

// maxRepeats bounds --repeats: each is a full replay of every contender.
const maxRepeats = 1000

// describeCluster names the cluster for the table's first line.
func (o *replayOptions) describeCluster() string {
	c := &o.cluster
	s := fmt.Sprintf("%d workers", c.Workers)
	if len(c.Hardware) > 0 {
		names := make([]string, len(c.Hardware))
		for i, h := range c.Hardware {
			names[i] = fmt.Sprintf("%d %s", h.Workers, h.Name)
		}
		s = fmt.Sprintf("%d workers (%s)", c.Workers, strings.Join(names, ", "))
	}
	if c.Disaggregated() {
		s = fmt.Sprintf("%d prefill and %d decode workers", c.PrefillWorkers, c.DecodeWorkers)
	}
	if c.DPSize > 1 {
		s += fmt.Sprintf(" of %d DP ranks", c.DPSize)
	}
	if o.replicas.Count > 1 {
		s += fmt.Sprintf(", %d router replicas", o.replicas.Count)
	}
	if c.Description != "" {
		s += " (" + c.Description + ")"
	}
	return s
}

// describeRepeats names the repeats for the table's first line.
func describeRepeats(e *replay.Experiment) string {
	if e.Repeats < 2 {
		return ""
	}
	s := fmt.Sprintf("; %d repeats, seeds %d to %d", e.Repeats, e.Router.Seed, e.Router.Seed+uint64(e.Repeats-1))
	if e.TracePath == "" {
		s += " (the workload is made anew at each; this count is seed " + fmt.Sprint(e.Router.Seed) + "'s)"
	}
	return s
}

// describeRecycling says, for the table's first line, that the plays are
// recycled, if they are.
func describeRecycling(w *replay.Workload) string {
	if w.BenchmarkDurationS == 0 {
		return ""
	}
	lanes := "lanes"
	if w.ReplayConcurrency == 1 {
		lanes = "lane"
	}
	return fmt.Sprintf(" a pass, recycled for %g s by %d %s (each contender runs the plays it gets through: completed says how many requests)", w.BenchmarkDurationS, w.ReplayConcurrency, lanes)
}

// describeAdapters says, for the table's first line, how many requests ran
// under LoRA adapters, if any did.
func describeAdapters(info replay.TraceInfo) string {
	if info.LoRARequests == 0 {
		return ""
	}
	noun := "adapters"
	if info.LoRAAdapters == 1 {
		noun = "adapter"
	}
	return fmt.Sprintf(" (%d under %d LoRA %s)", info.LoRARequests, info.LoRAAdapters, noun)
}

// describe names the workload for the table's first line.
func describe(tracePath string, w *replay.Workload) string {
	switch {
	case w.Synthetic != nil:
		s := w.Synthetic
		return fmt.Sprintf("a synthetic workload (%d requests of %d input and %d output tokens)", s.RequestCount, s.InputTokens, s.OutputTokens)
	case tracePath == "" && w.BuiltinPlays > 0:
		s := fmt.Sprintf("the built-in agentic workload (%d plays", w.BuiltinPlays)
		if w.BuiltinFreshSubagents {
			s += ", fresh-context subagents"
		}
		return s + ")"
	case tracePath == "":
		return fmt.Sprintf("the built-in workload (%d sessions)", w.BuiltinSessions)
	}
	return tracePath
}
