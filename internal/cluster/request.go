package cluster

import "github.com/offline-router/offline-router/internal/protocol"

// Request is a request as a worker sees it: its prompt, and what the
// workers it visits made of it. A disaggregated request visits a prefill
// worker, then a decode worker, one at a time, with the one view.
type Request struct {
	Tag         int32 // the host's handle on it
	InputTokens uint64
	// Local are its prompt's block ids and Seq their sequence hashes, as
	// the router has them: the host's, which a worker never writes (the
	// simple model's cache keeps windows on Seq: runcache.go).
	Local []protocol.LocalBlockHash
	Seq   []protocol.SequenceHash
	// Generated are the ids of the blocks its output fills, past its
	// prompt's full blocks (the first one holds the prompt's partial last
	// block, if it has one), as the next turn's prompt names them, and
	// GenSeq their sequence hashes, chained on the prompt's: the iteration
	// engine caches them as they fill, as vLLM's prefix cache caches
	// generated tokens. None when no turn names them: a prompt no request
	// could send is not worth a block.
	Generated []protocol.LocalBlockHash
	GenSeq    []protocol.SequenceHash

	// Written by the worker that admits it first (its prefill worker, when
	// disaggregated): its prompt blocks found cached on the GPU, the prompt
	// tokens it computed, and when its prefill started.
	HitBlocks int
	// LowerHits are the blocks restored from each lower tier, past its
	// HitBlocks, by the tiers configured in walk order (host, then disk).
	LowerHits    [len(tierNames)]int
	Uncached     uint64
	PrefillStart float64
	// AdmittedAt is when a decode worker took it in, its KV received.
	AdmittedAt float64
	// Preemptions are the times a worker took its blocks back to compute
	// it again.
	Preemptions int
	// FirstToken is when its first output token came, LastToken its
	// latest, and Gaps the times between its output tokens, runs of equal
	// ones as one Gap (the iteration engine; the simple one spreads decode
	// evenly and keeps none).
	FirstToken, LastToken float64
	Gaps                  []Gap

	outputs uint64 // the tokens it makes on the worker it is on
	// runs are the cache runs it holds on its worker under the simple
	// model, its first cachedBlocks blocks.
	runs         []heldRun
	cachedBlocks int
}

// Gap is N equal times of MS between output tokens.
type Gap struct {
	MS float64
	N  uint64
}

// Drop lets go of r's hashes once it has ended.
func (r *Request) Drop() { r.Local, r.Seq, r.Generated, r.GenSeq = nil, nil, nil, nil }

// block is the ids of r's block i, of its prompt's first full ones, then
// of its output's.
func (r *Request) block(i, full int) (protocol.SequenceHash, protocol.LocalBlockHash) {
	if i < full {
		return r.Seq[i], r.Local[i]
	}
	return r.GenSeq[i-full], r.Generated[i-full]
}

// path is the local ids of r's first i blocks, as block has them.
func (r *Request) path(i, full int) []protocol.LocalBlockHash {
	if i <= full {
		return r.Local[:i]
	}
	return append(r.Local[:full:full], r.Generated[:i-full]...)
}

// tokensEvery records n more output tokens, each gap ms after the one
// before.
func (r *Request) tokensEvery(gap float64, n int) {
	if n > 0 {
		r.LastToken += float64(float64(n) * gap)
		r.addGaps(gap, uint64(n))
	}
}

// tokenAt records an output token after the first, made at t.
func (r *Request) tokenAt(t float64) {
	gap := t - r.LastToken
	r.LastToken = t
	r.addGaps(gap, 1)
}

// addGaps records n gaps of gap ms, in the run before it when it is one of
// equal gaps.
func (r *Request) addGaps(gap float64, n uint64) {
	if k := len(r.Gaps); k > 0 && r.Gaps[k-1].MS == gap {
		r.Gaps[k-1].N += n
		return
	}
	r.Gaps = append(r.Gaps, Gap{gap, n})
}
