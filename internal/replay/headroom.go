package replay

import (
	"cmp"
	"github.com/offline-router/offline-router/internal/cluster"
	"math"
	"slices"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Headroom is how far routing could take the prefix hit rate on the
// requests replayed: it follows from the requests and the cluster, not
// from a policy, so a report has it once. Both rates count tokens as
// prefix_hit_rate does (whole blocks matched from the first, a prompt's
// hit capped at its input tokens) over every input token of the requests.
type Headroom struct {
	// InfiniteCacheHitRate bounds any router's prefix_hit_rate on these
	// requests (when every request completes; one that rejects requests
	// has its rate over those it served, and the bound holds for its
	// cached tokens over all of them): every block hits but one of its
	// occurrences, the one that first computes it, and that one is
	// charged at the block's fewest tokens (a prompt's partial last
	// block), whatever order the workers start requests in.
	InfiniteCacheHitRate float64 `json:"infinite_cache_hit_rate"`
	// ClusterLRUHitRate is a reference, not a bound: the hit rate of one
	// LRU cache of LRUCapacityBlocks, the blocks of every rank of the
	// pool that prefills (the aggregated pool, or the prefill pool),
	// taking each request's blocks as it arrives, in LRUOrder.
	ClusterLRUHitRate float64 `json:"cluster_lru_hit_rate"`
	LRUCapacityBlocks uint64  `json:"lru_capacity_blocks"`
	// LRUOrder is arrival (open loop: a later turn placed at its previous
	// turn's arrival and its delay, as if served at once) or trace (a
	// closed loop, whose arrivals are known only as it runs).
	LRUOrder string `json:"lru_order"`
}

// The orders the LRU reference takes requests in.
const (
	lruOrderArrival = "arrival"
	lruOrderTrace   = "trace"
)

// headroomOf computes the headroom of trace (repeat 0's requests, before
// any run) on cluster c; closedLoop says the arrival order is not known.
// One pass over the requests in the LRU's order serves both rates: the
// bound does not depend on the order.
func headroomOf(trace []Request, c *cluster.Config, closedLoop bool) *Headroom {
	bs := c.BlockSize
	hr := &Headroom{LRUOrder: lruOrderArrival}
	for _, p := range c.PoolSizes() {
		if p.Role != PoolDecode {
			hr.LRUCapacityBlocks = uint64(p.Workers) * uint64(p.DPSize) * uint64(max(c.TotalKVBlocks, 0))
			if len(c.Hardware) > 0 { // each hardware pool's own blocks
				hr.LRUCapacityBlocks = 0
				for _, h := range c.Hardware {
					hr.LRUCapacityBlocks += uint64(h.Workers) * uint64(p.DPSize) * uint64(h.TotalKVBlocks)
				}
			}
			break
		}
	}
	order := make([]int, len(trace))
	for i := range order {
		order[i] = i
	}
	if closedLoop {
		hr.LRUOrder = lruOrderTrace
	} else {
		at := estimatedArrivals(trace)
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(at[a], at[b]) })
	}
	hr.InfiniteCacheHitRate, hr.ClusterLRUHitRate = headroomRates(trace, order, bs, hr.LRUCapacityBlocks)
	return hr
}

// headroomRates takes trace's requests in order through the bound and an
// LRU cache of capacity blocks, and returns both rates.
func headroomRates(trace []Request, order []int, bs, capacity uint64) (infinite, lru float64) {
	h := headroomPass{seen: cluster.NewReferenceCache(math.MaxInt)}
	if capacity > 0 {
		h.lru = cluster.NewReferenceCache(int(capacity))
	}
	next := successors(trace)
	var succ []protocol.LocalBlockHash
	for _, i := range order {
		r := &trace[i]
		h.add(r, bs)
		// What its output fills is cached too (generated.go), for its
		// next turn, without a prompt's cost.
		if n := next[i]; n >= 0 {
			succ = trace[n].appendIDs(succ[:0])
			if path := generatedPath(h.local, succ, r.InputTokens, r.OutputTokens, bs); path != nil {
				seq := kvindex.SequenceHashes(path)
				h.seen.Take(seq)
				if h.lru != nil {
					h.lru.Take(seq)
				}
			}
		}
	}
	if h.input == 0 {
		return 0, 0
	}
	return float64(h.infiniteHits(bs)) / float64(h.input), float64(h.lruHits) / float64(h.input)
}

// blockWeight is the input tokens block k of a prompt of n tokens holds:
// a prefix of k blocks hits min(k × bs, n) tokens, the sum of these.
func blockWeight(k int, bs, n uint64) uint64 {
	return min(uint64(k+1)*bs, n) - min(uint64(k)*bs, n)
}

// estimatedArrivals are the requests' arrival times for the LRU's order:
// a first turn's its own, a later turn's its previous turn's and its
// delay (an agentic request's, its dependencies' and their delays),
// service taking no time (the run's own are known only as it goes).
func estimatedArrivals(trace []Request) []float64 {
	at := make([]float64, len(trace))
	last := map[string]float64{}
	for i := range trace {
		r := &trace[i]
		at[i] = r.Arrival
		if r.DelayMS != nil {
			at[i] = last[r.Session] + *r.DelayMS
		}
		for _, d := range r.Deps { // an earlier request's estimate (a later one's is not made yet: its timestamp stands)
			if int(d.On) < i {
				at[i] = max(at[i], at[d.On]+d.DelayMS)
			}
		}
		if r.Session != "" {
			last[r.Session] = at[i]
		}
	}
	return at
}

// headroomPass computes both rates in one pass over the requests with two
// run caches (runcache.go) standing for caches of single blocks: seen, of
// unbounded size, holds every block seen, and lru the cluster's LRU cache.
// A request's prefix is matched a run at a time, not a block at a time: at
// 16-token blocks a per-block look-up and LRU touch of every block
// occurrence (the per-block model in headroom_test.go) was a third of a
// replay's time.
//
// The LRU is the run cache's because the reference LRU touches a request's
// blocks deepest first: its blocks end up the most recent, the first the
// most of all, and the rest keep their order, which is what a run cache
// leaves when a request references its cached prefix, adds the rest
// (evicting the least recently used idle blocks) and releases them at once.
type headroomPass struct {
	// seen is never full; lru is the cluster's LRU bound, nil for none.
	seen, lru *cluster.ReferenceCache
	input     uint64
	// tokens is every block occurrence's tokens (a prompt's hit cap: a
	// block past its input tokens holds none), distinct the blocks seen.
	tokens, distinct uint64
	// short is, for each block some prompt holds fewer than block_size
	// tokens of (a prompt's partial last block), its fewest: the bound
	// charges a block's miss at its fewest tokens, and every other block
	// at block_size.
	short   map[protocol.SequenceHash]uint64
	lruHits uint64
	local   []protocol.LocalBlockHash // the request's ids, unpacked (Request.packed)
}

// add takes request r through both caches, which copy what they keep of
// its sequence hashes or keep a window on at least half (runcache.go).
func (h *headroomPass) add(r *Request, bs uint64) {
	h.input += r.InputTokens
	h.local = r.appendIDs(h.local[:0])
	seq := kvindex.SequenceHashes(h.local)
	n := len(seq)
	h.tokens += min(uint64(n)*bs, r.InputTokens)
	h.distinct += uint64(n - h.seen.Take(seq))
	for k := int(r.InputTokens / bs); k < n; k++ {
		w := blockWeight(k, bs, r.InputTokens)
		if h.short == nil {
			h.short = map[protocol.SequenceHash]uint64{}
		}
		if v, ok := h.short[seq[k]]; !ok || w < v {
			h.short[seq[k]] = w
		}
	}
	if h.lru != nil {
		h.lruHits += min(uint64(h.lru.Take(seq))*bs, r.InputTokens)
	}
}

// infiniteHits is every block occurrence's tokens but, for each block, its
// fewest: the occurrence that first computes it, charged at its cheapest.
func (h *headroomPass) infiniteHits(bs uint64) uint64 {
	cheapest := h.distinct * bs
	for _, w := range h.short {
		cheapest -= bs - w
	}
	return h.tokens - cheapest
}
