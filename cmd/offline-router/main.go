// Command offline-router is the KV-cache-aware request router of an LLM
// serving cluster, on explicit virtual time: JSON commands in on stdin, one
// JSON response per command out on stdout.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

// exitError carries a process exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	// A reader that closes our stdout must get a clear message and a
	// non-zero status, not a silent death by SIGPIPE: with SIGPIPE ignored,
	// the write fails with EPIPE and serve reports it.
	signal.Ignore(syscall.SIGPIPE)
	collectUnlessSet(serveGCPercent)
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true, PartsExclude: []string{zerolog.TimestampFieldName}}).
		Level(zerolog.WarnLevel)
	root := newRootCommand(&log)
	ctx := stop.watchSignals()
	err := root.ExecuteContext(ctx)
	if sig := signalOf(ctx); sig != 0 && err == nil {
		// A command that ignores its context (help, version) ended on
		// its own: a stopped process still says so in its status.
		err = &exitError{exitCodeFor(sig), fmt.Errorf("%v", sig)}
	}
	if err != nil {
		var ex *exitError
		if errors.As(err, &ex) {
			fmt.Fprintln(os.Stderr, "offline-router:", ex.err)
			os.Exit(ex.code)
		}
		// Cobra's own errors are bad flags or arguments.
		fmt.Fprintln(os.Stderr, "offline-router:", err)
		os.Exit(2)
	}
}

// The collector's heap growth (GOGC) unless the environment sets one. A
// router's heap is its index, large and nearly pointer-free, so collecting
// at 50% costs no measurable time and keeps a long run's resident memory a
// fifth lower; a replay's heap is the simulation's, small and full of
// pointers, where 50% was a fifth of a 512-token replay's CPU and 100%
// still keeps a 16-token one under its memory target (docs/performance.md).
const (
	serveGCPercent  = 50
	replayGCPercent = 100
)

// collectUnlessSet runs the collector at percent heap growth unless GOGC is
// in the environment, which then decides.
func collectUnlessSet(percent int) {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(percent)
	}
}

func newRootCommand(log *zerolog.Logger) *cobra.Command {
	opts := &serveOptions{}
	root := &cobra.Command{
		Use:   "offline-router",
		Short: "KV-cache-aware LLM request router on virtual time (JSON Lines on stdin/stdout)",
		Long: `offline-router is the KV-cache-aware request router of an LLM serving cluster,
taken out of the cluster and put on explicit virtual time, for trace replay and
simulation. It behaves like NVIDIA Dynamo's router: a radix prefix index fed by
KV events, cost = prefill load - cached blocks + decode blocks, softmax
temperature.

With no subcommand it serves: it reads one JSON command per line on stdin and
writes exactly one JSON response per command line on stdout, in order. Lines
that are blank or start with # are comments. Logs go to stderr only.

The config comes from --config FILE and the flags below (Dynamo's YAML
--router-policy-config FILE among them: policy classes and worker-selection
instances), or from the stream itself: a first command {"op":"config",
KEYS...} with the keys of a config file (e.g.
{"op":"config","block_size":512,"affinity":{"mode":"hard"}}) is answered with
the effective config; a key it gives that a flag or the file set to another
value is an error naming both (docs/PROTOCOL.md §2).

Exit status: 0 at end of input; 1 with --fail-fast after answering the first
error, or when stdout is closed by its reader; 2 for bad flags or config
(before anything is read); 128+n when signal n (SIGHUP 129, SIGINT 130,
SIGTERM 143) stopped it: it reads no more, answers what it read, and exits
within a second even if stdout is not drained (stderr then says the last
response line may be cut).

The wire protocol is in docs/PROTOCOL.md; a worked session is in the README.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd, opts, log)
		},
	}
	opts.bind(root)
	root.Version = toolVersion()
	root.SetVersionTemplate(versionLine())
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve the JSON Lines protocol on stdin/stdout (same as no subcommand)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd, opts, log)
		},
	}
	opts.bind(serve)
	root.AddCommand(serve, newReplayCommand(), newSweepCommand(), newVersionCommand(), newExampleCommand(log))
	return root
}
