package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/offline-router/offline-router/internal/outfile"
	"github.com/offline-router/offline-router/internal/replay"
)

// emitStream is an --emit-commands or --emit-responses file. It is written
// beside its path and renamed there when the run ends, whether it finished,
// failed or was stopped: the stream it leaves is whole lines. A run that
// did not finish closes it with one comment line saying so, which serve
// skips, so the stream still replays.
type emitStream struct {
	f     *outfile.File
	lines int // written whole: the replay host writes whole lines only
}

func createStream(path string) (*emitStream, error) {
	f, err := outfile.Create(path)
	if err != nil {
		return nil, err
	}
	return &emitStream{f: f}, nil
}

func (s *emitStream) Write(p []byte) (int, error) {
	n, err := s.f.Write(p)
	s.lines += bytes.Count(p[:n], []byte{'\n'})
	return n, err
}

// close ends the stream after a run that ended with runErr (nil: it
// finished). A stream that could not be written is not left at all.
func (s *emitStream) close(ctx context.Context, runErr error) error {
	if runErr != nil {
		reason := strings.ReplaceAll(runErr.Error(), "\n", "; ")
		if sig := signalOf(ctx); sig != 0 && errors.Is(runErr, replay.ErrStopped) {
			reason = "stopped by " + unix.SignalName(sig)
		}
		fmt.Fprintf(s.f, "# incomplete: %s after %d commands\n", reason, s.lines)
	}
	return s.f.Commit()
}
