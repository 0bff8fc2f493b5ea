package replay

import (
	"os"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
)

// BenchmarkReplaySharedTrace replays the shared Mooncake trace on 16
// workers in process, without --emit-commands: the router's cost as replay
// feels it. Profile it with -cpuprofile to see where that cost goes.
func BenchmarkReplaySharedTrace(b *testing.B) {
	trace := readSharedTrace(b)
	for b.Loop() {
		if _, err := Run(append([]Request(nil), trace...), Options{Cluster: cluster.Default(16), Router: routerConfig("kv")}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplaySharedTraceSimple: the same with --engine simple, issue
// 21's 100,000 simulated requests per second of wall time.
func BenchmarkReplaySharedTraceSimple(b *testing.B) {
	benchSimple(b, readSharedTrace(b), cluster.Simple(16))
}

// BenchmarkReplayTripledTraceSimple: three copies of the shared trace back
// to back (scripts/tracegen -copies 3), the same target at three times
// the length.
func BenchmarkReplayTripledTraceSimple(b *testing.B) {
	trace, err := RepeatTrace(readSharedTrace(b), 3)
	if err != nil {
		b.Fatal(err)
	}
	benchSimple(b, trace, cluster.Simple(16))
}

// BenchmarkReplay16TokenBlocksSimple: the shared trace hashed at the
// 16-token blocks vLLM and Dynamo route on (scripts/tracegen -split 32),
// with each worker's cache 32 times as many blocks; issue 21's 10,000
// simulated requests per second under 400 MB.
func BenchmarkReplay16TokenBlocksSimple(b *testing.B) {
	trace, err := SplitBlocks(readSharedTrace(b), 512, 32)
	if err != nil {
		b.Fatal(err)
	}
	cc := cluster.Simple(16)
	cc.BlockSize, cc.TotalKVBlocks = 16, 32*cc.TotalKVBlocks
	benchSimple(b, trace, cc)
}

func benchSimple(b *testing.B, trace []Request, cc cluster.Config) {
	router := routerConfig("kv")
	router.BlockSize = cc.BlockSize
	for b.Loop() {
		if _, err := Run(append([]Request(nil), trace...), Options{Cluster: cc, Router: router}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(trace))*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}

// readSharedTrace reads the shared Mooncake trace, or skips.
func readSharedTrace(b *testing.B) []Request {
	f, err := os.Open(sharedTrace)
	if err != nil {
		b.Skip("../shared/traces is absent")
	}
	defer f.Close()
	trace, err := ReadMooncake(f, 512)
	if err != nil {
		b.Fatal(err)
	}
	return trace
}

// BenchmarkHeadroomSharedTrace: the headroom a report adds, beside a
// replay of the same trace.
func BenchmarkHeadroomSharedTrace(b *testing.B) {
	trace := readSharedTrace(b)
	cc := cluster.Default(8)
	for b.Loop() {
		headroomOf(trace, &cc, false)
	}
}
