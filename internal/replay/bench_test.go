package replay

import (
	"os"
	"testing"
)

// BenchmarkReplaySharedTrace replays the shared Mooncake trace on 16
// workers in process, without --emit-commands: the router's cost as replay
// feels it. Profile it with -cpuprofile to see where that cost goes.
func BenchmarkReplaySharedTrace(b *testing.B) {
	trace := readSharedTrace(b)
	for b.Loop() {
		if _, err := Run(append([]Request(nil), trace...), Options{Cluster: DefaultCluster(16), Router: routerConfig("kv")}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplaySharedTraceSimple: the same with --engine simple, issue
// 21's 100,000 simulated requests per second of wall time.
func BenchmarkReplaySharedTraceSimple(b *testing.B) {
	trace := readSharedTrace(b)
	cluster := SimpleCluster(16)
	for b.Loop() {
		if _, err := Run(append([]Request(nil), trace...), Options{Cluster: cluster, Router: routerConfig("kv")}); err != nil {
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
