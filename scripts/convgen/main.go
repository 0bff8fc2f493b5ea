// Command convgen writes a conversation-shaped Mooncake trace on stdout:
// long multi-turn sessions with few shared prefixes, the shape of issue
// 35's conversation target (about 750 blocks a request at 16-token blocks,
// 12k requests), deterministic from its seed:
//
//	go run ./scripts/convgen > conv16.jsonl
//	offline-router replay --block-size 16 --worker-kv-blocks 131072 conv16.jsonl
//
// Each session opens with one of a few system prompts (the only prefixes
// sessions share) and a long first message; each later turn's prompt is
// the previous turn's prompt, its answer and a new message, so it extends
// the previous prompt's full blocks with blocks of its own, and it arrives
// delay_ms after the previous turn ends (the think time), as Mooncake's
// multi-turn traces carry it. First turns arrive open loop, Poisson. The
// token layout does not depend on -block-size, only the hash ids do: the
// same seed at 512 makes the same conversations in coarser blocks.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
)

// shape is what the trace is made of; tokens are counted before blocks.
type shape struct {
	requests     int
	seed         uint64
	blockSize    uint64
	prefixes     int     // system prompts, shared between sessions
	prefixTokens uint64  // each system prompt's length
	firstTokens  [2]int  // a first message, uniform in [lo, hi]
	turnTokens   [2]int  // a later message, uniform in [lo, hi]
	outputTokens [2]int  // an answer, uniform in [lo, hi]
	maxTurns     int     // a session's turns, uniform in [1, maxTurns]
	sessionRate  float64 // sessions started a second, Poisson
	thinkMS      [2]int  // a later turn's delay_ms, uniform in [lo, hi]
}

// defaultShape makes about 750 blocks a request at 16 tokens: first turns
// average 1,024 + 7,400 tokens and each later turn adds about 1,800, over
// 1 to 7 turns (4 on average), which averages about 12k tokens a request.
func defaultShape() shape {
	return shape{requests: 12_000, seed: 1, blockSize: 16, prefixes: 8, prefixTokens: 1024,
		firstTokens: [2]int{3400, 11400}, turnTokens: [2]int{500, 2500}, outputTokens: [2]int{100, 500},
		maxTurns: 7, sessionRate: 6, thinkMS: [2]int{1000, 20000}}
}

func main() {
	s := defaultShape()
	flag.IntVar(&s.requests, "requests", s.requests, "requests in the trace")
	flag.Uint64Var(&s.seed, "seed", s.seed, "seed of the trace")
	flag.Uint64Var(&s.blockSize, "block-size", s.blockSize, "tokens a hash id stands for")
	flag.IntVar(&s.prefixes, "prefixes", s.prefixes, "system prompts the sessions share")
	flag.Uint64Var(&s.prefixTokens, "prefix-tokens", s.prefixTokens, "tokens of each system prompt")
	flag.IntVar(&s.maxTurns, "max-turns", s.maxTurns, "most turns a session has (uniform from 1)")
	flag.Float64Var(&s.sessionRate, "session-rate", s.sessionRate, "sessions started a simulated second")
	flag.Parse()
	if flag.NArg() > 0 || s.requests < 1 || s.blockSize < 1 || s.prefixes < 1 || s.maxTurns < 1 || !(s.sessionRate > 0) {
		fmt.Fprintln(os.Stderr, "usage: convgen [-requests N] [-seed S] [-block-size TOKENS] [-prefixes N] [-prefix-tokens N] [-max-turns N] [-session-rate R] > OUT.jsonl")
		os.Exit(2)
	}
	if err := replay.WriteMooncake(os.Stdout, generate(s)); err != nil {
		fmt.Fprintln(os.Stderr, "convgen:", err)
		os.Exit(1)
	}
}

// generate makes the trace, in the order of its nominal arrivals (a later
// turn's is its previous turn's and its delay, as if served at once; replay
// times it from the previous turn's end).
func generate(s shape) []replay.Request {
	rng := rand.New(rand.NewPCG(s.seed, 0xc0417))
	uniform := func(r [2]int) uint64 { return uint64(r[0] + rng.IntN(r[1]-r[0]+1)) }
	// Hash ids: the system prompts' first, then each new block's its own.
	perPrefix := s.prefixTokens / s.blockSize // full blocks; a partial one is the session's
	next := protocol.LocalBlockHash(uint64(s.prefixes) * perPrefix)
	var out []replay.Request
	start := 0.0
	for session := 0; len(out) < s.requests; session++ {
		start += float64(rng.ExpFloat64() / s.sessionRate * 1000) // ExpFloat64, not math.Log, and the product rounded alone (no fused multiply-add): the same trace on every platform
		system := protocol.LocalBlockHash(uint64(rng.IntN(s.prefixes)) * perPrefix)
		// The prompt as it grows: its tokens, its blocks' ids, and how many
		// of them it shares with the next turn (its full blocks; a partial
		// last block changes as the prompt grows, so it is not shared).
		tokens := s.prefixTokens + uniform(s.firstTokens)
		var ids []protocol.LocalBlockHash
		for b := range perPrefix {
			ids = append(ids, system+protocol.LocalBlockHash(b))
		}
		shared := perPrefix
		arrival, turns := start, 1+rng.IntN(s.maxTurns)
		for turn := range turns {
			if len(out) == s.requests {
				break
			}
			ids = ids[:shared]
			for uint64(len(ids)) < (tokens+s.blockSize-1)/s.blockSize {
				ids = append(ids, next)
				next++
			}
			r := replay.Request{ID: strconv.Itoa(len(out)), Arrival: arrival, InputTokens: tokens,
				OutputTokens: uniform(s.outputTokens), HashIDs: slices.Clone(ids), Session: "c" + strconv.Itoa(session)}
			if turn > 0 {
				delay := float64(uniform(s.thinkMS))
				r.DelayMS = &delay
				r.Arrival = arrival + delay
			}
			arrival = r.Arrival
			out = append(out, r)
			shared = tokens / s.blockSize
			tokens += r.OutputTokens + uniform(s.turnTokens)
		}
	}
	slices.SortStableFunc(out, func(a, b replay.Request) int {
		switch {
		case a.Arrival < b.Arrival:
			return -1
		case a.Arrival > b.Arrival:
			return 1
		}
		return 0
	})
	return out
}
