package replay

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// TestRecycledPasses: a pass-k instance renames its requests and play,
// waits on its own pass's requests, keeps the blocks other plays share and
// salts its own, differently at each pass. (Catches a dependency left on
// pass 0, a shared prompt salted (no play of a later pass would find it),
// a play's own context kept (it would hit its earlier pass's cache), and
// two passes salted alike.)
func TestRecycledPasses(t *testing.T) {
	ids := func(xs ...protocol.LocalBlockHash) []protocol.LocalBlockHash { return xs }
	base := []Request{
		{ID: "a0", Agent: &Agent{Play: "a", Conversation: "main"}, InputTokens: 48, OutputTokens: 1, HashIDs: ids(1, 2, 3)},
		{ID: "a1", Agent: &Agent{Play: "a", Conversation: "main"}, InputTokens: 64, OutputTokens: 1, HashIDs: ids(1, 2, 3, 4),
			Deps: []Dependency{{On: 0, Relation: Sequence, DelayMS: 5}}},
		{ID: "b0", Agent: &Agent{Play: "b", Conversation: "main"}, InputTokens: 32, OutputTokens: 1, HashIDs: ids(1, 9)},
	}
	if err := checkGraph(base); err != nil {
		t.Fatal(err)
	}
	out := recycled(base, 3)
	if len(out) != 9 {
		t.Fatalf("%d requests, want 3 passes of 3", len(out))
	}
	if err := checkGraph(out); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := range out {
		if seen[out[i].ID] {
			t.Fatalf("request id %s twice", out[i].ID)
		}
		seen[out[i].ID] = true
	}
	a1, a1b, a1c := out[1], out[4], out[7]
	if a1b.ID != "a1#1" || a1b.Agent.Play != "a#1" || a1b.Deps[0].On != 3 || a1c.Deps[0].On != 6 || a1b.Deps[0].DelayMS != 5 {
		t.Errorf("pass 1's a1: %+v, agent %+v", a1b, a1b.Agent)
	}
	one, two := a1b.appendIDs(nil), a1c.appendIDs(nil)
	if one[0] != 1 || two[0] != 1 {
		t.Errorf("the shared block 1 became %d and %d", one[0], two[0])
	}
	for k := 1; k < 4; k++ {
		if one[k] == a1.HashIDs[k] || two[k] == one[k] {
			t.Errorf("a's own block %d: %d, %d, %d across the passes", k, a1.HashIDs[k], one[k], two[k])
		}
	}
	if !slices.Equal(out[3].appendIDs(nil), one[:3]) {
		t.Error("pass 1's a0 and a1 name a's blocks by other ids")
	}
	if base[1].Deps[0].On != 0 || base[1].HashIDs[1] != 2 || base[1].Agent.Play != "a" {
		t.Error("recycling changed the base trace")
	}
}

// TestFirstPlays keeps the first n plays in the order a closed loop
// starts them, whole, their dependencies renumbered. (Catches a play cut
// in two, the order of requests taken for the order of plays, and a
// dependency left on its old index.)
func TestFirstPlays(t *testing.T) {
	trace := recycled(AgenticBuiltin(2, 5, false, 512), 2)
	if err := checkGraph(trace); err != nil {
		t.Fatal(err)
	}
	kept := firstPlays(trace, 7)
	if err := checkGraph(kept); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for i := range trace {
		if p := trace[i].Agent.Play; len(want) < 7 || want[p] > 0 {
			want[p]++
		}
	}
	got := map[string]int{}
	for i := range kept {
		r := &kept[i]
		got[r.Agent.Play]++
		for _, d := range r.Deps {
			if on := kept[d.On]; on.Agent.Play != r.Agent.Play {
				t.Fatalf("%s waits on %s of another play", r.ID, on.ID)
			}
		}
	}
	if len(got) != 7 || !maps.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
}

// TestRecycledRunIsTheDuration: recycled for D seconds by two lanes, the
// run holds every play whose lane opened before D, whole, some of them a
// later pass's, and the next play in order would have started at D or
// later; the run is the same bytes as the replay of those plays alone.
// (Catches a play started past the duration, the loop stopped before it,
// passes never made, and a probe whose run differs from the replay.)
func TestRecycledRunIsTheDuration(t *testing.T) {
	base := AgenticBuiltin(4, 3, false, 512)
	if err := checkGraph(base); err != nil {
		t.Fatal(err)
	}
	e := &Experiment{Workload: Workload{ReplayConcurrency: 2, BenchmarkDurationS: 900}}
	cl := cluster.Default(4)
	opt := Options{Cluster: cl, Router: routerConfig(protocol.PolicyKV), Concurrency: 2, Records: true}
	res, err := e.recycledRun(base, opt)
	if err != nil {
		t.Fatal(err)
	}
	starts := map[string]float64{}
	for _, r := range res.Records() {
		if at, ok := starts[r.PlayID]; !ok || r.ArrivalMS < at {
			starts[r.PlayID] = r.ArrivalMS
		}
	}
	recycledPlays := 0
	for play, at := range starts {
		if at >= 900_000 {
			t.Errorf("play %s started at %v ms, past the duration", play, at)
		}
		if strings.Contains(play, "#") {
			recycledPlays++
		}
	}
	if recycledPlays == 0 {
		t.Fatalf("%d plays ran, none recycled: the test needs a longer duration", len(starts))
	}
	all := recycled(base, 2*(len(starts)/3+2))
	again, err := Run(firstPlays(all, len(starts)), opt)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.Records(), res.Records()) {
		t.Error("the replay of the plays alone differs from the recycled run")
	}
	one, err := Run(firstPlays(all, len(starts)+1), opt)
	if err != nil {
		t.Fatal(err)
	}
	next := one.Records()[len(one.Records())-1].PlayID
	for _, r := range one.Records() {
		if r.PlayID == next && r.ArrivalMS < 900_000 {
			t.Errorf("play %s, the next in order, would start at %v ms, before the duration", next, r.ArrivalMS)
		}
	}
}
