package replay

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// TestReportStatesEachPool: the report's cluster part gives each pool's
// role, workers and DP size (a 3 + 2 cluster is not "workers: 3"), and the
// setup digest is what it was without them. It catches pools left out or
// miscounted, and a digest that moves with the stated pools (a resumed
// sweep would then run its points again).
func TestReportStatesEachPool(t *testing.T) {
	pd := cluster.Default(1)
	pd.PrefillWorkers, pd.DecodeWorkers, pd.Workers, pd.DPSize = 3, 2, 3, 2
	agg := cluster.Default(8)
	for _, c := range []struct {
		cluster cluster.Config
		want    []cluster.PoolSize
	}{
		{pd, []cluster.PoolSize{{Role: "prefill", Workers: 3, DPSize: 2}, {Role: "decode", Workers: 2, DPSize: 2}}},
		{agg, []cluster.PoolSize{{Role: "aggregated", Workers: 8, DPSize: 1}}},
	} {
		e := &Experiment{Cluster: c.cluster, Router: routerConfig(protocol.PolicyKV)}
		d := e.Setup(TraceInfo{})
		if !slices.Equal(d.Cluster.Pools, c.want) {
			t.Errorf("pools %+v, want %+v", d.Cluster.Pools, c.want)
		}
		without := d
		without.Cluster.Pools = nil
		if d.SetupDigest() != without.SetupDigest() {
			t.Error("the stated pools change the setup digest")
		}
	}
}

// TestPoolFiguresAddUp: per pool, requests = completed + rejected; the
// prefill pool is sent every request, the decode pool those whose row
// says decode; the pools' preemptions and evictions add up to the
// report's; the prefill pool's hit rate recomputes from the rows it
// prefilled; the table has each pool's rows, and none when aggregated. It
// catches a request counted in the wrong pool, a pool's counter left out
// of the sum, and pool rows missing from the table.
func TestPoolFiguresAddUp(t *testing.T) {
	for _, name := range []string{"disaggregated", "disaggregated, decode rejects"} {
		c := recordCases()[name]
		trace := c.trace()
		res, err := Run(trace, Options{Cluster: c.cluster, Router: routerConfig(protocol.PolicyKV), Records: true})
		if err != nil {
			t.Fatal(err)
		}
		m := &res.Metrics
		decode, cached, input := 0, 0.0, 0.0
		for _, r := range res.Records() {
			if r.Pool == PoolDecode {
				decode++
			}
			if r.PrefillWorkerID >= 0 {
				cached, input = cached+float64(r.CachedTokens), input+float64(r.InputTokens)
			}
		}
		pre, dec := &m.Pools[0], &m.Pools[1]
		for _, p := range m.Pools {
			if p.Requests != p.Completed+p.Rejected {
				t.Errorf("%s %s: %d requests, %d completed, %d rejected", name, p.Role, p.Requests, p.Completed, p.Rejected)
			}
		}
		switch {
		case pre.Requests != len(trace) || dec.Requests != decode:
			t.Errorf("%s: prefill sent %d of %d, decode %d of %d rows", name, pre.Requests, len(trace), dec.Requests, decode)
		case pre.Rejected+dec.Rejected != m.Rejected:
			t.Errorf("%s: pools reject %d + %d, the report %d", name, pre.Rejected, dec.Rejected, m.Rejected)
		case pre.NumPreemptions+dec.NumPreemptions != m.NumPreemptions || pre.EvictedBlocks+dec.EvictedBlocks != m.EvictedBlocks:
			t.Errorf("%s: pools' preemptions %d + %d (report %d), evictions %d + %d (report %d)", name,
				pre.NumPreemptions, dec.NumPreemptions, m.NumPreemptions, pre.EvictedBlocks, dec.EvictedBlocks, m.EvictedBlocks)
		case *pre.PrefixHitRate != cached/input || dec.PrefixHitRate != nil:
			t.Errorf("%s: prefill hit rate %v, rows give %v; decode's %v", name, *pre.PrefixHitRate, cached/input, dec.PrefixHitRate)
		}
		if c.decodeRejects && dec.Rejected == 0 {
			t.Errorf("%s: the decode pool rejects none", name)
		}
		var table bytes.Buffer
		if err := WriteTable(&table, &Report{Deterministic: Deterministic{Policies: []Metrics{*m}}, Run: RunInfo{Policies: []Cost{res.Cost}}}); err != nil {
			t.Fatal(err)
		}
		for _, row := range []string{"preemptions", "prefill: completed", "prefill: prefix hit rate", "decode: mean ITL (ms)", "decode: evicted blocks"} {
			if !strings.Contains(table.String(), row) {
				t.Errorf("%s: the table lacks %q:\n%s", name, row, table.String())
			}
		}
	}
	c := recordCases()["aggregated"]
	res, err := Run(c.trace(), Options{Cluster: c.cluster, Router: routerConfig(protocol.PolicyKV)})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, &Report{Deterministic: Deterministic{Policies: []Metrics{res.Metrics}}, Run: RunInfo{Policies: []Cost{res.Cost}}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(table.String(), "prefill:") || !strings.Contains(table.String(), "evicted blocks") {
		t.Errorf("aggregated table:\n%s", table.String())
	}
}
