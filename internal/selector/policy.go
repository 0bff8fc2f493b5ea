package selector

import (
	"fmt"
	"math"

	"github.com/offline-router/offline-router/internal/protocol"
)

// The policy table: each policy declares what it reads of a candidate and
// how it picks, as Dynamo's worker-selection instances each name a type
// with its own inputs. It replaces the switches that chose a policy in
// three places, where a policy missing from one of them ran as another
// without a word; a policy with no entry here now fails the test that
// holds this table to protocol.Policies, and the engine fills only what
// the entry declares.

// Reads are the candidate fields a policy reads beyond Dynamo's cost
// (Overlap, PrefillTokens, DecodeBlocks, which every candidate carries for
// the evidence). The engine works out Key, Routed, Waiting and KVUsage only
// for a policy that declares them; ActiveRequests, a copied count, is
// always there.
type Reads uint8

// The fields a policy may read.
const (
	ReadsActiveRequests Reads = 1 << iota // Candidate.ActiveRequests
	ReadsKey                              // Candidate.Key
	ReadsRouted                           // Candidate.Routed and TreeBlocks: the routed-prompt tree
	ReadsWaiting                          // Candidate.Waiting
	ReadsKVUsage                          // Candidate.KVUsage
)

// Spec is one policy's entry.
type Spec struct {
	Reads Reads
	// ByCost: the policy picks by Dynamo's cost alone (lowest, or a
	// softmax over it), so at temperature 0 the engine may cost candidates
	// into one float each (PickCheapest) instead of a score each.
	ByCost bool
	// Dynamo is the policy's name among Dynamo's router modes
	// (--router-mode), "" when Dynamo has none.
	Dynamo string
	// Picks says how it picks, in a line (help texts and docs).
	Picks string
	pick  func(p *Params, req Request, scores []Score, cands []Candidate, draws Draws, s spread) int
}

// spread is what every policy may want of the costs: the lowest, the
// highest, and how many candidates share the lowest.
type spread struct {
	lo, hi float64
	ties   int
}

var specs = map[protocol.Policy]Spec{
	protocol.PolicyKV: {ByCost: true, Dynamo: "kv",
		Picks: "Dynamo's cost, the lowest (ties drawn), or a softmax over the costs at temperature > 0", pick: pickByCost},
	protocol.PolicyRoundRobin: {Dynamo: "round-robin",
		Picks: "the candidates in turn, from one counter", pick: pickRoundRobin},
	protocol.PolicyRandom: {Dynamo: "random",
		Picks: "uniformly at random", pick: pickRandom},
	protocol.PolicyLeastLoaded: {Reads: ReadsActiveRequests, Dynamo: "least-loaded",
		Picks: "the fewest requests in flight (ties drawn)", pick: pickLeastLoaded},
	protocol.PolicySessionHash: {Reads: ReadsKey,
		Picks: "the session hashed onto a rank (rendezvous), round robin without a session", pick: pickSessionHash},
	protocol.PolicySGLang: {Reads: ReadsActiveRequests | ReadsRouted,
		Picks: "SGLang's cache_aware: the routed-prefix match, or the smallest tree, or the least loaded when imbalanced",
		pick: func(p *Params, req Request, scores []Score, cands []Candidate, _ Draws, _ spread) int {
			return pickSGLang(&p.SGLang, req, scores, cands)
		}},
	protocol.PolicyLLMD: {Reads: ReadsWaiting | ReadsKVUsage,
		Picks: "llm-d's weighted scorers: prefix cache, queue, KV-cache utilisation",
		pick: func(p *Params, _ Request, scores []Score, cands []Candidate, draws Draws, _ spread) int {
			return pickLLMD(&p.LLMD, scores, cands, draws)
		}},
}

// OfDynamo is the policy Dynamo names mode among its router modes.
func OfDynamo(mode string) (protocol.Policy, bool) {
	for _, p := range protocol.Policies {
		if specs[p].Dynamo == mode && mode != "" {
			return p, true
		}
	}
	return "", false
}

// Of is the entry of a policy; config validation keeps every policy the
// engine sees in protocol.Policies, and the table holds each of them.
func Of(p protocol.Policy) Spec {
	s, ok := specs[p]
	if !ok {
		panic(fmt.Sprintf("selector: policy %q has no entry in the policy table", p))
	}
	return s
}

// pickByCost is Dynamo's selection over its cost: the cheapest candidate,
// ties drawn uniformly, at temperature 0 (or when every cost is equal);
// else a softmax draw over the range-normalised costs.
func pickByCost(p *Params, _ Request, scores []Score, _ []Candidate, draws Draws, s spread) int {
	t := p.Temperature
	if t == 0 || s.hi == s.lo {
		chosen := 0
		if s.ties > 1 {
			chosen = draws.Index(s.ties)
		}
		seen, pick := 0, 0
		for i := range scores {
			scores[i].Prob = 0
			if scores[i].Cost == s.lo {
				scores[i].Prob = 1 / float64(s.ties)
				if seen == chosen {
					pick = i
				}
				seen++
			}
		}
		return pick
	}
	total := 0.0
	for i := range scores {
		scores[i].Prob = portableExp(-(scores[i].Cost - s.lo) / ((s.hi - s.lo) * t))
		total += scores[i].Prob
	}
	u := draws.Unit() * total
	// The last candidate takes any rounding shortfall of the running sum.
	pick := -1
	acc := 0.0
	for i := range scores {
		acc += scores[i].Prob
		if pick < 0 && u < acc {
			pick = i
		}
		scores[i].Prob /= total
	}
	if pick < 0 {
		pick = len(scores) - 1
	}
	return pick
}

// The baselines ignore cost (the costs are still computed, for the
// evidence).

func only(scores []Score, pick int) int {
	for i := range scores {
		scores[i].Prob = 0
	}
	scores[pick].Prob = 1
	return pick
}

func pickRoundRobin(_ *Params, _ Request, scores []Score, _ []Candidate, draws Draws, _ spread) int {
	return only(scores, int(draws.Turn()%uint64(len(scores))))
}

func pickRandom(_ *Params, _ Request, scores []Score, _ []Candidate, draws Draws, _ spread) int {
	for i := range scores {
		scores[i].Prob = 1 / float64(len(scores))
	}
	return draws.Index(len(scores))
}

// pickSessionHash hashes the session onto a candidate, and takes the round
// robin turn for a request without one.
func pickSessionHash(p *Params, req Request, scores []Score, cands []Candidate, draws Draws, s spread) int {
	if req.Session == "" {
		return pickRoundRobin(p, req, scores, cands, draws, s)
	}
	return only(scores, rendezvous(req.Session, cands))
}

// pickLeastLoaded takes the fewest active requests, ties drawn uniformly.
func pickLeastLoaded(_ *Params, _ Request, scores []Score, cands []Candidate, draws Draws, _ spread) int {
	least := uint64(math.MaxUint64)
	tied := 0
	for _, c := range cands {
		switch {
		case c.ActiveRequests < least:
			least, tied = c.ActiveRequests, 1
		case c.ActiveRequests == least:
			tied++
		}
	}
	chosen := 0
	if tied > 1 {
		chosen = draws.Index(tied)
	}
	pick, seen := 0, 0
	for i, c := range cands {
		scores[i].Prob = 0
		if c.ActiveRequests == least {
			scores[i].Prob = 1 / float64(tied)
			if seen == chosen {
				pick = i
			}
			seen++
		}
	}
	return pick
}
