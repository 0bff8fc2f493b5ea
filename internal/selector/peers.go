package selector

import "github.com/offline-router/offline-router/internal/protocol"

// The peers' policies: the rules of SGLang's and llm-d's routers, learnt
// from their source and written for this selector's candidates, so that a
// replay can set them beside Dynamo's cost on the same traffic. Each
// returns the chosen index and fills every score's probability; the costs
// in the scores stay Dynamo's, for the evidence.

// pickSGLang is SGLang router's cache_aware rule (sgl-router,
// policies/cache_aware.rs). The load is the router's own count of requests
// in flight on each rank. When it is imbalanced (max - min above
// balance_abs_threshold and max above min × balance_rel_threshold) the least
// loaded rank wins (SGLang: the first least-loaded worker in its list; here,
// in candidate order). Otherwise the rank whose routed tree matches the most
// leading blocks of the prompt wins if that match covers more than
// cache_threshold of them, and else the rank whose routed tree is smallest
// (SGLang's get_smallest_tenant: the most room). Among ranks sharing the
// deepest match, or the smallest tree, SGLang takes whichever its map yields
// first; here the least loaded of them, then the first.
func pickSGLang(c *protocol.SGLangConfig, req Request, scores []Score, cands []Candidate) int {
	lo, hi := cands[0].ActiveRequests, cands[0].ActiveRequests
	for _, x := range cands {
		lo, hi = min(lo, x.ActiveRequests), max(hi, x.ActiveRequests)
	}
	imbalanced := hi-lo > c.BalanceAbsThreshold && float64(hi) > float64(float64(lo)*c.BalanceRelThreshold)
	pick := leastLoaded(cands)
	if !imbalanced {
		if d := deepest(cands); req.Blocks > 0 && float64(cands[d].Routed)/float64(req.Blocks) > c.CacheThreshold {
			pick = d
		} else {
			pick = smallestTree(cands)
		}
	}
	for i := range scores {
		scores[i].Prob = 0
	}
	scores[pick].Prob = 1
	return pick
}

// deepest is the candidate whose routed tree matches the most blocks, the
// least loaded of those, then the first.
func deepest(cands []Candidate) int {
	best := 0
	for i, x := range cands {
		b := cands[best]
		if x.Routed > b.Routed || x.Routed == b.Routed && x.ActiveRequests < b.ActiveRequests {
			best = i
		}
	}
	return best
}

// smallestTree is the candidate whose routed tree holds the fewest blocks,
// the least loaded of those, then the first.
func smallestTree(cands []Candidate) int {
	best := 0
	for i, x := range cands {
		b := cands[best]
		if x.TreeBlocks < b.TreeBlocks || x.TreeBlocks == b.TreeBlocks && x.ActiveRequests < b.ActiveRequests {
			best = i
		}
	}
	return best
}

// leastLoaded is the first candidate with the fewest requests in flight.
func leastLoaded(cands []Candidate) int {
	pick := 0
	for i, x := range cands {
		if x.ActiveRequests < cands[pick].ActiveRequests {
			pick = i
		}
	}
	return pick
}

// pickLLMD is llm-d's inference scheduler: a weighted sum of its scorers,
// each in [0, 1], and the highest total wins, ties drawn uniformly (its
// max-score picker). The scorers:
//   - precise prefix cache (precise-prefix-cache-scorer): the leading blocks
//     the rank caches by KV events, normalised over the ranks that cache any
//     as (s - min) / (max - min), 1 when those all match alike, 0 for a rank
//     that matches none;
//   - queue (queue-scorer): (max - q) / (max - min) of the waiting requests,
//     1 for all when they are equal;
//   - KV-cache utilisation (kv-cache-utilization-scorer): 1 - usage.
func pickLLMD(w *protocol.LLMDConfig, scores []Score, cands []Candidate, draws Draws) int {
	var hitLo, hitHi uint64 // over the candidates that match at all
	qLo, qHi := cands[0].Waiting, cands[0].Waiting
	for _, x := range cands {
		if x.Overlap > 0 {
			if hitHi == 0 {
				hitLo = x.Overlap
			}
			hitLo, hitHi = min(hitLo, x.Overlap), max(hitHi, x.Overlap)
		}
		qLo, qHi = min(qLo, x.Waiting), max(qHi, x.Waiting)
	}
	best, ties := 0.0, 0
	for i, x := range cands {
		prefix := 0.0
		switch {
		case x.Overlap == 0:
		case hitLo == hitHi:
			prefix = 1
		default:
			prefix = float64(x.Overlap-hitLo) / float64(hitHi-hitLo)
		}
		queue := 1.0
		if qHi > qLo {
			queue = float64(qHi-x.Waiting) / float64(qHi-qLo)
		}
		kv := 1 - min(max(x.KVUsage, 0), 1)
		// Each product rounded alone: no fused multiply-add (exp.go).
		total := float64(w.PrefixCacheScorerWeight*prefix) + float64(w.QueueScorerWeight*queue) +
			float64(w.KVCacheUtilizationScorerWeight*kv)
		scores[i].Prob = total // the total, until the winners are known
		switch {
		case i == 0 || total > best:
			best, ties = total, 1
		case total == best:
			ties++
		}
	}
	chosen := 0
	if ties > 1 {
		chosen = draws.Index(ties)
	}
	pick, seen := 0, 0
	for i := range scores {
		top := scores[i].Prob == best
		scores[i].Prob = 0
		if top {
			scores[i].Prob = 1 / float64(ties)
			if seen == chosen {
				pick = i
			}
			seen++
		}
	}
	return pick
}
