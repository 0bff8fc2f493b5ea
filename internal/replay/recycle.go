package replay

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Recycling plays for a duration (Workload.BenchmarkDurationS, AIPerf's
// --benchmark-duration): the closed loop's lanes start the trace's plays
// in order and, past its last, its plays again as new instances, pass
// after pass, until a lane opens at the duration or later; the plays
// started run to their end. A pass-k instance of a play is the play with
// its request ids, play (or session) names suffixed #k, and its blocks
// that no other play of the trace names salted by the pass: a new run of
// the task, which finds neither its earlier passes' own context nor
// anything else's, while a prefix the trace's plays share (a system
// prompt) stays shared.
//
// How many plays start depends on how fast the contender serves them, so
// a run is found in two steps: a probe over passes enough (doubled until
// some play is left unstarted) counts the plays started before the
// duration, and the replay proper runs those plays alone. The probe's
// events are the replay's own up to there (the plays left out never
// started), so the replay is the run the duration describes.

// maxRecycledRequests bounds a recycled replay's requests, each held in
// memory with its state while the probe runs (some 9 KB a request of the
// agentic workload): about --plays' bound of 5,000 plays.
const maxRecycledRequests = 300_000

// recycledRun replays the trace recycled for the workload's duration
// under opt (its streams, records and progress given to the replay
// proper only).
func (e *Experiment) recycledRun(base []Request, opt Options) (*Result, error) {
	probe := opt
	probe.Commands, probe.Responses, probe.DecodeCommands, probe.DecodeResponses = nil, nil, nil, nil
	probe.Records, probe.Progress = false, nil
	probe.StartBeforeMS = e.Workload.BenchmarkDurationS * 1000
	plays := playsOf(base)
	for passes := 2; ; passes *= 2 {
		if passes > maxRecycledRequests/max(len(base), 1) {
			return nil, fmt.Errorf("--benchmark-duration %v s: more than %d passes of the trace's %d plays would start, past the %d requests a recycled replay holds: give a shorter duration", e.Workload.BenchmarkDurationS, passes/2, plays, maxRecycledRequests)
		}
		trace := recycled(base, passes)
		res, err := Run(trace, probe)
		if err != nil {
			return nil, err
		}
		if res.playsStarted == 0 { // every play started: more may have
			continue
		}
		trace = firstPlays(trace, res.playsStarted)
		if opt.Progress != nil {
			opt.Progress = scaledProgress(opt.Progress, len(base), len(trace))
		}
		return Run(trace, opt)
	}
}

// scaledProgress reports a run of n requests as one of base, the total
// the progress was made for.
func scaledProgress(p func(done, total int), base, n int) func(done, total int) {
	return func(done, _ int) { p(done*base/n, base) }
}

// playKey is the play a closed loop counts r in (link keys its lanes by
// it): its agent play, else its session, else "" (a play of its own).
func playKey(r *Request) string {
	if r.Agent != nil {
		return r.Agent.Play
	}
	return r.Session
}

// playsOf counts the trace's plays.
func playsOf(trace []Request) int {
	seen, n := map[string]bool{}, 0
	for i := range trace {
		k := playKey(&trace[i])
		if k == "" || !seen[k] {
			n++
			seen[k] = true
		}
	}
	return n
}

// recycled is base followed by passes-1 new instances of it, as the file
// says; linear in the requests and their blocks.
func recycled(base []Request, passes int) []Request {
	// A block is the play's own when no other play names it.
	owner := map[protocol.LocalBlockHash]string{}
	shared := map[protocol.LocalBlockHash]bool{}
	var ids []protocol.LocalBlockHash
	for i := range base {
		r := &base[i]
		k := playKey(r)
		if k == "" {
			k = "\x00" + r.ID
		}
		ids = r.appendIDs(ids[:0])
		for _, h := range ids {
			if o, ok := owner[h]; !ok {
				owner[h] = k
			} else if o != k {
				shared[h] = true
			}
		}
	}
	sep := "#"
	for i := range base {
		r := &base[i]
		for _, name := range []string{r.ID, r.Session, r.ParentSession, playKey(r)} {
			for strings.Contains(name, sep) {
				sep += "#"
			}
		}
	}
	out := make([]Request, 0, len(base)*passes)
	out = append(out, base...)
	for k := 1; k < passes; k++ {
		seed := kvindex.Salt("recycle pass "+strconv.Itoa(k), "")
		for i := range base {
			r := base[i]
			r.ID = suffixed(r.ID, sep, k)
			r.Session, r.ParentSession = suffixed(r.Session, sep, k), suffixed(r.ParentSession, sep, k)
			if r.Agent != nil {
				a := *r.Agent
				a.Play = suffixed(a.Play, sep, k)
				r.Agent = &a
			}
			if len(r.Deps) > 0 {
				deps := make([]Dependency, len(r.Deps))
				for j, d := range r.Deps {
					d.On += int32(k * len(base))
					deps[j] = d
				}
				r.Deps = deps
			}
			salted := r.appendIDs(nil)
			for j, h := range salted {
				if !shared[h] {
					salted[j] = kvindex.SaltedBlockID(h, seed)
				}
			}
			r.HashIDs, r.packed = salted, nil // salted ids spread over 64 bits: packed, they would take more
			out = append(out, r)
		}
	}
	return out
}

// firstPlays keeps the requests of trace's first n plays, in the order a
// closed loop starts them (their first requests'), their dependencies
// renumbered.
func firstPlays(trace []Request, n int) []Request {
	ordinal, plays := map[string]int{}, 0
	at := make([]int32, len(trace)) // each request's index in the result, -1 when left out
	var out []Request
	for i := range trace {
		r := &trace[i]
		k := playKey(r)
		o, ok := ordinal[k]
		if k == "" || !ok {
			o, plays = plays, plays+1
			if k != "" {
				ordinal[k] = o
			}
		}
		at[i] = -1
		if o >= n {
			continue
		}
		at[i] = int32(len(out))
		out = append(out, *r)
	}
	for i := range out {
		if deps := out[i].Deps; len(deps) > 0 {
			out[i].Deps = make([]Dependency, len(deps))
			for j, d := range deps {
				d.On = at[d.On]
				out[i].Deps[j] = d
			}
		}
	}
	return out
}
