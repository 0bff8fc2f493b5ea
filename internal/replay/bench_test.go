package replay

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkReplaySharedTrace replays the shared Mooncake trace on 16
// workers in process, without --emit-commands: the router's cost as replay
// feels it. Profile it with -cpuprofile to see where that cost goes.
func BenchmarkReplaySharedTrace(b *testing.B) {
	f, err := os.Open(filepath.Join("..", "..", "..", "shared", "traces", "synthetic_trace.jsonl"))
	if err != nil {
		b.Skip("../shared/traces is absent")
	}
	trace, err := ReadMooncake(f, 512)
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Run(append([]Request(nil), trace...), Options{Cluster: DefaultCluster(16), Router: routerConfig("kv")}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplaySharedTraceSimple: the same with --engine simple, issue
// 21's 100,000 simulated requests per second of wall time.
func BenchmarkReplaySharedTraceSimple(b *testing.B) {
	f, err := os.Open(filepath.Join("..", "..", "..", "shared", "traces", "synthetic_trace.jsonl"))
	if err != nil {
		b.Skip("../shared/traces is absent")
	}
	trace, err := ReadMooncake(f, 512)
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	cluster := SimpleCluster(16)
	for b.Loop() {
		if _, err := Run(append([]Request(nil), trace...), Options{Cluster: cluster, Router: routerConfig("kv")}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(trace))*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}
