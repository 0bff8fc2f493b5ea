package replay

import (
	"math"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// A play's makespan runs from its first request's sending to its last
// one's end, and its serving time leaves out the tool time on its critical
// path only (the 50 ms the root waits after its own first turn, not the 30
// ms it would have waited after the subagents, which end later); kinds are
// counted apart; under sibling_group the two subagents run together.
// (Catches: serving time subtracting every delay or none, the walk taking
// a dependency that did not release the request last, kinds mixed up,
// colocation counted against the wrong group.)
func TestAgenticMetrics(t *testing.T) {
	ids := func(xs ...protocol.LocalBlockHash) []protocol.LocalBlockHash { return xs }
	agent := func(conv string) *Agent { return &Agent{Play: "p", Conversation: conv} }
	trace := []Request{
		{ID: "r0", Agent: agent("root"), InputTokens: 64, OutputTokens: 4, HashIDs: ids(1, 2, 3, 4)},
		{ID: "s0", Agent: agent("sub-a"), InputTokens: 64, OutputTokens: 8, HashIDs: ids(1, 2, 5, 6),
			Deps: []Dependency{{On: 0, Trigger: OnDispatch, Relation: Spawn}}},
		{ID: "s1", Agent: agent("sub-b"), InputTokens: 64, OutputTokens: 8, HashIDs: ids(1, 2, 7, 8),
			Deps: []Dependency{{On: 0, Trigger: OnDispatch, Relation: Spawn}}},
		{ID: "r1", Agent: agent("root"), InputTokens: 96, OutputTokens: 2, HashIDs: ids(1, 2, 3, 4, 9, 10),
			Deps: []Dependency{{On: 0, Relation: Sequence, DelayMS: 50}, {On: 1, Relation: Join, DelayMS: 1}, {On: 2, Relation: Join, DelayMS: 1}}},
	}
	if err := checkGraph(trace); err != nil { // the readers' lineage and kinds
		t.Fatal(err)
	}
	cfg := routerConfig(protocol.PolicyKV)
	cfg.BlockSize = 16
	cfg.Affinity = protocol.AffinityConfig{Mode: protocol.AffinityHard, TTLMS: 60_000, Key: protocol.AffinityKeySiblingGroup}
	cl := cluster.Default(4)
	cl.BlockSize = 16
	res, err := Run(trace, Options{Cluster: cl, Router: cfg, Records: true})
	if err != nil {
		t.Fatal(err)
	}
	a, recs := res.Metrics.Agentic, res.Records()
	if a == nil || a.Plays != 1 {
		t.Fatalf("agentic figures %+v, want one play", a)
	}
	end := func(i int) float64 { return recs[i].ArrivalMS + recs[i].E2ELMS }
	if end(0)+50 < max(end(1), end(2))+1 {
		t.Fatalf("the subagents end at %v and %v, after the root's tool wait from %v: the test needs them to end sooner", end(1), end(2), end(0))
	}
	makespan := end(3) - recs[0].ArrivalMS
	if math.Abs(a.MeanMakespanMS-makespan) > 1e-9 || math.Abs(a.MeanServingMS-(makespan-50)) > 1e-9 {
		t.Errorf("makespan %v, serving %v; want %v, %v", a.MeanMakespanMS, a.MeanServingMS, makespan, makespan-50)
	}
	want := map[string]int{"root": 1, "tool_continuation": 1, "subagent": 2}
	if len(a.Kinds) != len(want) {
		t.Errorf("kinds %+v, want %v", a.Kinds, want)
	}
	for _, k := range a.Kinds {
		if k.Requests != want[k.Kind] || k.Completed != k.Requests {
			t.Errorf("%s: %d requests, %d completed; want %d", k.Kind, k.Requests, k.Completed, want[k.Kind])
		}
	}
	if recs[1].WorkerID != recs[2].WorkerID || a.SubagentColocation == nil || *a.SubagentColocation != 1 {
		t.Errorf("subagents on workers %d and %d, colocation %v; want together, 1", recs[1].WorkerID, recs[2].WorkerID, a.SubagentColocation)
	}
	if a.SubagentGroupHitRate == nil {
		t.Fatal("no subagent group hit rate")
	}
	if got, want := *a.SubagentGroupHitRate, float64(recs[1].CachedTokens+recs[2].CachedTokens)/128; got != want {
		t.Errorf("subagent group hit rate %v, want %v", got, want)
	}
}
