package replay

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// TestSimpleBusyShareIsTheUnionOfRequests: on one simple-model worker
// (prefill 20 tokens/ms, decode 15 ms a token), a (1000 in, 5 out, at 0)
// is busy 0-110 ms (prefill to 50, decode to 110); b (1000 in, 1 out, at
// 100) prefills 100-150, while a still decodes; c (at 300) 300-350. The
// union is 200 of 350 ms. Each holds its 2 prompt blocks while admitted:
// 2×110 + 2×50 + 2×50 = 420 block-ms over 912 blocks × 350 ms, at most 4
// blocks at once (100-110).
func TestSimpleBusyShareIsTheUnionOfRequests(t *testing.T) {
	trace := []Request{
		{ID: "a", Arrival: 0, InputTokens: 1000, OutputTokens: 5, HashIDs: []protocol.LocalBlockHash{1, 2}},
		{ID: "b", Arrival: 100, InputTokens: 1000, OutputTokens: 1, HashIDs: []protocol.LocalBlockHash{3, 4}},
		{ID: "c", Arrival: 300, InputTokens: 1000, OutputTokens: 1, HashIDs: []protocol.LocalBlockHash{5, 6}},
	}
	res, err := Run(trace, Options{Cluster: cluster.Simple(1), Router: routerConfig(protocol.PolicyKV)})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	capacity := float64(cluster.Simple(1).TotalKVBlocks)
	for name, got := range map[string][2]float64{
		"busy share":      {m.WorkerBusyShare[0], 200.0 / 350},
		"mean busy share": {m.MeanBusyShare, 200.0 / 350},
		"mean KV usage":   {m.WorkerKVCacheUsage[0], 420 / (capacity * 350)},
		"peak KV usage":   {m.PeakKVCacheUsage, 4 / capacity},
		"offered rate":    {m.OfferedRequestRate, 3 / 0.3},
	} {
		if math.Abs(got[0]-got[1]) > 1e-12 {
			t.Errorf("%s: got %v, want %v", name, got[0], got[1])
		}
	}
}

// TestIterationBusyShare: alone, a request's steps run back to back from
// its arrival to its last token (its E2EL), and hold its 2 blocks (1000
// prompt tokens and 4 decoded at 512 a block) all along. Two such
// requests 10 s apart on three round-robin workers: two workers busy for
// one E2EL each, the third idle (0, and no KV used); the busy and KV
// figures are each worker's time over the duration.
func TestIterationBusyShare(t *testing.T) {
	trace := []Request{
		{ID: "a", Arrival: 0, InputTokens: 1000, OutputTokens: 5, HashIDs: []protocol.LocalBlockHash{1, 2}},
		{ID: "b", Arrival: 10000, InputTokens: 1000, OutputTokens: 5, HashIDs: []protocol.LocalBlockHash{3, 4}},
	}
	cc := cluster.Default(3)
	res, err := Run(trace, Options{Cluster: cc, Router: routerConfig(protocol.PolicyRoundRobin), Records: true})
	if err != nil {
		t.Fatal(err)
	}
	m, recs := res.Metrics, res.Records()
	duration := m.Duration * 1000
	want := []float64{recs[0].E2ELMS / duration, recs[1].E2ELMS / duration, 0}
	got := slices.Clone(m.WorkerBusyShare)
	slices.Sort(got)
	slices.Reverse(got)
	slices.Sort(want[:2])
	slices.Reverse(want[:2])
	capacity := float64(cc.TotalKVBlocks)
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("busy shares %v, want %v in some order", m.WorkerBusyShare, want)
		}
	}
	for i, share := range m.WorkerBusyShare {
		if kv := m.WorkerKVCacheUsage[i]; math.Abs(kv-float64(share*2/capacity)) > 1e-12 {
			t.Errorf("worker %d: mean KV usage %v, want its busy share %v × 2 blocks / %v", i, kv, share, capacity)
		}
		wantPeak := 2 / capacity
		if share == 0 {
			wantPeak = 0
		}
		if m.WorkerPeakKVCacheUsage[i] != wantPeak {
			t.Errorf("worker %d: peak KV usage %v, want %v", i, m.WorkerPeakKVCacheUsage[i], wantPeak)
		}
	}
	if m.PeakKVCacheUsage != 2/capacity || m.MeanKVCacheUsage != (m.WorkerKVCacheUsage[0]+m.WorkerKVCacheUsage[1]+m.WorkerKVCacheUsage[2])/3 {
		t.Errorf("KV usage: peak %v, want 2 blocks of %v; mean %v, want the workers' %v", m.PeakKVCacheUsage, capacity, m.MeanKVCacheUsage, m.WorkerKVCacheUsage)
	}
	if mean := (want[0] + want[1]) / 3; math.Abs(m.MeanBusyShare-mean) > 1e-12 {
		t.Errorf("mean busy share %v, want %v", m.MeanBusyShare, mean)
	}
	if m.OfferedRequestRate != 2/10.0 {
		t.Errorf("offered rate %v, want 2 requests over 10 s", m.OfferedRequestRate)
	}
}

// TestUtilisationBounds: on every record case (both engines, pools, caches
// small enough to evict and preempt), each rank's busy share and KV
// usage lie in [0, 1], its peak at or above its mean, some rank's cache
// fills (these caches are small), the means are the ranks' means, and each
// pool's ranks are its part of the end-to-end ones; the table prints them.
func TestUtilisationBounds(t *testing.T) {
	for name, c := range recordCases() {
		res, err := Run(c.trace(), Options{Cluster: c.cluster, Router: routerConfig(protocol.PolicyKV)})
		if err != nil {
			t.Fatal(err)
		}
		m := &res.Metrics
		checkUtilisation(t, name, m.WorkerBusyShare, m.WorkerKVCacheUsage, m.WorkerPeakKVCacheUsage,
			m.MeanBusyShare, m.MeanKVCacheUsage, m.PeakKVCacheUsage)
		if m.PeakKVCacheUsage < 0.5 {
			t.Errorf("%s: peak KV usage %v on a cache of %d blocks", name, m.PeakKVCacheUsage, c.cluster.TotalKVBlocks)
		}
		var busy, kv, peak []float64
		for _, p := range m.Pools {
			checkUtilisation(t, name+" "+p.Role, p.WorkerBusyShare, p.WorkerKVCacheUsage, p.WorkerPeakKVCacheUsage,
				p.MeanBusyShare, p.MeanKVCacheUsage, p.PeakKVCacheUsage)
			busy, kv, peak = append(busy, p.WorkerBusyShare...), append(kv, p.WorkerKVCacheUsage...), append(peak, p.WorkerPeakKVCacheUsage...)
		}
		if len(m.Pools) > 0 && (!slices.Equal(busy, m.WorkerBusyShare) || !slices.Equal(kv, m.WorkerKVCacheUsage) || !slices.Equal(peak, m.WorkerPeakKVCacheUsage)) {
			t.Errorf("%s: the pools' ranks are not the cluster's: %v %v %v, %v %v %v", name, busy, kv, peak,
				m.WorkerBusyShare, m.WorkerKVCacheUsage, m.WorkerPeakKVCacheUsage)
		}
		var table bytes.Buffer
		if err := WriteTable(&table, &Report{Deterministic: Deterministic{Policies: []Metrics{*m}}, Run: RunInfo{Policies: []Cost{res.Cost}}}); err != nil {
			t.Fatal(err)
		}
		rows := []string{"offered request rate (req/s)", "mean busy share", "mean KV cache usage", "peak KV cache usage"}
		if len(m.Pools) > 0 {
			rows = append(rows, "prefill: mean busy share", "decode: peak KV cache usage")
		}
		for _, row := range rows {
			if !strings.Contains(table.String(), row) {
				t.Errorf("%s: the table lacks %q", name, row)
			}
		}
	}
}

func checkUtilisation(t *testing.T, name string, busy, kv, peak []float64, meanBusy, meanKV, maxPeak float64) {
	t.Helper()
	var sumBusy, sumKV, highest float64
	for i := range busy {
		if !(busy[i] > 0 && busy[i] <= 1 && kv[i] > 0 && kv[i] <= peak[i] && peak[i] <= 1) {
			t.Errorf("%s rank %d: busy share %v, KV usage mean %v peak %v", name, i, busy[i], kv[i], peak[i])
		}
		sumBusy, sumKV, highest = sumBusy+busy[i], sumKV+kv[i], max(highest, peak[i])
	}
	n := float64(len(busy))
	if n == 0 || meanBusy != sumBusy/n || meanKV != sumKV/n || maxPeak != highest {
		t.Errorf("%s: means %v %v, peak %v; of ranks %v %v %v", name, meanBusy, meanKV, maxPeak, busy, kv, peak)
	}
}

// TestOfferedRateIsTheArrivals: open loop, the trace's requests over the
// span of their timestamps; all at once, 0; in a closed loop of one
// session at a time, each request arrives when the one before ended, so
// the rate is that of the arrivals the loop made.
func TestOfferedRateIsTheArrivals(t *testing.T) {
	trace := func(at ...float64) []Request {
		var out []Request
		for i, a := range at {
			out = append(out, Request{ID: string(rune('a' + i)), Arrival: a, InputTokens: 600, OutputTokens: 3,
				HashIDs: []protocol.LocalBlockHash{protocol.LocalBlockHash(2 * i), protocol.LocalBlockHash(2*i + 1)}})
		}
		return out
	}
	run := func(tr []Request, concurrency int) *Result {
		res, err := Run(tr, Options{Cluster: cluster.Default(2), Router: routerConfig(protocol.PolicyKV), Concurrency: concurrency, Records: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if got := run(trace(500, 1500, 4500, 2000), 0).Metrics.OfferedRequestRate; got != 4/4.0 {
		t.Errorf("open loop: %v, want 4 requests over 4 s", got)
	}
	if got := run(trace(7, 7), 0).Metrics.OfferedRequestRate; got != 0 {
		t.Errorf("all at once: %v, want 0", got)
	}
	res := run(trace(0, 0, 0), 1)
	recs := res.Records()
	if last := recs[2].ArrivalMS; !(last > 0) || res.Metrics.OfferedRequestRate != 3/(last/1000) {
		t.Errorf("closed loop: %v, want 3 over the last arrival, %v ms", res.Metrics.OfferedRequestRate, last)
	}
}
