package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/offline-router/offline-router/internal/outfile"
)

// stopSignals end a run with whole outputs: ^C (SIGINT), a supervisor's
// stop (SIGTERM: kubelet, docker stop, Slurm's scancel), a closed terminal
// (SIGHUP).
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// stopGrace is how long a command has, after a stop signal, to end on its
// own: serve and replay stop between commands, a sweep between steps of
// its points, all in far less. Past it (a reader that stopped draining
// stdout, say) the process exits anyway: a supervisor's stop must never
// have to escalate to SIGKILL.
const stopGrace = time.Second

// runStop is the process's one handler of stop signals: the first ends
// the command's context, with a stoppedBy as its cause. A second signal,
// or the grace running out, exits at once with 128+n, the files being
// written discarded (their targets stay as they were).
type runStop struct {
	mu sync.Mutex
	// forcedNote, if set, says what a forced exit may have cut (serve's
	// last response line).
	forcedNote func() string
}

var stop runStop

// stoppedBy is the cause of a context ended by a signal.
type stoppedBy struct{ sig syscall.Signal }

func (s stoppedBy) Error() string { return "stopped by " + s.sig.String() }

// signalOf is the signal that ended ctx, or 0 when none did (yet).
func signalOf(ctx context.Context) syscall.Signal {
	if s, ok := context.Cause(ctx).(stoppedBy); ok {
		return s.sig
	}
	return 0
}

// watchSignals returns a context that ends at the first stop signal.
func (s *runStop) watchSignals() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals...)
	go func() {
		sig := (<-sigs).(syscall.Signal)
		cancel(stoppedBy{sig})
		why := "a second signal"
		select {
		case again := <-sigs:
			sig = again.(syscall.Signal)
		case <-time.After(stopGrace):
			why = "it did not stop within " + stopGrace.String()
		}
		s.exitNow(sig, why)
	}()
	return ctx
}

// exitNow ends the process that did not end on its own after sig.
func (s *runStop) exitNow(sig syscall.Signal, why string) {
	s.mu.Lock()
	if s.forcedNote != nil {
		why += "; " + s.forcedNote()
	}
	s.mu.Unlock()
	outfile.DiscardAll()
	fmt.Fprintf(os.Stderr, "offline-router: %v: exiting now (%s; files being written are discarded)\n", sig, why)
	os.Exit(128 + int(sig))
}

// setForcedNote installs what a forced exit says it may have cut.
func (s *runStop) setForcedNote(f func() string) {
	s.mu.Lock()
	s.forcedNote = f
	s.mu.Unlock()
}

// exitCodeFor is the conventional status of a process ended by sig.
func exitCodeFor(sig syscall.Signal) int { return 128 + int(sig) }
