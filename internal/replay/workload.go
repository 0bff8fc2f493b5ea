package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Workload says how the replayed requests were made and shaped, with the
// names of Dynamo's own replay (python -m dynamo.replay) where it has them.
type Workload struct {
	// ArrivalSpeedupRatio divides every arrival time (counted from the
	// first) and every think time (delay_ms): 2 replays the trace twice as
	// fast. Open loop only.
	ArrivalSpeedupRatio float64 `json:"arrival_speedup_ratio"`
	// ReplayConcurrency, when above 0, is the closed loop: that many
	// sessions in flight (agent plays, in an agentic trace: lanes), each
	// from its first request to the end of its last; the next, in trace
	// order, starts when one ends. Timestamps are ignored but within a
	// play; a request's TTFT counts from when it was sent.
	ReplayConcurrency int `json:"replay_concurrency"`
	// BenchmarkDurationS, with ReplayConcurrency, recycles the plays for
	// this long (recycle.go): the lanes start the trace's plays again,
	// pass after pass, until one opens at the duration or later. Each
	// contender then runs the plays it gets through; 0: one pass.
	BenchmarkDurationS float64 `json:"benchmark_duration_s,omitempty"`
	// BuiltinSessions is the size of the built-in workload (0 when a trace
	// or a synthetic workload ran).
	BuiltinSessions int `json:"builtin_sessions,omitempty"`
	// BuiltinPlays is the size of the built-in agentic workload
	// (AgenticBuiltin), when it ran in the chat workload's stead.
	BuiltinPlays int `json:"builtin_plays,omitempty"`
	// BuiltinFreshSubagents starts its subagents from the shared prompt
	// and their task alone rather than forked from the main agent's
	// context (--subagent-context fresh).
	BuiltinFreshSubagents bool `json:"builtin_fresh_subagents,omitempty"`
	// BuiltinLoRAAdapters gives the built-in workload's sessions LoRA
	// adapters, lora-0 to lora-{N-1} (Builtin says how many use each).
	BuiltinLoRAAdapters int        `json:"builtin_lora_adapters,omitempty"`
	Synthetic           *Synthetic `json:"synthetic,omitempty"`
}

// Synthetic is a workload of equal requests, as Dynamo's replay makes one
// from --input-tokens, --output-tokens and --request-count: one every
// ArrivalIntervalMS (0: all at once), each prompt's first
// round(blocks × SharedPrefixRatio) blocks shared with the other requests
// of its prefix group (one of NumPrefixGroups, drawn uniformly; no sharing
// when either is 0), the rest its own.
type Synthetic struct {
	InputTokens       uint64  `json:"input_tokens"`
	OutputTokens      uint64  `json:"output_tokens"`
	RequestCount      int     `json:"request_count"`
	ArrivalIntervalMS float64 `json:"arrival_interval_ms"`
	SharedPrefixRatio float64 `json:"shared_prefix_ratio"`
	NumPrefixGroups   int     `json:"num_prefix_groups"`
}

// Check says what is wrong with the synthetic workload's parameters,
// naming the flag.
func (s *Synthetic) Check() error {
	switch {
	case s.InputTokens < 1 || s.InputTokens > protocol.MaxTokens:
		return fmt.Errorf("--input-tokens %d: expected 1 to %d", s.InputTokens, uint64(protocol.MaxTokens))
	case s.OutputTokens < 1 || s.OutputTokens > protocol.MaxTokens:
		return fmt.Errorf("--output-tokens %d: expected 1 to %d", s.OutputTokens, uint64(protocol.MaxTokens))
	case s.RequestCount < 1 || s.RequestCount > MaxSyntheticRequests:
		return fmt.Errorf("--request-count %d: expected 1 to %d (each request is held in memory)", s.RequestCount, MaxSyntheticRequests)
	case !(s.ArrivalIntervalMS >= 0) || s.ArrivalIntervalMS*float64(s.RequestCount) > protocol.MaxNumber/2:
		return fmt.Errorf("--arrival-interval-ms %v: expected 0 or more, with the last arrival before 2^52 ms", s.ArrivalIntervalMS)
	case !(s.SharedPrefixRatio >= 0 && s.SharedPrefixRatio <= 1):
		return fmt.Errorf("--shared-prefix-ratio %v: expected 0 to 1", s.SharedPrefixRatio)
	case s.NumPrefixGroups < 0:
		return fmt.Errorf("--num-prefix-groups %d: expected 0 or more", s.NumPrefixGroups)
	case float64(s.RequestCount)*float64(s.InputTokens) > MaxWorkloadTokens:
		return fmt.Errorf("--request-count %d × --input-tokens %d: at most %.0f input tokens in all (each block's hashes are held in memory)",
			s.RequestCount, s.InputTokens, float64(MaxWorkloadTokens))
	}
	return nil
}

// MaxSyntheticRequests bounds a synthetic workload's requests: a few
// hundred bytes each while the replay runs.
const MaxSyntheticRequests = 2_000_000

// MaxWorkloadTokens bounds a synthetic workload's input tokens, so that
// its block hashes (16 bytes a block) stay within a GB at the smallest
// block size people use (16 tokens).
const MaxWorkloadTokens = 1 << 30

// Requests generates the workload; seed draws each request's prefix group.
func (s *Synthetic) Requests(seed, blockSize uint64) []Request {
	rng := rand.New(rand.NewPCG(seed, 0x5e7))
	blocks := (s.InputTokens + blockSize - 1) / blockSize
	shared := uint64(0)
	if s.NumPrefixGroups > 0 {
		shared = uint64(math.Round(float64(blocks) * s.SharedPrefixRatio))
	}
	// Shared blocks are numbered by group and position below the requests'
	// own, which count up from past them.
	next := protocol.LocalBlockHash(uint64(s.NumPrefixGroups)*shared + 1)
	out := make([]Request, s.RequestCount)
	for i := range out {
		ids := make([]protocol.LocalBlockHash, blocks)
		group := 0
		if shared > 0 {
			group = rng.IntN(s.NumPrefixGroups)
		}
		for b := range ids {
			if uint64(b) < shared {
				ids[b] = protocol.LocalBlockHash(uint64(group)*shared + uint64(b) + 1)
			} else {
				ids[b], next = next, next+1
			}
		}
		out[i] = Request{ID: "r" + strconv.Itoa(i), Arrival: float64(i) * s.ArrivalIntervalMS,
			InputTokens: s.InputTokens, OutputTokens: s.OutputTokens, HashIDs: ids}
	}
	return out
}

// Builtin is the default workload: multi-turn chat sessions that share a
// few system prompts, arriving as a Poisson process; each later turn extends
// its conversation's prompt and arrives after a think time. It is what
// `offline-router replay` runs when given no trace.
//
// With adapters above 0, each session runs under one LoRA adapter or none:
// half of them, drawn uniformly, use the base model, and the others
// lora-k (k from 0 to adapters-1) with weight e^(-k/2), lora-0 the most
// popular. The adapters are drawn from a stream of their own, so that
// every other draw is the one adapters 0 makes.
func Builtin(seed uint64, sessions, adapters int, blockSize uint64) []Request {
	rng := rand.New(rand.NewPCG(seed, 0xb17))
	adapterRNG := rand.New(rand.NewPCG(seed, 0x10a))
	nextID := uint64(1)
	block := func() protocol.LocalBlockHash { nextID++; return protocol.LocalBlockHash(nextID) }
	prompts := make([][]protocol.LocalBlockHash, 6)
	for i := range prompts {
		for range 4 + rng.IntN(12) {
			prompts[i] = append(prompts[i], block())
		}
	}
	var out []Request
	t := 0.0
	for s := range sessions {
		t += float64(rng.ExpFloat64() * 120) // products rounded alone: the same times on every platform
		// Popular prompts are used more: the first one by about a third.
		p := min(int(rng.ExpFloat64()*2), len(prompts)-1)
		ids := append([]protocol.LocalBlockHash(nil), prompts[p]...)
		session := "s" + strconv.Itoa(s)
		lora := sessionAdapter(adapterRNG, adapters)
		var prompt, answer uint64 // the turn before's tokens
		for turn := range 2 + rng.IntN(5) {
			// The prompt is the conversation so far, the turn before's
			// answer in it, and the user's new message: the blocks past
			// the turn before's full ones are new (its partial block, now
			// full, among them), and its answer's are those the worker
			// that made it cached (generated.go).
			if turn > 0 {
				ids = ids[:prompt/blockSize]
			}
			user := uint64(1 + rng.IntN(3))
			base := uint64(len(ids)) * blockSize
			if turn > 0 {
				base = prompt + answer
			}
			in := base + user*blockSize - uint64(rng.IntN(int(blockSize)))
			for uint64(len(ids)) < blocksOf(in, blockSize) {
				ids = append(ids, block())
			}
			req := Request{
				ID: fmt.Sprintf("%s-t%d", session, turn), Session: session,
				InputTokens:  in,
				OutputTokens: 50 + uint64(rng.IntN(250)),
				HashIDs:      append([]protocol.LocalBlockHash(nil), ids...),
				LoRAName:     lora,
			}
			prompt, answer = in, req.OutputTokens
			if turn == 0 {
				req.Arrival = t
			} else {
				think := 500 + float64(rng.Float64()*2500)
				req.DelayMS = &think
			}
			out = append(out, req)
		}
	}
	return out
}

// sessionAdapter draws a built-in session's adapter, as Builtin says: ""
// (the base model) half the time, else lora-k with weight e^(-k/2), an
// exponential draw redrawn past the last adapter (ExpFloat64, not a
// logarithm, so that every platform draws the same).
func sessionAdapter(rng *rand.Rand, adapters int) string {
	if adapters == 0 || rng.IntN(2) == 0 {
		return ""
	}
	for {
		if k := int(rng.ExpFloat64() * 2); k < adapters {
			return "lora-" + strconv.Itoa(k)
		}
	}
}

// SpeedUp makes arrivals ratio times faster, in place: roots' timestamps
// (first turns', agentic roots') count from the earliest (whatever the
// ratio: a trace stamped in epoch ms starts at 0) and are divided by
// ratio, and so is every later turn's delay and every dependency's, as
// Dynamo's replay does (its Deps are copied: a shaped trace shares them
// with its base).
func SpeedUp(trace []Request, ratio float64) {
	first := math.Inf(1)
	for i := range trace {
		if trace[i].isRoot() {
			first = math.Min(first, trace[i].Arrival)
		}
	}
	for i := range trace {
		r := &trace[i]
		switch {
		case r.DelayMS != nil:
			if ratio != 1 {
				r.DelayMS = ptr(*r.DelayMS / ratio)
			}
		case len(r.Deps) > 0:
			if ratio != 1 {
				r.Deps = slices.Clone(r.Deps)
				for k := range r.Deps {
					r.Deps[k].DelayMS /= ratio
				}
			}
		default:
			r.Arrival = (r.Arrival - first) / ratio
		}
	}
}
