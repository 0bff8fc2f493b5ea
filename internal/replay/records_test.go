package replay

import (
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// recordCase is a replay with rejections (prompts past a small cache),
// preemptions and evictions, its arrivals sped up.
type recordCase struct {
	cluster cluster.Config
	speedUp float64
	// what the case must show for the test to mean anything
	rejects, preempts, decodeRejects bool
}

// recordCases are aggregated, disaggregated (with the decode pool
// rejecting some, and with preemptions) and simple-engine replays with DP
// ranks (which never rejects nor preempts, but evicts).
func recordCases() map[string]recordCase {
	agg := cluster.Default(3)
	agg.TotalKVBlocks = 14
	pd := cluster.Default(1)
	pd.PrefillWorkers, pd.DecodeWorkers, pd.KVTransferGBps, pd.TotalKVBlocks = 2, 2, 50, 20
	pdSmall := pd
	pdSmall.TotalKVBlocks = 14
	simple := cluster.Simple(2)
	simple.DPSize, simple.TotalKVBlocks = 2, 14
	return map[string]recordCase{"aggregated": {agg, 1, true, true, false}, "disaggregated": {pd, 16, true, true, false},
		"disaggregated, decode rejects": {pdSmall, 1, true, false, true}, "simple": {simple, 1, false, false, false}}
}

func (c recordCase) trace() []Request {
	trace := Builtin(3, 40, 0, 512)
	SpeedUp(trace, c.speedUp)
	return trace
}

// numpyStats are the mean (summed in row order, as the report sums) and
// numpy's linear median and p99 of xs.
func numpyStats(xs []float64) [3]float64 {
	if len(xs) == 0 {
		return [3]float64{}
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	s := slices.Sorted(slices.Values(xs))
	pct := func(p float64) float64 {
		pos := float64(p / 100 * float64(len(s)-1))
		lo := math.Floor(pos)
		i := int(lo)
		if lo == pos {
			return s[i]
		}
		return s[i] + float64((s[i+1]-s[i])*(pos-lo))
	}
	return [3]float64{sum / float64(len(s)), pct(50), pct(99)}
}

// TestMetricsRecomputeFromRecords: the report's counts, means, medians and
// p99s of TTFT, TPOT, E2EL and queue wait, its hit rate, goodput,
// preemptions and per-rank requests come out exactly (to the bit) from the
// rows, computed here as a reader of --requests-out would. It catches a
// metric computed from anything but the rows (a TPOT over requests of one
// token, a hit rate counting rejected requests, goodput by a rule of its
// own), and rows that leave out a request or misplace one.
func TestMetricsRecomputeFromRecords(t *testing.T) {
	slo := SLO{TTFTMS: 400, TPOTMS: 8}
	for name, c := range recordCases() {
		t.Run(name, func(t *testing.T) {
			trace, cc := c.trace(), c.cluster
			res, err := Run(append([]Request(nil), trace...), Options{Cluster: cc, Router: routerConfig(protocol.PolicyKV), Goodput: slo, Records: true})
			if err != nil {
				t.Fatal(err)
			}
			m, recs := &res.Metrics, res.Records()
			if len(recs) != len(trace) {
				t.Fatalf("%d records for %d requests", len(recs), len(trace))
			}
			var ttft, tpot, e2el, wait []float64
			var cached, input float64
			completed, good, preemptions := 0, 0, 0
			rejected := map[string]int{}
			ranks := map[[3]int]int{} // (pool, worker, rank): completed requests
			for i, r := range recs {
				if r.RequestID != trace[i].ID || r.InputTokens != trace[i].InputTokens || r.OutputTokens != trace[i].OutputTokens {
					t.Fatalf("row %d is %s (%d, %d), the trace's %s (%d, %d)", i, r.RequestID, r.InputTokens, r.OutputTokens,
						trace[i].ID, trace[i].InputTokens, trace[i].OutputTokens)
				}
				preemptions += r.Preemptions
				if r.Rejected != "" {
					rejected[r.Rejected]++
					if r.WorkerID != -1 || r.TTFTMS != 0 {
						t.Fatalf("rejected row %+v has a worker or a latency", r)
					}
					continue
				}
				completed++
				ttft, e2el, wait = append(ttft, r.TTFTMS), append(e2el, r.E2ELMS), append(wait, r.QueueWaitMS)
				if r.OutputTokens > 1 {
					tpot = append(tpot, r.TPOTMS)
					if r.TPOTMS != (r.E2ELMS-r.TTFTMS)/float64(r.OutputTokens-1) {
						t.Fatalf("row %+v: TPOT is not (e2el - ttft) / (output - 1)", r)
					}
				}
				cached, input = cached+float64(r.CachedTokens), input+float64(r.InputTokens)
				if r.TTFTMS <= slo.TTFTMS && r.TPOTMS <= slo.TPOTMS {
					good++
				}
				if r.PrefillWorkerID >= 0 {
					ranks[[3]int{0, r.PrefillWorkerID, r.PrefillDPRank}]++
				}
				if r.Pool != PoolPrefill {
					ranks[[3]int{1, r.WorkerID, r.DPRank}]++
				}
			}
			if c.rejects && m.Rejected == 0 || c.preempts && m.NumPreemptions == 0 || c.decodeRejects && m.Pools[1].Rejected == 0 || m.EvictedBlocks == 0 {
				t.Fatalf("the case shows too little: %d rejected, %d preemptions, %d evicted blocks", m.Rejected, m.NumPreemptions, m.EvictedBlocks)
			}
			for what, c := range map[string][2]any{
				"completed":   {completed, m.Completed},
				"rejected":    {len(recs) - completed, m.Rejected},
				"preemptions": {preemptions, m.NumPreemptions},
				"ttft":        {numpyStats(ttft), [3]float64{m.MeanTTFTMS, m.MedianTTFTMS, m.P99TTFTMS}},
				"tpot":        {numpyStats(tpot), [3]float64{m.MeanTPOTMS, m.MedianTPOTMS, m.P99TPOTMS}},
				"e2el":        {numpyStats(e2el), [3]float64{m.MeanE2ELMS, m.MedianE2ELMS, m.P99E2ELMS}},
				"queue wait":  {numpyStats(wait), [3]float64{m.MeanQueueWaitMS, m.MedianQueueWaitMS, m.P99QueueWaitMS}},
				"hit rate":    {cached / input, m.PrefixHitRate},
				"goodput":     {float64(good) / m.Duration, *m.RequestGoodput},
			} {
				if c[0] != c[1] {
					t.Errorf("%s: rows give %v, the report %v", what, c[0], c[1])
				}
			}
			for code, n := range m.RejectedByReason {
				if rejected[code] != n {
					t.Errorf("rejected %s: rows give %d, the report %d", code, rejected[code], n)
				}
			}
			// Per rank, in the report's (pool, worker id, rank) order.
			var fromRows []int
			pools := []int{1}
			if cc.Disaggregated() {
				pools = []int{0, 1}
			}
			for _, p := range pools {
				workers := cc.Workers
				if cc.Disaggregated() {
					workers = []int{cc.PrefillWorkers, cc.DecodeWorkers}[p]
				}
				for w := 1; w <= workers; w++ {
					for rank := range cc.DPSize {
						fromRows = append(fromRows, ranks[[3]int{p, w, rank}])
					}
				}
			}
			if !slices.Equal(fromRows, m.WorkerRequests) {
				t.Errorf("requests per rank: rows give %v, the report %v", fromRows, m.WorkerRequests)
			}
		})
	}
}

// TestRecordsCostNothingUnasked: without Options.Records the result keeps
// no rows, and the metrics are the same bits either way. It catches rows
// kept regardless (memory a replay does not need) and metrics that depend
// on whether rows are kept.
func TestRecordsCostNothingUnasked(t *testing.T) {
	c := recordCases()["aggregated"]
	trace, cc := c.trace(), c.cluster
	off, err := Run(append([]Request(nil), trace...), Options{Cluster: cc, Router: routerConfig(protocol.PolicyKV)})
	if err != nil {
		t.Fatal(err)
	}
	on, err := Run(append([]Request(nil), trace...), Options{Cluster: cc, Router: routerConfig(protocol.PolicyKV), Records: true})
	if err != nil {
		t.Fatal(err)
	}
	if off.Records() != nil || len(on.Records()) != len(trace) {
		t.Fatalf("%d rows unasked, %d asked", len(off.Records()), len(on.Records()))
	}
	if !reflect.DeepEqual(off.Metrics, on.Metrics) {
		t.Fatalf("the metrics differ with rows kept:\n%+v\n%+v", off.Metrics, on.Metrics)
	}
}
