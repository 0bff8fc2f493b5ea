package replay

import (
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/offline-router/offline-router/internal/protocol"
)

// AgenticBuiltin is the built-in agentic workload (replay --workload
// agentic): coding-agent plays, arriving as a Poisson process, each a main
// agent's loop of model turns and tool calls that now and then hands work
// to subagents forked from its context, as docs/replay.md ("The built-in
// agentic workload") describes with the published figures it follows.
//
// Every play's prompts start with the same system prompt and tool schema
// (agenticSystemTokens); the main agent's first prompt adds the play's task,
// and each later one the turn before's answer and the tool's result, after
// a tool wait. At a turn past the first, with probability
// agenticSpawnChance (at most agenticMaxSpawns times a play), the answer
// spawns 1 to agenticMaxFanOut subagents: each starts, once the turn ends,
// from the main agent's context with that answer and a task of its own
// (forked), or with fresh set from the shared prompt and its task alone,
// and runs its own loop; the main agent's next turn waits for them all
// (join) and reads their reports. A conversation ends when its turns are
// done or its next prompt would pass agenticMaxContext tokens.
//
// The answer's full blocks are named in every prompt that holds it by the
// same ids (the next turn's and the subagents'), so the worker that made
// it has them cached (generated.go). Products are rounded alone, so one
// platform makes the same workload on every run and build; the rare
// wedge and tail draws of ExpFloat64 take math.Exp and math.Log, whose
// last bit may differ between platforms (as for the chat workload).
func AgenticBuiltin(seed uint64, plays int, fresh bool, blockSize uint64) []Request {
	g := &agenticGen{rng: rand.New(rand.NewPCG(seed, 0xa6e)), bs: blockSize, fresh: fresh}
	// The shared prompt's full blocks are the same in every play; the
	// block it ends in holds the play's own task too.
	for range agenticSystemTokens / blockSize {
		g.system = append(g.system, g.newID())
	}
	t := 0.0
	for p := range plays {
		t += float64(g.rng.ExpFloat64() * agenticPlayIntervalMS)
		g.play(p, t)
	}
	return g.out
}

// The workload's shape; docs/replay.md gives each figure's source.
const (
	agenticPlayIntervalMS = 4000    // mean time between plays' starts
	agenticSystemTokens   = 16_000  // system prompt and tool schema, shared by every play
	agenticMaxContext     = 131_072 // a conversation ends before its prompt passes this
	agenticSpawnChance    = 0.05    // a turn past the first spawns subagents
	agenticMaxSpawns      = 3
	agenticMaxFanOut      = 5
	agenticMaxTask        = 800  // a subagent's task, tokens
	agenticMaxReport      = 1000 // a subagent's report to the main agent, tokens
)

// agenticGen makes the workload, request by request, in an order where
// every dependency names an earlier request.
type agenticGen struct {
	rng    *rand.Rand
	bs     uint64
	fresh  bool // subagents start from the shared prompt, not forked
	system []protocol.LocalBlockHash
	next   protocol.LocalBlockHash // the last id given
	out    []Request
	ids    []protocol.LocalBlockHash // scratch for a prompt's ids
	packed []byte                    // scratch for keepIDs
}

func (g *agenticGen) newID() protocol.LocalBlockHash { g.next++; return g.next }

// agentContext is a conversation's prompt so far: the last request's (by
// index), its ids and tokens, and the ids of the full blocks its answer
// fills past them (what every prompt holding the answer names there).
type agentContext struct {
	at      int32
	ids     []protocol.LocalBlockHash
	in, out uint64
	answer  []protocol.LocalBlockHash
}

// extend is the prompt that holds c's prompt and answer and then added
// tokens of its own: c's full blocks, its answer's, and new ones.
func (g *agenticGen) extend(c *agentContext, added uint64) (ids []protocol.LocalBlockHash, in uint64) {
	in = c.in + c.out + added
	ids = append(append(g.ids[:0], c.ids[:c.in/g.bs]...), c.answer...)
	for uint64(len(ids)) < blocksOf(in, g.bs) {
		ids = append(ids, g.newID())
	}
	g.ids = ids
	return ids, in
}

// emit appends a request of the conversation with the prompt ids and in
// tokens and returns its context.
func (g *agenticGen) emit(id, play, conv string, ids []protocol.LocalBlockHash, in uint64, deps []Dependency) *agentContext {
	out := agenticOutput(g.rng)
	r := Request{ID: id, InputTokens: in, OutputTokens: out, Deps: deps, Agent: &Agent{Play: play, Conversation: conv}}
	g.packed = r.keepIDs(ids, true, g.packed)
	c := &agentContext{at: int32(len(g.out)), ids: slices.Clone(ids), in: in, out: out}
	for range (in+out)/g.bs - in/g.bs {
		c.answer = append(c.answer, g.newID())
	}
	g.out = append(g.out, r)
	return c
}

// play makes play p, starting at t.
func (g *agenticGen) play(p int, t float64) {
	play := "play-" + strconv.Itoa(p)
	// The first prompt: the shared prompt, then the task.
	ids, in := g.opening(200 + uint64(g.rng.IntN(1800)))
	c := g.emit(play+"-t0", play, "main", ids, in, nil)
	g.out[c.at].Arrival = t
	spawns, turns := 0, agenticTurns(g.rng)
	for turn := 1; turn < turns; turn++ {
		added, deps := agenticToolResult(g.rng), []Dependency{{On: c.at, Relation: Sequence, DelayMS: agenticToolWaitMS(g.rng)}}
		// Subagents are spawned only where the turn that reads their
		// reports fits the context too, so every one is joined.
		if spawns < agenticMaxSpawns && turn > 1 && g.rng.Float64() < agenticSpawnChance && c.in+c.out+agenticMaxFanOut*agenticMaxReport <= agenticMaxContext {
			// The turn before handed work to subagents: the main agent
			// waits for them rather than a tool, and reads their reports.
			spawns++
			deps[0].DelayMS = 0
			added = 0
			for k := range 1 + g.rng.IntN(agenticMaxFanOut) {
				conv := "sub-" + strconv.Itoa(spawns) + "." + strconv.Itoa(k)
				deps = append(deps, Dependency{On: g.subagent(play, conv, c), Relation: Join})
				added += 150 + uint64(g.rng.IntN(agenticMaxReport-150)) // its report
			}
		}
		if c.in+c.out+added > agenticMaxContext {
			break
		}
		ids, in := g.extend(c, added)
		c = g.emit(play+"-t"+strconv.Itoa(turn), play, "main", ids, in, deps)
	}
}

// opening is a prompt of the shared prompt and then task tokens.
func (g *agenticGen) opening(task uint64) (ids []protocol.LocalBlockHash, in uint64) {
	in = agenticSystemTokens + task
	ids = append(g.ids[:0], g.system...)
	for uint64(len(ids)) < blocksOf(in, g.bs) {
		ids = append(ids, g.newID())
	}
	g.ids = ids
	return ids, in
}

// subagent makes a subagent conversation spawned by the main agent's
// request parent (whose context has room for its task), started when that
// request ends, and gives its last request's index.
func (g *agenticGen) subagent(play, conv string, parent *agentContext) int32 {
	task := 150 + uint64(g.rng.IntN(agenticMaxTask-150))
	var ids []protocol.LocalBlockHash
	var in uint64
	if g.fresh {
		ids, in = g.opening(task)
	} else {
		ids, in = g.extend(parent, task)
	}
	c := g.emit(play+"-"+conv+"-t0", play, conv, ids, in, []Dependency{{On: parent.at, Relation: Spawn}})
	for turn, turns := 1, subagentTurns(g.rng); turn < turns; turn++ {
		added, wait := agenticToolResult(g.rng), agenticToolWaitMS(g.rng)
		if c.in+c.out+added > agenticMaxContext {
			break
		}
		ids, in := g.extend(c, added)
		c = g.emit(play+"-"+conv+"-t"+strconv.Itoa(turn), play, conv, ids, in,
			[]Dependency{{On: c.at, Relation: Sequence, DelayMS: wait}})
	}
	return c.at
}

// agenticTurns draws a main agent's turns: 10 and an exponential draw of
// mean 33 (in all a median of 33), at most 300.
func agenticTurns(rng *rand.Rand) int { return min(10+int(rng.ExpFloat64()*33), 300) }

// subagentTurns draws a subagent's turns: 2 and an exponential draw of
// mean 4, at most 40.
func subagentTurns(rng *rand.Rand) int { return min(2+int(rng.ExpFloat64()*4), 40) }

// agenticOutput draws a turn's output tokens: 40 and an exponential draw
// of mean 260, at most 4000 (most turns are a tool call).
func agenticOutput(rng *rand.Rand) uint64 { return min(40+uint64(rng.ExpFloat64()*260), 4000) }

// agenticToolResult draws a tool result's tokens: 50 and an exponential
// draw of mean 1900, at most 32000.
func agenticToolResult(rng *rand.Rand) uint64 {
	return min(50+uint64(rng.ExpFloat64()*1900), 32_000)
}

// agenticToolWaitMS draws a tool call's time, ms: a hyperexponential,
// an exponential draw of mean 6 s with probability 0.8, else of mean 27 s
// (median 5.2 s, p99 81 s, mean 10.2 s), at most 10 minutes.
func agenticToolWaitMS(rng *rand.Rand) float64 {
	mean := 6000.0
	if rng.Float64() >= 0.8 {
		mean = 27_000
	}
	return min(float64(rng.ExpFloat64()*mean), 600_000)
}
