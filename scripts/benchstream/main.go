// Command benchstream writes the generated mixed command stream of the
// performance targets (64 workers, prompts of 25 to 100 blocks with shared
// prefixes, random 64-bit hashes) to stdout.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/offline-router/offline-router/internal/workload"
)

func main() {
	commands := flag.Int("commands", 1_000_000, "about this many command lines")
	seed := flag.Uint64("seed", 1, "seed of the stream")
	workers := flag.Int("workers", 64, "workers")
	minBlocks := flag.Int("min-blocks", 25, "shortest prompt, in blocks")
	maxBlocks := flag.Int("max-blocks", 100, "longest prompt, in blocks")
	steady := flag.Bool("steady", false, "evict each request's private tail when it ends, so that caches and the index stop growing")
	flag.Parse()
	m := workload.DefaultMixed(*commands, *seed)
	m.Workers, m.MinBlocks, m.MaxBlocks, m.Steady = *workers, *minBlocks, *maxBlocks, *steady
	if err := m.Write(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchstream:", err)
		os.Exit(1)
	}
}
