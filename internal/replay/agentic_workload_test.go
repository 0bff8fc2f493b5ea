package replay

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// TestAgenticBuiltinShape: the built-in agentic workload is what its doc
// says. Every play opens on the same system prompt blocks; a later turn
// holds the turn before's prompt and names its answer's blocks where the
// generated-token cache keeps them; a subagent's first prompt is its
// parent's context with the same answer blocks as the parent's next turn;
// every dependency names an earlier request of its play; no prompt passes
// the context limit. A fresh subagent starts from the shared prompt and its
// task alone. (Catches: a play's own system prompt, fresh answer ids
// in the subagent or the next turn (no generated hit), a subagent spawned
// from another request than its fork's, a fresh one forked, a turn released before what it
// reads, a context that grows past the limit.)
func TestAgenticBuiltinShape(t *testing.T) {
	for _, c := range []struct {
		bs    uint64
		fresh bool
	}{{16, false}, {512, false}, {512, true}} {
		bs := c.bs
		trace := AgenticBuiltin(3, 60, c.fresh, bs)
		if err := checkGraph(trace); err != nil {
			t.Fatal(err)
		}
		system := int(agenticSystemTokens / bs)
		ids := func(i int32) []protocol.LocalBlockHash { return trace[i].appendIDs(nil) }
		var first []protocol.LocalBlockHash
		next := successors(trace)
		for i := range trace {
			r := &trace[i]
			p := ids(int32(i))
			if r.InputTokens > agenticMaxContext || uint64(len(p)) != blocksOf(r.InputTokens, bs) {
				t.Fatalf("bs %d: %s has %d tokens in %d blocks", bs, r.ID, r.InputTokens, len(p))
			}
			if first == nil {
				first = p[:system]
			}
			if !slices.Equal(p[:system], first) {
				t.Fatalf("bs %d: %s does not open on the shared system prompt", bs, r.ID)
			}
			for _, d := range r.Deps {
				if int(d.On) >= i {
					t.Fatalf("bs %d: %s depends on a later request, %s", bs, r.ID, trace[d.On].ID)
				}
				if d.Relation == Join || d.Relation == ReplayBarrier {
					continue
				}
				on := &trace[d.On]
				if c.fresh && d.Relation == Spawn {
					// Only the shared prompt and its task.
					if p[system] == ids(d.On)[system] || r.InputTokens > agenticSystemTokens+agenticMaxTask {
						t.Fatalf("bs %d: fresh subagent %s is forked from %s", bs, r.ID, on.ID)
					}
					continue
				}
				// What it was spawned from or follows: its prompt and
				// answer lead this prompt.
				lead := ids(d.On)[:on.InputTokens/bs]
				if !slices.Equal(p[:len(lead)], lead) {
					t.Fatalf("bs %d: %s does not hold the prompt of %s", bs, r.ID, on.ID)
				}
				if n := next[d.On]; n >= 0 {
					upto := (on.InputTokens + on.OutputTokens) / bs
					if path := generatedPath(ids(d.On), ids(n), on.InputTokens, on.OutputTokens, bs); upto > on.InputTokens/bs && path == nil {
						t.Fatalf("bs %d: %s's next turn %s does not name its answer's blocks", bs, on.ID, trace[n].ID)
					}
					if !slices.Equal(p[:upto], ids(n)[:upto]) {
						t.Fatalf("bs %d: %s and %s name %s's answer by other ids", bs, r.ID, trace[n].ID, on.ID)
					}
				}
			}
		}
	}
}

// TestAgenticBuiltinFollowsItsSources: over many plays the workload has
// the figures docs/replay.md gives for it: a main agent's median turns
// near 33, tool waits of median about 5.2 s and p99 about 81 s,
// subagents making 30% to 55% of the requests, every one joined. Bounds are loose enough
// for any seed's sampling, tight enough to catch a mean taken for a
// rate, a mixture's branch swapped, or subagents never (or always)
// spawned.
func TestAgenticBuiltinFollowsItsSources(t *testing.T) {
	trace := AgenticBuiltin(11, 2000, false, 512)
	if err := checkGraph(trace); err != nil {
		t.Fatal(err)
	}
	turns := map[string]float64{}
	var waits []sample
	subagents := 0
	for i := range trace {
		r := &trace[i]
		if r.Agent.Kind == KindSubagent {
			subagents++
		} else {
			turns[r.Agent.Play]++
		}
		for _, d := range r.Deps {
			if d.Relation == Sequence && d.DelayMS > 0 {
				waits = append(waits, sample{d.DelayMS, 1})
			}
		}
	}
	// Every subagent conversation's last request is joined.
	lastOf, joined := map[string]int32{}, map[int32]bool{}
	for i := range trace {
		r := &trace[i]
		if r.Agent.Kind == KindSubagent {
			lastOf[r.Agent.Play+"/"+r.Agent.Conversation] = int32(i)
		}
		for _, d := range r.Deps {
			if d.Relation == Join {
				joined[d.On] = true
			}
		}
	}
	for conv, last := range lastOf {
		if !joined[last] {
			t.Fatalf("subagent %s is never joined", conv)
		}
	}
	var perPlay []sample
	for _, n := range turns {
		perPlay = append(perPlay, sample{n, 1})
	}
	w, n := summarize(waits), summarize(perPlay)
	share := float64(subagents) / float64(len(trace))
	if n.median < 25 || n.median > 38 || w.median < 4500 || w.median > 6000 || w.p99 < 65_000 || w.p99 > 100_000 || share < 0.3 || share > 0.55 {
		t.Errorf("median main turns %v, tool wait median %v p99 %v ms, subagent share %.3f", n.median, w.median, w.p99, share)
	}
}

// TestAgenticBuiltinIsSeeded: the same seed makes the same workload, to
// the byte, and another seed another. (Catches a draw from a global
// source or a map's order.)
func TestAgenticBuiltinIsSeeded(t *testing.T) {
	a, b, c := AgenticBuiltin(5, 30, false, 64), AgenticBuiltin(5, 30, false, 64), AgenticBuiltin(6, 30, false, 64)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("seed 5 made two workloads")
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("seeds 5 and 6 made the same workload")
	}
}

// TestAgenticRowsAndPlayUnits: on the built-in agentic workload the table
// has the agent rows, with intervals under repeats, and the verdicts
// resample plays, one unit each; the chat workload's table has none of
// the rows. (Catches the rows dropped or printed without the repeats'
// summary, and the bootstrap taking each request, or each conversation,
// as its own unit.)
func TestAgenticRowsAndPlayUnits(t *testing.T) {
	e := experiment(0, 2, "round_robin", policy("kv", protocol.PolicyKV), policy("round_robin", protocol.PolicyRoundRobin))
	e.Workload.BuiltinPlays = 6
	trace, _, err := e.Load()
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(trace, Options{Cluster: cluster.Default(4), Router: routerConfig(protocol.PolicyKV), Records: true})
	if err != nil {
		t.Fatal(err)
	}
	if units, _ := e.clusters([]*Result{res}); units != 6 {
		t.Errorf("the bootstrap has %d units, want the 6 plays", units)
	}
	rep := runExperiment(t, e)
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"agent plays", "mean play serving time (ms)", "subagent: mean TTFT (ms)", "subagent colocation"} {
		line := lineOf(table.String(), row)
		if line == "" || strings.Count(line, "±") != 2 {
			t.Errorf("row %q: %q, want both contenders' means ± intervals", row, line)
		}
	}
	if !strings.Contains(table.String(), "paired bootstrap over agent plays") {
		t.Errorf("the verdicts do not say they resample plays:\n%s", table.String())
	}
	chat := runExperiment(t, experiment(10, 2, "", policy("kv", protocol.PolicyKV)))
	table.Reset()
	if err := WriteTable(&table, chat); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(table.String(), "agent plays") || strings.Contains(table.String(), "subagent") {
		t.Errorf("the chat workload's table has agent rows:\n%s", table.String())
	}
}

// lineOf is the table's line for the row named name ("" when none).
func lineOf(table, name string) string {
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), name+" ") {
			return line
		}
	}
	return ""
}
