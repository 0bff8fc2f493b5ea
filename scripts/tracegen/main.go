// Command tracegen makes a benchmark trace from a Mooncake trace (the file
// named, or stdin) on stdout, keeping its sharing, arrivals and lengths:
//
//	go run ./scripts/tracegen -copies 3 ../shared/traces/synthetic_trace.jsonl > trace3x.jsonl
//	go run ./scripts/tracegen -split 32 ../shared/traces/synthetic_trace.jsonl > trace16.jsonl
//
// -copies N plays the trace N times back to back, each copy with hash ids
// and sessions of its own; -split R hashes it at blocks R times smaller
// (512-token blocks become 16-token ones at 32: replay it with
// --block-size 16; the capacity, in tokens, makes R times the blocks).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/offline-router/offline-router/internal/replay"
)

func main() {
	copies := flag.Int("copies", 1, "play the trace this many times back to back")
	split := flag.Uint64("split", 1, "hash each block as this many smaller ones")
	blockSize := flag.Uint64("block-size", 512, "the input trace's block size, in tokens")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: tracegen [-copies N] [-split R] [-block-size TOKENS] [TRACE.jsonl] > OUT.jsonl")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *copies, *split, *blockSize); err != nil {
		fmt.Fprintln(os.Stderr, "tracegen:", err)
		os.Exit(1)
	}
}

func run(path string, copies int, split, blockSize uint64) error {
	in := os.Stdin
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	trace, err := replay.ReadMooncake(in, blockSize)
	if err != nil {
		return err
	}
	if trace, err = replay.RepeatTrace(trace, copies); err != nil {
		return err
	}
	if trace, err = replay.SplitBlocks(trace, blockSize, split); err != nil {
		return err
	}
	return replay.WriteMooncake(os.Stdout, trace)
}
