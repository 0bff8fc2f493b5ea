package replay

import (
	"math"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// TestSummarizeIsNumpys: np.mean, np.median, np.std and np.percentile (its
// default, linear) of [1, 2, 3, 4, 10] are 4, 3, 3.1623, 7.6 and 9.76; a
// nearest-rank percentile would give 10 for both.
func TestSummarizeIsNumpys(t *testing.T) {
	s := summarize([]sample{{10, 1}, {3, 1}, {1, 1}, {4, 1}, {2, 1}})
	want := stats{mean: 4, median: 3, std: math.Sqrt(10), p90: 7.6, p99: 9.76}
	if !near(s, want) {
		t.Fatalf("got %+v, want %+v", s, want)
	}
	if (summarize(nil) != stats{}) {
		t.Fatal("no samples: all zero, as vLLM writes them")
	}
}

// TestWeightedSamplesAreRepeats: n equal gaps as one sample give what the
// n repeated observations give (the ITL pool).
func TestWeightedSamplesAreRepeats(t *testing.T) {
	weighted := summarize([]sample{{5, 3}, {1, 1}, {9, 2}})
	repeated := summarize([]sample{{5, 1}, {5, 1}, {5, 1}, {1, 1}, {9, 1}, {9, 1}})
	if !near(weighted, repeated) {
		t.Fatalf("weighted %+v, repeated %+v", weighted, repeated)
	}
}

func near(a, b stats) bool {
	for _, d := range []float64{a.mean - b.mean, a.median - b.median, a.std - b.std, a.p90 - b.p90, a.p99 - b.p99} {
		if math.Abs(d) > 1e-9 {
			return false
		}
	}
	return true
}

// TestOneRequestClosedForm: alone on a simple-model cluster, a request of 1000 input
// and 5 output tokens prefills at 20 tokens/ms, which makes its first token
// (TTFT 50 ms), then decodes 4 more at 15 ms each (E2EL 110 ms), so its
// TPOT and each of its 4 gaps are 15 ms; over 0.11 s that is 1/0.11
// requests/s and 5/0.11 output tokens/s.
func TestOneRequestClosedForm(t *testing.T) {
	one := func(slo SLO) Metrics {
		trace := []Request{{ID: "a", InputTokens: 1000, OutputTokens: 5, HashIDs: []protocol.LocalBlockHash{1, 2}}}
		res, err := Run(trace, Options{Cluster: cluster.Simple(2), Router: routerConfig(protocol.PolicyKV), Goodput: slo})
		if err != nil {
			t.Fatal(err)
		}
		return res.Metrics
	}
	m := one(SLO{TTFTMS: 50, TPOTMS: 14})
	for name, got := range map[string][2]float64{
		"ttft":       {m.MeanTTFTMS, 50},
		"p99 ttft":   {m.P99TTFTMS, 50},
		"e2el":       {m.MedianE2ELMS, 110},
		"tpot":       {m.MeanTPOTMS, 15},
		"itl":        {m.P90ITLMS, 15},
		"duration":   {m.Duration, 0.11},
		"req/s":      {m.RequestThroughput, 1 / 0.11},
		"out tok/s":  {m.OutputThroughput, 5 / 0.11},
		"all tok/s":  {m.TotalTokenThroughput, 1005 / 0.11},
		"std ttft":   {m.StdTTFTMS, 0},
		"queue wait": {m.MeanQueueWaitMS, 0},
	} {
		if math.Abs(got[0]-got[1]) > 1e-9 {
			t.Errorf("%s: got %v, want %v", name, got[0], got[1])
		}
	}
	// TPOT 15 misses the 14 ms level: no goodput.
	if m.RequestGoodput == nil || *m.RequestGoodput != 0 {
		t.Fatalf("goodput %v, want 0", m.RequestGoodput)
	}
	if g := one(SLO{TTFTMS: 50, TPOTMS: 15}).RequestGoodput; g == nil || math.Abs(*g-1/0.11) > 1e-9 {
		t.Fatalf("goodput %v, want 1/0.11 (levels met at equality)", g)
	}
	if one(SLO{}).RequestGoodput != nil {
		t.Fatal("no --goodput: request_goodput is null")
	}
}

func TestParseSLO(t *testing.T) {
	s, err := ParseSLO([]string{"ttft:200", "tpot:50.5", "e2el:9000"})
	if err != nil || s != (SLO{TTFTMS: 200, TPOTMS: 50.5, E2ELMS: 9000}) {
		t.Fatalf("%+v %v", s, err)
	}
	for _, bad := range [][]string{{"ttft"}, {"ttft:-1"}, {"ttft:x"}, {"itl:3"}, {"ttft:1", "ttft:2"}, {"ttft:NaN"}, {"e2el:+Inf"}} {
		if _, err := ParseSLO(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestWindows: a request on worker 0 from 5 to 25 ms in 10 ms windows
// counts half in window 0, whole in window 1, half in window 2; the hit
// rate of the window its prefill started in is its own.
func TestWindows(t *testing.T) {
	r := &Result{Workers: 2, ends: []outcome{
		{worker: 0, placed: 5, start: 6, done: 25, hitTokens: 1, inputTokens: 4},
		{worker: 1, placed: 21, start: 22, done: 23, hitTokens: 3, inputTokens: 4},
	}}
	load := r.LoadByWindow(10, 3)
	want := [][]float64{{0.5, 1, 0.5}, {0, 0, 0.2}}
	for w := range want {
		for i := range want[w] {
			if math.Abs(load[w][i]-want[w][i]) > 1e-9 {
				t.Fatalf("load %v, want %v", load, want)
			}
		}
	}
	hit := r.HitRateByWindow(10, 3)
	if hit[0] != 0.25 || !math.IsNaN(hit[1]) || hit[2] != 0.75 {
		t.Fatalf("hit rate by window %v", hit)
	}
	// Disaggregated: on its prefill worker from 2 ms to its first token at
	// 8, on its decode worker (index 1) from 12 to 27.
	r = &Result{Workers: 2, ends: []outcome{{worker: 0, placed: 2, first: 8, decWorker: 2, decPlaced: 12, done: 27}}}
	load = r.LoadByWindow(10, 3)
	want = [][]float64{{0.6, 0, 0}, {0, 0.8, 0.7}}
	for w := range want {
		for i := range want[w] {
			if math.Abs(load[w][i]-want[w][i]) > 1e-9 {
				t.Fatalf("disaggregated load %v, want %v", load, want)
			}
		}
	}
}

// TestOverlapAndRegretInTokens: a prompt of 40 tokens in 16-token blocks
// is 3 blocks, its last holding 8 tokens; an overlap of its 3 blocks is its
// 40 tokens, not 48. Round robin on 2 workers (the simple engine caches the
// partial block too) places the same prompt on one worker, then the other
// (overlap 0 where the first had all 3), then the first again (overlap 3).
func TestOverlapAndRegretInTokens(t *testing.T) {
	cc := cluster.Simple(2)
	cc.BlockSize = 16
	router := routerConfig(protocol.PolicyRoundRobin)
	router.BlockSize = 16
	var trace []Request
	for i, id := range []string{"a", "b", "c"} {
		trace = append(trace, Request{ID: id, Arrival: float64(i) * 10000, InputTokens: 40, OutputTokens: 2, HashIDs: []protocol.LocalBlockHash{1, 2, 3}})
	}
	res, err := Run(trace, Options{Cluster: cc, Router: router})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	if m.Completed != 3 || m.MeanOverlapRegretBlocks != 1 || m.RouterOverlapRate != 3.0/9 {
		t.Fatalf("completed %d, regret %v blocks, overlap rate %v: want 3, 1 and 1/3 (the placements are not the ones meant)",
			m.Completed, m.MeanOverlapRegretBlocks, m.RouterOverlapRate)
	}
	if m.MeanRouterOverlapTokens != 40.0/3 || m.MeanOverlapRegretTokens != 40.0/3 {
		t.Errorf("overlap %v tokens, regret %v tokens a request, want 40/3 each (3 blocks of a 40-token prompt are 40 tokens)",
			m.MeanRouterOverlapTokens, m.MeanOverlapRegretTokens)
	}
}

// TestPoolOverlapAndRegretInTokens: each pool of a disaggregated cluster
// reports them too. The iteration engine caches only full blocks, so here
// (2 of the 3) the tokens are the blocks times 16.
func TestPoolOverlapAndRegretInTokens(t *testing.T) {
	cc := cluster.Default(2)
	cc.BlockSize, cc.PrefillWorkers, cc.DecodeWorkers, cc.KVTransferGBps = 16, 2, 2, 50
	router := routerConfig(protocol.PolicyRoundRobin)
	router.BlockSize = 16
	var trace []Request
	for i, id := range []string{"a", "b", "c"} {
		trace = append(trace, Request{ID: id, Arrival: float64(i) * 10000, InputTokens: 40, OutputTokens: 2, HashIDs: []protocol.LocalBlockHash{1, 2, 3}})
	}
	res, err := Run(trace, Options{Cluster: cc, Router: router})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Metrics.Pools) != 2 {
		t.Fatalf("%d pools", len(res.Metrics.Pools))
	}
	for _, p := range res.Metrics.Pools {
		if p.MeanOverlapRegretBlocks == 0 || p.MeanOverlapRegretTokens != float64(p.MeanOverlapRegretBlocks*16) ||
			p.MeanRouterOverlapTokens != float64(p.RouterOverlapRate*3*16) {
			t.Errorf("%s pool: regret %v blocks, %v tokens; overlap rate %v, %v tokens", p.Role,
				p.MeanOverlapRegretBlocks, p.MeanOverlapRegretTokens, p.RouterOverlapRate, p.MeanRouterOverlapTokens)
		}
	}
}
