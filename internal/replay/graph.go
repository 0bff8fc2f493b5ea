package replay

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The canonical form of an agentic trace, which every agentic reader
// lowers to (Agentic Mooncake v2's, as AISimulate and Dynamo lower theirs):
// requests, each in a conversation of a play, released by its dependencies
// on the virtual clock rather than at a timestamp.

// Trigger is what of a request a dependency waits for.
type Trigger uint8

const (
	// OnCompletion waits for the request's end.
	OnCompletion Trigger = iota
	// OnDispatch waits for the request's dispatch to its (first) worker:
	// a subagent spawned while its parent's request is still in flight.
	OnDispatch
)

var triggerNames = [...]string{OnCompletion: "completion", OnDispatch: "dispatch"}

func (t Trigger) String() string { return triggerNames[t] }

// Relation is why a request waits for another, as v2 names it.
type Relation uint8

const (
	// Sequence: the next request of one conversation.
	Sequence Relation = iota
	// Spawn: the first request of a conversation its parent started.
	Spawn
	// Join: a parent's request waiting on a child conversation's end.
	Join
	// ReplayBarrier: an order the recording showed between conversations.
	ReplayBarrier
)

var relationNames = [...]string{Sequence: "sequence", Spawn: "spawn", Join: "join", ReplayBarrier: "replay_barrier"}

func (r Relation) String() string { return relationNames[r] }

// Dependency is one thing a request waits for.
type Dependency struct {
	On       int32 // the request waited on: its index in the trace
	Trigger  Trigger
	Relation Relation
	DelayMS  float64 // after the trigger: the recorded think or tool time
}

// Kind is an agentic request's part in its play, for the metrics.
type Kind uint8

const (
	// KindRoot is a root conversation's request that no earlier request
	// of its conversation precedes: a play's start.
	KindRoot Kind = iota
	// KindToolContinuation is a root conversation's later request: the
	// agent going on after a tool's answer.
	KindToolContinuation
	// KindSubagent is any request of a spawned conversation.
	KindSubagent
)

var kindNames = [...]string{KindRoot: "root", KindToolContinuation: "tool_continuation", KindSubagent: "subagent"}

func (k Kind) String() string { return kindNames[k] }

// Agent is a request's place in an agent play.
type Agent struct {
	Play         string // the play (instance): the scope of its affinity keys
	Conversation string // its conversation (session) in the play
	// Root is its conversation's root conversation, Parent the one that
	// spawned it ("" for a root), from the spawn dependencies (lineage).
	Root, Parent string
	Kind         Kind
}

// isRoot reports whether r is released at its timestamp: no dependency
// and no delay after an earlier turn.
func (r *Request) isRoot() bool { return r.DelayMS == nil && len(r.Deps) == 0 }

// checkGraph refuses what no replay could run: a dependency on itself, on
// a request of another play, and a cycle (which would never be released),
// naming the requests; and sets every request's lineage and kind (Agent's
// Root, Parent and Kind), refusing a conversation whose lineage is not one
// tree: spawned from two conversations, from itself, or in a cycle, as
// Dynamo's adapters refuse to guess one. Linear in the requests and their
// dependencies.
func checkGraph(reqs []Request) error {
	for i := range reqs {
		r := &reqs[i]
		for _, d := range r.Deps {
			on := &reqs[d.On]
			switch {
			case int(d.On) == i:
				return fmt.Errorf("request %s cannot depend on itself", r.ID)
			case on.Agent.Play != r.Agent.Play:
				return fmt.Errorf("request %s in play %s depends on request %s of play %s: a dependency stays in its play", r.ID, r.Agent.Play, on.ID, on.Agent.Play)
			}
		}
	}
	if err := acyclic(reqs); err != nil {
		return err
	}
	return lineage(reqs)
}

// acyclic refuses a cycle, by Kahn's order: what is never released is in
// one, or waits on one.
func acyclic(reqs []Request) error {
	waits := make([]int32, len(reqs))
	after := make([][]int32, len(reqs))
	var ready []int32
	for i := range reqs {
		waits[i] = int32(len(reqs[i].Deps))
		for _, d := range reqs[i].Deps {
			after[d.On] = append(after[d.On], int32(i))
		}
		if waits[i] == 0 {
			ready = append(ready, int32(i))
		}
	}
	released := 0
	for len(ready) > 0 {
		i := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		released++
		for _, j := range after[i] {
			if waits[j]--; waits[j] == 0 {
				ready = append(ready, j)
			}
		}
	}
	if released == len(reqs) {
		return nil
	}
	var blocked []string
	for i := range reqs {
		if waits[i] > 0 && len(blocked) < 5 {
			blocked = append(blocked, reqs[i].ID)
		}
	}
	return fmt.Errorf("a cycle of dependencies: %d requests would never be released (among them %s)", len(reqs)-released, strings.Join(blocked, ", "))
}

// conversationKey names a conversation: its play and its session.
type conversationKey struct{ play, conversation string }

// lineage sets each request's Root, Parent and Kind: a conversation's
// parent is the conversation of the requests its spawn dependencies name
// (sequence, join and barrier dependencies say nothing of it).
func lineage(reqs []Request) error {
	parent := map[conversationKey]string{}
	for i := range reqs {
		r := &reqs[i]
		for _, d := range r.Deps {
			if d.Relation != Spawn {
				continue
			}
			k := conversationKey{r.Agent.Play, r.Agent.Conversation}
			p := reqs[d.On].Agent.Conversation
			switch old, ok := parent[k]; {
			case p == k.conversation:
				return fmt.Errorf("request %s: conversation %s of play %s spawns itself (its lineage is not a tree)", r.ID, p, k.play)
			case ok && old != p:
				return fmt.Errorf("request %s: conversation %s of play %s is spawned by two conversations, %s and %s (its lineage is not a tree)", r.ID, k.conversation, k.play, old, p)
			}
			parent[k] = p
		}
	}
	// A conversation's root is found by walking up, each conversation
	// once: a walk marks what it passes (walking), and one that meets its
	// own mark is a cycle.
	const walking = "\x00walking"
	root := map[conversationKey]string{}
	var walk []conversationKey
	rootOf := func(k conversationKey) (string, error) {
		walk = walk[:0]
		for {
			r, ok := root[k]
			if r == walking {
				return "", fmt.Errorf("conversations of play %s spawn each other in a cycle (through %s): their lineage is not a tree", k.play, k.conversation)
			}
			if !ok {
				p, spawned := parent[k]
				if spawned {
					root[k] = walking
					walk = append(walk, k)
					k = conversationKey{k.play, p}
					continue
				}
				r = k.conversation
				root[k] = r
			}
			for _, w := range walk {
				root[w] = r
			}
			return r, nil
		}
	}
	for i := range reqs {
		a := reqs[i].Agent
		k := conversationKey{a.Play, a.Conversation}
		var err error
		if a.Root, err = rootOf(k); err != nil {
			return err
		}
		a.Parent = parent[k]
		switch {
		case a.Parent != "":
			a.Kind = KindSubagent
		case slices.ContainsFunc(reqs[i].Deps, func(d Dependency) bool { return reqs[d.On].Agent.Conversation == a.Conversation }):
			// It follows a request of its own conversation, whatever the
			// relation (a v1 fan-in is a join).
			a.Kind = KindToolContinuation
		default:
			a.Kind = KindRoot
		}
	}
	return nil
}

// errNoRequests is every reader's refusal of a trace with nothing in it.
var errNoRequests = errors.New("the trace has no requests")
