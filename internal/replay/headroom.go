package replay

import (
	"cmp"
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
func headroomOf(trace []Request, c *ClusterConfig, closedLoop bool) *Headroom {
	bs := c.BlockSize
	hr := &Headroom{LRUOrder: lruOrderArrival}
	for _, p := range c.PoolSizes() {
		if p.Role != PoolDecode {
			hr.LRUCapacityBlocks = uint64(p.Workers) * uint64(p.DPSize) * uint64(max(c.TotalKVBlocks, 0))
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
	seen := newSeenBlocks(hr.LRUCapacityBlocks)
	var input, blockTokens, lruHits uint64
	var ids []int32
	for _, i := range order {
		r := &trace[i]
		input += r.InputTokens
		ids = ids[:0]
		seqs := kvindex.SequenceHashes(r.HashIDs)
		seen.warm(seqs)
		for k, h := range seqs {
			w := blockWeight(k, bs, r.InputTokens)
			blockTokens += w
			ids = append(ids, seen.id(h, w))
		}
		lruHits += seen.take(ids, bs, r.InputTokens)
	}
	// Every block hits but once: a chain hash names its whole prefix, so
	// a block seen has all its ancestors seen too, and a prompt's prefix
	// match counts each of its blocks seen before.
	hits := blockTokens
	for i := range seen.blocks {
		hits -= uint64(seen.blocks[i].cheapest)
	}
	if input > 0 {
		hr.InfiniteCacheHitRate = float64(hits) / float64(input)
		hr.ClusterLRUHitRate = float64(lruHits) / float64(input)
	}
	return hr
}

// blockWeight is the input tokens block k of a prompt of n tokens holds:
// a prefix of k blocks hits min(k × bs, n) tokens, the sum of these.
func blockWeight(k int, bs, n uint64) uint64 {
	return min(uint64(k+1)*bs, n) - min(uint64(k)*bs, n)
}

// estimatedArrivals are the requests' arrival times for the LRU's order:
// a first turn's its own, a later turn's its previous turn's and its
// delay, service taking no time (the run's own are known only as it goes).
func estimatedArrivals(trace []Request) []float64 {
	at := make([]float64, len(trace))
	last := map[string]float64{}
	for i := range trace {
		r := &trace[i]
		at[i] = r.Arrival
		if r.DelayMS != nil {
			at[i] = last[r.Session] + *r.DelayMS
		}
		if r.Session != "" {
			last[r.Session] = at[i]
		}
	}
	return at
}

// seenBlocks are the blocks seen, each once, with the fewest tokens it
// held, and one LRU cache of capacity of them, linked through the same
// entries. It is written out rather than container/list, which boxes
// each hash into an interface and would need a map of its own: here one
// look-up a block serves the bound and the LRU, in the simulated caches'
// table (a Go map, sized for every block occurrence, was 45% of a 16-token
// replay's CPU and most of its memory).
type seenBlocks struct {
	index          hashTable
	blocks         []seenBlock
	capacity, used uint64
	head           int32 // the most recently used, or -1
	sink           int32 // where warm leaves its loads, so that they stay
}

type seenBlock struct {
	cheapest   uint32 // tokens, over its occurrences (at most a block's: block_size is at most 2^20)
	prev, next int32  // in the LRU's ring (head's prev is the least recent), when cached: 16 bytes a block, for the millions a trace can hold
	cached     bool
}

// warm reads the table slot each of a prompt's blocks starts its probe at,
// all before any look-up needs one: the loads miss the cache alike, and
// issued together they overlap instead of waiting one by one (the
// index's Store does the same).
func (s *seenBlocks) warm(seqs []protocol.SequenceHash) {
	if s.index.slots == nil {
		return
	}
	var x int32
	for _, h := range seqs {
		x ^= s.index.slots[s.index.home(h)].idx
	}
	s.sink = x
}

// newSeenBlocks makes an empty set: it grows with the distinct blocks,
// which a trace's reuse makes far fewer than its blocks.
func newSeenBlocks(capacity uint64) *seenBlocks {
	return &seenBlocks{capacity: capacity, head: -1}
}

// id is block h's entry, made if it is new, its cheapest lowered to w.
func (s *seenBlocks) id(h protocol.SequenceHash, w uint64) int32 {
	if n := s.index.find(h); n >= 0 {
		s.blocks[n].cheapest = min(s.blocks[n].cheapest, uint32(w))
		return n
	}
	n := int32(len(s.blocks))
	s.blocks = append(s.blocks, seenBlock{cheapest: uint32(w)})
	s.index.insert(h, n)
	return n
}

// take matches a prompt's blocks against the LRU cache and returns the
// input tokens its cached prefix holds; then it puts every block in,
// deepest first, so that the first block is the most recent and a child
// is evicted before its parent.
func (s *seenBlocks) take(ids []int32, bs, input uint64) uint64 {
	hit := 0
	for hit < len(ids) && s.blocks[ids[hit]].cached {
		hit++
	}
	for k := len(ids) - 1; k >= 0 && s.capacity > 0; k-- {
		s.touch(ids[k])
	}
	return min(uint64(hit)*bs, input)
}

// touch makes n the most recent, caching it (and evicting the least
// recent when full) if it is not.
func (s *seenBlocks) touch(n int32) {
	if s.blocks[n].cached {
		if n != s.head {
			s.unlink(n)
			s.pushFront(n)
		}
		return
	}
	if s.used == s.capacity {
		oldest := s.blocks[s.head].prev
		s.unlink(oldest)
		s.blocks[oldest].cached = false
		s.used--
	}
	s.pushFront(n)
	s.blocks[n].cached = true
	s.used++
}

func (s *seenBlocks) unlink(n int32) {
	x := &s.blocks[n]
	if x.next == n { // the only one
		s.head = -1
		return
	}
	s.blocks[x.prev].next, s.blocks[x.next].prev = x.next, x.prev
	if s.head == n {
		s.head = x.next
	}
}

func (s *seenBlocks) pushFront(n int32) {
	x := &s.blocks[n]
	if s.head < 0 {
		x.prev, x.next, s.head = n, n, n
		return
	}
	h := &s.blocks[s.head]
	x.prev, x.next = h.prev, s.head
	s.blocks[h.prev].next = n
	h.prev = n
	s.head = n
}
