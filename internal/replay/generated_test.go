package replay

import (
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// A later turn whose prompt holds the turn before's answer, under the ids
// it names there, finds the answer's full blocks cached on the worker
// that made it; one that names other ids there finds the prompt's only.
// (Catches: the host never giving a worker the next turn's ids, or giving
// them when the next prompt does not hold this one.)
func TestLaterTurnFindsTheAnswerCached(t *testing.T) {
	delay := 10.0
	for _, c := range []struct {
		name   string
		second []protocol.LocalBlockHash
		cached uint64
	}{
		{"holds the answer", []protocol.LocalBlockHash{1, 2, 20, 21, 22, 23, 24}, 96},
		{"another prompt", []protocol.LocalBlockHash{1, 9, 20, 21, 22, 23, 24}, 16},
	} {
		trace := []Request{
			{ID: "a", Session: "s", InputTokens: 40, OutputTokens: 60, HashIDs: []protocol.LocalBlockHash{1, 2, 3}},
			{ID: "b", Session: "s", DelayMS: &delay, InputTokens: 100, OutputTokens: 2, HashIDs: c.second},
		}
		cfg := routerConfig(protocol.PolicyKV)
		cfg.BlockSize = 16
		cl := cluster.Default(1)
		cl.BlockSize = 16
		res, err := Run(trace, Options{Cluster: cl, Router: cfg, Records: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Records()[1].CachedTokens; got != c.cached {
			t.Errorf("%s: b found %d tokens cached, want %d", c.name, got, c.cached)
		}
	}
}

// The next turn: a session's next request; in an agentic trace the
// request of the same conversation that follows in sequence, not one of
// another conversation that waits on it.
func TestSuccessors(t *testing.T) {
	a := func(conv string) *Agent { return &Agent{Play: "p", Conversation: conv} }
	trace := []Request{
		{ID: "s0", Session: "s"}, {ID: "x"}, {ID: "s1", Session: "s"},
		{ID: "r0", Agent: a("root")},
		{ID: "c0", Agent: a("child"), Deps: []Dependency{{On: 3, Trigger: OnDispatch, Relation: Spawn}}},
		{ID: "r1", Agent: a("root"), Deps: []Dependency{{On: 4, Relation: Join}, {On: 3, Relation: Sequence}}},
	}
	want := []int32{2, -1, -1, 5, -1, -1}
	got := successors(trace)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s's next turn: got %d, want %d", trace[i].ID, got[i], want[i])
		}
	}
}
