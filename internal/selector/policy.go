package selector

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"slices"

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
	ReadsDevice                           // Candidate.CPU
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
	protocol.PolicyPowerOfTwo: {Reads: ReadsActiveRequests, Dynamo: "power-of-two",
		Picks: "two distinct candidates drawn, the one with fewer requests in flight (the first drawn on a tie)", pick: pickPowerOfTwo},
	protocol.PolicyDirect: {Reads: ReadsActiveRequests, Dynamo: "direct",
		Picks: "the worker the request names (worker_id, required), its least loaded rank unless dp_rank names one", pick: pickLeastLoaded},
	protocol.PolicyDeviceAwareWeighted: {Reads: ReadsActiveRequests | ReadsDevice, Dynamo: "device-aware-weighted",
		Picks: "the least loaded CPU worker while CPU load is below its share (encoder_cuda_to_cpu_ratio), else the least loaded accelerator", pick: pickDeviceAware},
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
	return markTied(scores, cands, func(*Candidate) bool { return true }, least, tied, chosen)
}

// markTied gives each candidate of the members at load least its share of
// the ties and the rest none, and returns the nth (from 0) of them.
func markTied(scores []Score, cands []Candidate, member func(*Candidate) bool, least uint64, ties, nth int) int {
	pick, seen := 0, 0
	for i := range cands {
		scores[i].Prob = 0
		if c := &cands[i]; member(c) && c.ActiveRequests == least {
			scores[i].Prob = 1 / float64(ties)
			if seen == nth {
				pick = i
			}
			seen++
		}
	}
	return pick
}

// pickPowerOfTwo is Dynamo's power-of-two choices: a first candidate drawn
// uniformly, a second uniformly among the others, and the one with fewer
// requests in flight, the first on a tie. Each candidate's probability is
// exact: of the n(n-1) ordered pairs, it wins those where it is drawn first
// against one as loaded or more, and those where it is drawn second
// against one more loaded.
func pickPowerOfTwo(_ *Params, _ Request, scores []Score, cands []Candidate, draws Draws, _ spread) int {
	n := len(cands)
	first := draws.Index(n)
	second := (first + 1 + draws.Index(n-1)) % n
	loads := make([]uint64, n)
	for i := range cands {
		loads[i] = cands[i].ActiveRequests
	}
	slices.Sort(loads)
	pairs := float64(n) * float64(n-1)
	for i := range cands {
		l := cands[i].ActiveRequests
		below, _ := slices.BinarySearch(loads, l) // loads under l
		above := n - upperBound(loads, l)         // loads over l
		asLoaded := n - below - 1                 // others at l or over
		scores[i].Prob = float64(asLoaded+above) / pairs
	}
	if cands[first].ActiveRequests <= cands[second].ActiveRequests {
		return first
	}
	return second
}

// upperBound is the number of sorted values at or below v.
func upperBound(sorted []uint64, v uint64) int {
	i, _ := slices.BinarySearchFunc(sorted, v, func(x, v uint64) int {
		if x <= v {
			return -1
		}
		return 1
	})
	return i
}

// pickDeviceAware is Dynamo's device-aware-weighted mode: the least loaded
// CPU worker and the least loaded accelerator (ties drawn, CPU first), and
// the CPU one only while the CPU workers' requests in flight are below
// their share, the accelerators' total times the CPU workers over
// encoder_cuda_to_cpu_ratio times the accelerators (in integers, as
// Dynamo); with one kind only, its least loaded. Dynamo first sends a
// multimodal request to a worker holding all its embeddings; requests
// here carry none.
func pickDeviceAware(p *Params, _ Request, scores []Score, cands []Candidate, draws Draws, _ spread) int {
	type class struct {
		count, total, least uint64
		ties                int
	}
	var cls [2]class // by CPU
	for i := range cls {
		cls[i].least = math.MaxUint64
	}
	for _, c := range cands {
		k := &cls[b2i(c.CPU)]
		k.count++
		k.total += c.ActiveRequests
		switch {
		case c.ActiveRequests < k.least:
			k.least, k.ties = c.ActiveRequests, 1
		case c.ActiveRequests == k.least:
			k.ties++
		}
	}
	var nth [2]int
	for _, cpu := range [...]int{1, 0} {
		if cls[cpu].ties > 1 {
			nth[cpu] = draws.Index(cls[cpu].ties)
		}
	}
	cpu, accel := &cls[1], &cls[0]
	useCPU := accel.count == 0 ||
		cpu.count > 0 && below(cpu.total, accel.total, cpu.count, p.CudaToCPURatio, accel.count)
	want := b2i(useCPU)
	return markTied(scores, cands, func(c *Candidate) bool { return c.CPU == useCPU }, cls[want].least, cls[want].ties, nth[want])
}

// below reports whether t < floor(a·c / (r·n)), exactly: the products
// are taken in 128 bits (a ratio up to 2^53 times 65,536 ranks is past 64).
func below(t, a, c, r, n uint64) bool {
	hi, lo := bits.Mul64(a, c)
	dh, dl := bits.Mul64(r, n)
	switch {
	case dh == 0 && hi < dl:
		q, _ := bits.Div64(hi, lo, dl)
		return t < q
	case dh == 0:
		return true // the quotient is at least 2^64
	}
	num := new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64)
	num.Or(num, new(big.Int).SetUint64(lo))
	den := new(big.Int).Lsh(new(big.Int).SetUint64(dh), 64)
	den.Or(den, new(big.Int).SetUint64(dl))
	return new(big.Int).SetUint64(t).Cmp(num.Quo(num, den)) < 0
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
