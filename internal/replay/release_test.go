package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
	"pgregory.net/rapid"
)

// randomPlays draws agent plays whose dependencies form a random DAG in
// each play: every request may wait on earlier requests of its play, by
// completion or (a spawn, one at most) by dispatch, after a delay.
func randomPlays(t *rapid.T) []Request {
	var reqs []Request
	plays := rapid.IntRange(1, 3).Draw(t, "plays")
	for p := range plays {
		first := len(reqs)
		for k := range rapid.IntRange(1, 8).Draw(t, "requests") {
			i := len(reqs)
			r := Request{ID: fmt.Sprintf("p%d-%d", p, k), InputTokens: uint64(rapid.IntRange(1, 600).Draw(t, "in")),
				OutputTokens: uint64(rapid.IntRange(0, 20).Draw(t, "out")),
				Agent:        &Agent{Play: fmt.Sprint("p", p), Conversation: fmt.Sprint("c", i)}}
			r.HashIDs = make([]protocol.LocalBlockHash, blocksOf(r.InputTokens, 64))
			for b := range r.HashIDs {
				r.HashIDs[b] = protocol.LocalBlockHash(1 + b + 1000*rapid.IntRange(0, 2).Draw(t, "prefix"))
			}
			spawned := false
			for on := first; on < i && k > 0; on++ {
				if !rapid.Bool().Draw(t, "waits") {
					continue
				}
				d := Dependency{On: int32(on), Trigger: OnCompletion, Relation: Sequence, DelayMS: float64(rapid.IntRange(0, 50).Draw(t, "delay"))}
				if !spawned && rapid.Bool().Draw(t, "spawn") {
					d.Trigger, d.Relation, spawned = OnDispatch, Spawn, true
				}
				r.Deps = append(r.Deps, d)
			}
			if len(r.Deps) == 0 {
				r.Arrival = float64(rapid.IntRange(0, 100).Draw(t, "arrival"))
			}
			reqs = append(reqs, r)
		}
	}
	if err := checkGraph(reqs); err != nil {
		t.Fatal(err)
	}
	return reqs
}

// streamTimes are, by request, when the command stream placed it, had
// it dispatched and ended it.
type streamTimes struct{ placed, dispatched, ended map[string]float64 }

func readStreamTimes(t *rapid.T, cmds []byte) streamTimes {
	st := streamTimes{map[string]float64{}, map[string]float64{}, map[string]float64{}}
	sc := bufio.NewScanner(bytes.NewReader(cmds))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var c struct {
			Op        string  `json:"op"`
			NowMS     float64 `json:"now_ms"`
			RequestID string  `json:"request_id"`
		}
		if sc.Bytes()[0] == '#' || json.Unmarshal(sc.Bytes(), &c) != nil {
			continue
		}
		switch c.Op {
		case string(protocol.OpPlace):
			st.placed[c.RequestID] = c.NowMS
		case string(protocol.OpDispatchCommitted):
			st.dispatched[c.RequestID] = c.NowMS
		case string(protocol.OpRequestTerminal):
			st.ended[c.RequestID] = c.NowMS
		}
	}
	return st
}

// A dependency is never released early, nor late: each request that
// waits is placed exactly when the last of its dependencies' triggers
// (as the command stream shows them) plus its delay lets it go; and a
// closed loop's lanes never hold more plays at once than there are.
func TestDependenciesReleaseOnTime(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reqs := randomPlays(t)
		lanes := rapid.IntRange(0, 2).Draw(t, "lanes")
		var cmds bytes.Buffer
		cfg := routerConfig(protocol.PolicyKV)
		cfg.BlockSize = 64
		c := cluster.Default(2)
		c.BlockSize = 64
		if _, err := Run(slices.Clone(reqs), Options{Cluster: c, Router: cfg, Commands: &cmds, Concurrency: lanes}); err != nil {
			t.Fatal(err)
		}
		st := readStreamTimes(t, cmds.Bytes())
		for i := range reqs {
			r := &reqs[i]
			if len(r.Deps) == 0 {
				continue
			}
			release := math.Inf(-1)
			for _, d := range r.Deps {
				on := reqs[d.On].ID
				trig, ok := st.ended[on]
				if d.Trigger == OnDispatch {
					trig, ok = st.dispatched[on]
				}
				if !ok {
					t.Fatalf("%s waits on %s's %s, which the stream never shows", r.ID, on, d.Trigger)
				}
				release = max(release, trig+d.DelayMS)
			}
			if got := st.placed[r.ID]; math.Abs(got-release) > 1e-9 {
				t.Fatalf("%s placed at %v; its dependencies let it go at %v", r.ID, got, release)
			}
		}
		if lanes == 0 {
			return
		}
		// Plays in flight: from their first place to their last end.
		type span struct{ from, to float64 }
		spans := map[string]*span{}
		for i := range reqs {
			p := reqs[i].Agent.Play
			s := spans[p]
			if s == nil {
				s = &span{math.Inf(1), math.Inf(-1)}
				spans[p] = s
			}
			s.from, s.to = min(s.from, st.placed[reqs[i].ID]), max(s.to, st.ended[reqs[i].ID])
		}
		for p, s := range spans {
			inFlight := 0
			for _, o := range spans {
				if o.from <= s.from && s.from < o.to {
					inFlight++
				}
			}
			if inFlight > lanes {
				t.Fatalf("play %s started at %v with %d plays in flight, on %d lanes", p, s.from, inFlight, lanes)
			}
		}
	})
}
