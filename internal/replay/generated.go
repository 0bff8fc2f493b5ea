package replay

import (
	"slices"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Generated tokens are cached. A worker's prefix cache keeps the blocks a
// request's output fills, as vLLM's does, so that the next turn, whose
// prompt repeats the answer, finds them. A block's id is what the trace's
// next turn names at its place: r's output fills, past its prompt's
// floor(in/bs) full blocks, the blocks up to floor((in+out)/bs), and the
// turn after r (successors) names them at those places, if its prompt
// holds r's: its first floor(in/bs) ids are r's. Otherwise no prompt in
// the trace repeats r's answer, and nothing of it is cached (its blocks
// would be ids no request names). mooncake-delta's turns are made this
// way (delta.go), and so are the built-in workload's; a Mooncake trace's
// are when its maker wrote the answer's blocks into the next prompt. The
// simple engine caches prompts only.

// successors gives each request's next turn, by index (-1: none): the
// next request of its session, in an agentic trace the request of its
// conversation that follows it in sequence.
func successors(trace []Request) []int32 {
	next := make([]int32, len(trace))
	for i := range next {
		next[i] = -1
	}
	last := map[string]int32{}
	for i := range trace {
		r := &trace[i]
		if r.Agent != nil {
			for _, d := range r.Deps {
				if d.Relation == Sequence && next[d.On] < 0 && trace[d.On].Agent.Conversation == r.Agent.Conversation {
					next[d.On] = int32(i)
				}
			}
			continue
		}
		if r.Session == "" {
			continue
		}
		if p, ok := last[r.Session]; ok {
			next[p] = int32(i)
		}
		last[r.Session] = int32(i)
	}
	return next
}

// generatedPath is the ids of a prompt's full blocks and of the blocks its
// output fills, as the next turn's ids name them: nil when the output
// fills none, or the next prompt does not hold this one's full blocks.
func generatedPath(prompt, next []protocol.LocalBlockHash, in, out, bs uint64) []protocol.LocalBlockHash {
	full, upto := in/bs, (in+out)/bs
	if upto <= full || uint64(len(prompt)) < full || uint64(len(next)) < upto || !slices.Equal(next[:full], prompt[:full]) {
		return nil
	}
	return append(slices.Clip(prompt[:full]), next[full:upto]...)
}

// generated sets r's output block ids (cluster.Request.Generated) and
// their sequence hashes, chained on its prompt's, from its next turn.
func (h *host) generated(r *simRequest) {
	if r.next == nil {
		return
	}
	path := generatedPath(r.work.Local, r.next.appendIDs(nil), r.InputTokens, r.OutputTokens, h.opt.Cluster.BlockSize)
	if path == nil {
		return
	}
	full := r.InputTokens / h.opt.Cluster.BlockSize
	r.work.Generated, r.work.GenSeq = path[full:], kvindex.SequenceHashes(path)[full:]
}
