package replay

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/engine"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// iterCluster is a one-worker iteration-level cluster with a step model
// simple enough to work answers out by hand.
func iterCluster(kvBlocks, maxSeqs int, budget uint64, step cluster.StepModel) cluster.Config {
	c := cluster.Default(1)
	c.BlockSize, c.TotalKVBlocks, c.MaxNumSeqs, c.MaxNumBatchedTokens = 16, kvBlocks, maxSeqs, budget
	c.Profile = &cluster.Profile{Name: "test", Step: step}
	return c
}

func same(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestIterationITLPoolsEveryGap: a request's gaps differ as its context
// grows (each decode step reads one more token), and ITL pools them as
// vLLM does, where TPOT is their mean.
func TestIterationITLPoolsEveryGap(t *testing.T) {
	cfg := iterCluster(100, 8, 2048, cluster.StepModel{BaseMS: 2, PerPrefillTokenMS: 0.01, PerDecodeSeqMS: 0.5, PerKVTokenReadMS: 0.1})
	router := routerConfig(protocol.PolicyKV)
	router.BlockSize = cfg.BlockSize
	res, err := Run([]Request{{ID: "a", InputTokens: 100, OutputTokens: 3, HashIDs: []protocol.LocalBlockHash{1, 2, 3, 4, 5, 6, 7}}},
		Options{Cluster: cfg, Router: router})
	if err != nil {
		t.Fatal(err)
	}
	g1, g2 := 2+0.5+0.1*100, 2+0.5+0.1*101
	m := res.Metrics
	if !same(m.MeanITLMS, (g1+g2)/2) || !same(m.P99ITLMS, g1+0.99*(g2-g1)) || !same(m.MeanTPOTMS, (g1+g2)/2) {
		t.Fatalf("ITL mean %v p99 %v, TPOT %v; gaps %v and %v", m.MeanITLMS, m.P99ITLMS, m.MeanTPOTMS, g1, g2)
	}
}

// TestDecodeRunsMatchSteps: decode in aggregate changes nothing but the
// speed. A profile with a KV term too small to change any step time (so no
// run is taken) replays the same requests to the same outcomes, and to the
// same times but for the last bits of the sums.
func TestDecodeRunsMatchSteps(t *testing.T) {
	cc := cluster.Default(4)
	cc.TotalKVBlocks, cc.MaxNumSeqs = 60, 8 // evictions, preemption and waiting seats
	stepwise := cc
	p := *cc.Profile
	p.Step.PerKVTokenReadMS = 1e-300
	stepwise.Profile = &p
	runs, err := Run(Builtin(9, 150, 0, 512), Options{Cluster: cc, Router: routerConfig(protocol.PolicyKV)})
	if err != nil {
		t.Fatal(err)
	}
	steps, err := Run(Builtin(9, 150, 0, 512), Options{Cluster: stepwise, Router: routerConfig(protocol.PolicyKV)})
	if err != nil {
		t.Fatal(err)
	}
	a, b := runs.Metrics, steps.Metrics
	if a.Completed != b.Completed || a.PrefixHitRate != b.PrefixHitRate || fmt.Sprint(a.WorkerRequests) != fmt.Sprint(b.WorkerRequests) {
		t.Fatalf("runs: %d completed, hit rate %v, %v; steps: %d, %v, %v", a.Completed, a.PrefixHitRate, a.WorkerRequests,
			b.Completed, b.PrefixHitRate, b.WorkerRequests)
	}
	for name, v := range map[string][2]float64{"ttft": {a.MeanTTFTMS, b.MeanTTFTMS}, "itl": {a.P99ITLMS, b.P99ITLMS},
		"e2el": {a.MeanE2ELMS, b.MeanE2ELMS}, "duration": {a.Duration, b.Duration}} {
		if math.Abs(v[0]-v[1]) > 1e-6*math.Abs(v[1]) {
			t.Errorf("%s: %v with runs, %v step by step", name, v[0], v[1])
		}
	}
}

// TestIterationRejectsWhatCannotFit: a request whose prompt, or prompt and
// output, need more blocks than the worker has can never run: it is
// rejected when dispatched, before it runs (and the router's booking
// released), and the next request runs.
func TestIterationRejectsWhatCannotFit(t *testing.T) {
	cfg := iterCluster(4, 8, 4096, cluster.StepModel{BaseMS: 1, PerPrefillTokenMS: 0.01})
	router := routerConfig(protocol.PolicyKV)
	router.BlockSize = cfg.BlockSize
	var cmds bytes.Buffer
	res, err := Run([]Request{
		{ID: "big", InputTokens: 100, OutputTokens: 2},
		{ID: "long", Arrival: 1, InputTokens: 20, OutputTokens: 60},
		{ID: "small", Arrival: 2, InputTokens: 20, OutputTokens: 2},
	}, Options{Cluster: cfg, Router: router, Commands: &cmds})
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Metrics; m.RejectedByReason["exceeds_kv_cache"] != 2 || m.Completed != 1 {
		t.Fatalf("rejected %v, completed %d", m.RejectedByReason, m.Completed)
	}
	if strings.Count(cmds.String(), `"op":"prefill_completed"`) != 1 {
		t.Fatal("a request that could not fit ran")
	}
}

// TestDisaggregatedOneRequest: alone, a request prefills on a prefill
// worker (TTFT = one prefill step), its prompt's KV crosses to a decode
// worker (bytes from the model shape over the bandwidth), and the decode
// worker makes the other tokens, one step each; each router sees only its
// own pool, and each stream replays alone through serve.
func TestDisaggregatedOneRequest(t *testing.T) {
	cfg := iterCluster(100, 8, 4096, cluster.StepModel{BaseMS: 2, PerPrefillTokenMS: 0.01, PerDecodeSeqMS: 0.5})
	cfg.Profile.Model = cluster.ModelShape{Layers: 2, KVHeads: 1, HeadDim: 64, DTypeBytes: 2} // 512 bytes a token
	cfg.PrefillWorkers, cfg.DecodeWorkers, cfg.KVTransferGBps = 2, 3, 0.0001                  // 100 bytes a ms
	router := routerConfig(protocol.PolicyKV)
	router.BlockSize = cfg.BlockSize
	var pc, pr, dc, dr bytes.Buffer
	res, err := Run([]Request{{ID: "a", InputTokens: 100, OutputTokens: 3, HashIDs: []protocol.LocalBlockHash{1, 2, 3, 4, 5, 6, 7}}},
		Options{Cluster: cfg, Router: router, Commands: &pc, Responses: &pr, DecodeCommands: &dc, DecodeResponses: &dr})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	ttft := 2 + 0.01*100
	transfer := 100 * 512 / 100.0
	e2el := ttft + transfer + 2*(2+0.5)
	if !same(m.MeanTTFTMS, ttft) || !same(m.MeanE2ELMS, e2el) || len(m.Pools) != 2 || len(m.WorkerRequests) != 5 {
		t.Fatalf("TTFT %v (want %v), E2EL %v (want %v), %d pools, %d ranks", m.MeanTTFTMS, ttft, m.MeanE2ELMS, e2el, len(m.Pools), len(m.WorkerRequests))
	}
	if m.Pools[0].Role != "prefill" || m.Pools[1].Role != "decode" || m.Pools[1].WorkerRequests[0]+m.Pools[1].WorkerRequests[1]+m.Pools[1].WorkerRequests[2] != 1 {
		t.Fatalf("pools %+v", m.Pools)
	}
	if !same(m.Pools[0].MeanTTFTMS, ttft) || !same(m.Pools[1].MeanTransferMS, transfer) || !same(m.Pools[1].MeanITLMS, (transfer+2.5+2.5)/2) {
		t.Fatalf("prefill TTFT %v, transfer %v, decode ITL %v", m.Pools[0].MeanTTFTMS, m.Pools[1].MeanTransferMS, m.Pools[1].MeanITLMS)
	}
	for name, stream := range map[string][2]*bytes.Buffer{"prefill": {&pc, &pr}, "decode": {&dc, &dr}} {
		if !strings.Contains(stream[0].String(), `"role":"`+name+`"`) || !strings.Contains(stream[0].String(), `"op":"request_terminal"`) {
			t.Fatalf("the %s stream lacks its role or its request_terminal", name)
		}
		eng, _ := engine.New(protocol.DefaultConfig())
		var served bytes.Buffer
		configure := wire.ConfigSource{}.Configure(func(c protocol.Config) (wire.Stepper, error) { return engine.New(c) })
		if _, err := wire.Serve(bytes.NewReader(stream[0].Bytes()), &served, eng, wire.ServeOptions{Configure: configure}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(served.Bytes(), stream[1].Bytes()) {
			t.Fatalf("the %s stream does not replay alone", name)
		}
	}
}

// TestDisaggregatedDecodePreemption: two long outputs on one small decode
// worker: one is preempted mid-decode, computes its prompt and outputs
// again there, and both end, each with its own number of tokens.
func TestDisaggregatedDecodePreemption(t *testing.T) {
	cfg := cluster.Default(1)
	cfg.PrefillWorkers, cfg.DecodeWorkers, cfg.KVTransferGBps, cfg.TotalKVBlocks = 1, 1, 50, 3
	trace := []Request{
		{ID: "a", InputTokens: 100, OutputTokens: 1200, HashIDs: []protocol.LocalBlockHash{1}},
		{ID: "b", InputTokens: 100, OutputTokens: 1200, HashIDs: []protocol.LocalBlockHash{2}},
	}
	res, err := Run(trace, Options{Cluster: cfg, Router: routerConfig(protocol.PolicyKV)})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	// Decode steps alone would take 1199 × 5.76 ms; a recomputation and
	// the wait add some, not a second round of 1200 tokens.
	if m.Completed != 2 || m.MeanE2ELMS > 2*1199*5.76+1000 {
		t.Fatalf("completed %d, mean E2EL %v", m.Completed, m.MeanE2ELMS)
	}
}
