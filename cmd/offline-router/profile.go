package main

import (
	"fmt"
	"runtime/pprof"

	"github.com/rs/zerolog/log"

	"github.com/offline-router/offline-router/internal/outfile"
)

// startCPUProfile profiles the run into path (written whole when the run
// ends, or not at all), for serve's and replay's --cpuprofile; the
// returned stop ends it.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := outfile.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Discard()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Commit(); err != nil {
			log.Error().Err(err).Msg("--cpuprofile")
		}
	}, nil
}
