package main

import (
	"fmt"
	"io"
	"os"

	"github.com/goccy/go-json"
	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
)

type replayOptions struct {
	serve         serveOptions // the router's config file and flags (bindConfig only)
	cluster       replay.ClusterConfig
	sessions      int
	compare       bool
	reportFile    string
	emitCommands  string
	emitResponses string
	plotFile      string
	quiet         bool
}

func newReplayCommand() *cobra.Command {
	o := &replayOptions{cluster: replay.DefaultCluster(8)}
	cmd := &cobra.Command{
		Use:   "replay [TRACE]",
		Short: "Replay a trace (or the built-in workload) through the router and a simulated cluster",
		Long: `Replays a Mooncake-style JSONL trace (timestamp ms, input_length, output_length,
hash_ids at --block-size tokens per block; optional session_id, and delay_ms for
a session's later turns) through the router and a simulated cluster, and
reports what routing did: prefix hit rate, the router's predicted overlap and
its regret, TTFT and queue-wait percentiles, and how evenly requests spread.

With no TRACE it runs a built-in workload: multi-turn chat sessions sharing a
few system prompts (seeded by --seed, sized by --sessions).

The simulated workers each have a prefix KV cache of --worker-kv-blocks blocks
with LRU eviction of unreferenced blocks, one FIFO prefill server at
--worker-prefill-tokens-per-ms for uncached tokens, decode time of
--worker-decode-ms-per-token per output token, at most
--worker-max-num-seqs requests running, and a prefill backlog of at most
--worker-max-num-batched-tokens uncached tokens (a worker with none takes any
request). They talk to the router with the same
wire commands a host would send (worker_ready, place, dispatch_committed,
observe stored/removed, prefill_completed, request_terminal, advance_clock at
next_wakeup_ms); --emit-commands writes that stream, and piping it into
offline-router with the same config reproduces every response byte for byte.

The router takes the same config as serve (--config and flags); block size
defaults to 512 here, as in Mooncake traces.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReplay(cmd, o, args)
		},
	}
	o.serve.bindConfig(cmd)
	f := cmd.Flags()
	f.IntVar(&o.cluster.Workers, "workers", o.cluster.Workers, "simulated workers")
	f.IntVar(&o.cluster.TotalKVBlocks, "worker-kv-blocks", o.cluster.TotalKVBlocks, "KV cache capacity of each worker, in blocks")
	f.IntVar(&o.cluster.MaxNumSeqs, "worker-max-num-seqs", o.cluster.MaxNumSeqs, "requests running at once on a worker")
	f.Uint64Var(&o.cluster.MaxNumBatchedTokens, "worker-max-num-batched-tokens", o.cluster.MaxNumBatchedTokens, "reported to the router for its busy and queue thresholds")
	f.Float64Var(&o.cluster.PrefillTokensPerMS, "worker-prefill-tokens-per-ms", o.cluster.PrefillTokensPerMS, "prefill speed for uncached tokens")
	f.Float64Var(&o.cluster.DecodeMSPerToken, "worker-decode-ms-per-token", o.cluster.DecodeMSPerToken, "decode time per output token")
	f.IntVar(&o.sessions, "sessions", 300, "sessions of the built-in workload")
	f.BoolVar(&o.compare, "compare", false, "run kv and the baselines (round_robin, random, least_loaded) and print them side by side")
	f.StringVar(&o.reportFile, "report", "", "write the report(s) as JSON to this file")
	f.StringVar(&o.emitCommands, "emit-commands", "", "write every command sent to the router to this file")
	f.StringVar(&o.emitResponses, "emit-responses", "", "write every response the router gave to this file (what serve answers to the --emit-commands stream)")
	f.StringVar(&o.plotFile, "plot", "", "draw per-worker load and the running hit rate over simulated time (.png or .svg)")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress bar")
	return cmd
}

func runReplay(cmd *cobra.Command, o *replayOptions, args []string) error {
	flags := cmd.Flags()
	if !flags.Changed("block-size") {
		if err := flags.Set("block-size", "512"); err != nil {
			return err
		}
	}
	cfg, err := o.serve.loadConfig(flags)
	if err != nil {
		return &exitError{2, err}
	}
	if o.compare {
		for _, name := range []string{"emit-commands", "emit-responses", "plot"} {
			if flags.Changed(name) {
				return &exitError{2, fmt.Errorf("--%s describes one run, and --compare makes four: drop one of them", name)}
			}
		}
	}
	if o.cluster.Workers > protocol.MaxRanks {
		return &exitError{2, fmt.Errorf("--workers %d: the router holds at most %d ranks", o.cluster.Workers, protocol.MaxRanks)}
	}
	if o.sessions < 1 {
		return &exitError{2, fmt.Errorf("--sessions %d: the built-in workload needs at least 1 session", o.sessions)}
	}
	if o.emitCommands != "" && o.emitCommands == o.emitResponses {
		return &exitError{2, fmt.Errorf("--emit-commands and --emit-responses name the same file, %s: give each its own", o.emitCommands)}
	}
	if o.cluster.Workers < 1 || o.cluster.TotalKVBlocks < 1 || o.cluster.MaxNumSeqs < 1 ||
		!(o.cluster.PrefillTokensPerMS > 0) || o.cluster.DecodeMSPerToken < 0 {
		return &exitError{2, fmt.Errorf("the --worker-* values and --workers must be positive")}
	}
	// Simulated times must stay within what the router takes (2^53 ms).
	if v := o.cluster.PrefillTokensPerMS; v < 1e-6 || v > protocol.MaxNumber {
		return &exitError{2, fmt.Errorf("--worker-prefill-tokens-per-ms %v: expected 1e-6 to 2^53", v)}
	}
	if v := o.cluster.DecodeMSPerToken; !(v <= 1e6) {
		return &exitError{2, fmt.Errorf("--worker-decode-ms-per-token %v: expected a finite number from 0 to 1e6", v)}
	}
	if o.plotFile != "" {
		if err := plotFormat(o.plotFile); err != nil {
			return &exitError{2, err}
		}
	}
	o.cluster.BlockSize = cfg.BlockSize
	trace, source, err := loadTrace(args, cfg.BlockSize, cfg.Seed, o.sessions)
	if err != nil {
		return &exitError{2, err}
	}
	policies := []protocol.Policy{cfg.Policy}
	if o.compare {
		policies = []protocol.Policy{protocol.PolicyKV, protocol.PolicyRoundRobin, protocol.PolicyRandom, protocol.PolicyLeastLoaded}
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "replay of %s: %d requests on %d workers\n\n", source, len(trace), o.cluster.Workers)
	var reports []*replay.Report
	for _, p := range policies {
		c := cfg
		c.Policy = p
		rep, err := o.run(trace, c)
		if err != nil {
			return err
		}
		reports = append(reports, rep)
	}
	if err := replay.WriteTable(out, reports); err != nil {
		return err
	}
	if o.reportFile != "" {
		var v any = reports[0]
		if o.compare {
			v = reports
		}
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.reportFile, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// run replays one policy, with the outputs and the progress bar it asked for.
func (o *replayOptions) run(trace []replay.Request, cfg protocol.Config) (*replay.Report, error) {
	opt := replay.Options{Cluster: o.cluster, Router: cfg}
	// Each run gets its own copy: later turns' arrival times are filled in.
	trace = append([]replay.Request(nil), trace...)
	for _, out := range []struct {
		path string
		to   *io.Writer
	}{{o.emitCommands, &opt.Commands}, {o.emitResponses, &opt.Responses}} {
		if out.path == "" {
			continue
		}
		f, err := os.Create(out.path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		*out.to = f
	}
	var plot *loadPlot
	if o.plotFile != "" {
		plot = &loadPlot{}
		opt.Sample = plot.sample
	}
	if !o.quiet && isatty.IsTerminal(os.Stderr.Fd()) {
		bar := progressbar.NewOptions(len(trace), progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription("replay "+string(cfg.Policy)), progressbar.OptionShowCount(),
			progressbar.OptionThrottle(100e6), progressbar.OptionClearOnFinish())
		opt.Progress = func(done, _ int) { bar.Set(done) }
		defer bar.Finish()
	}
	rep, err := replay.Run(trace, opt)
	if err != nil {
		return nil, err
	}
	if plot != nil {
		if err := plot.save(o.plotFile, rep); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func loadTrace(args []string, blockSize, seed uint64, sessions int) ([]replay.Request, string, error) {
	if len(args) == 0 {
		return replay.Builtin(seed, sessions, blockSize), fmt.Sprintf("the built-in workload (%d sessions, seed %d)", sessions, seed), nil
	}
	var r io.Reader = os.Stdin
	if args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		r = f
	}
	trace, err := replay.ReadMooncake(r, blockSize)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", args[0], err)
	}
	return trace, args[0], nil
}
