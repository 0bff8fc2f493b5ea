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
func headroomOf(trace []Request, c *ClusterConfig, closedLoop bool) *Headroom {
	bs := c.BlockSize
	seqs := make([][]protocol.SequenceHash, len(trace))
	// cheapest is each block's fewest tokens over its occurrences: a chain
	// hash names its whole prefix, so a block seen once has all its
	// ancestors seen too, and the prefix match is the count of the
	// prompt's blocks seen.
	cheapest := map[protocol.SequenceHash]uint64{}
	var input, blockTokens uint64
	for i := range trace {
		r := &trace[i]
		seqs[i] = kvindex.SequenceHashes(r.HashIDs)
		input += r.InputTokens
		for k, h := range seqs[i] {
			w := blockWeight(k, bs, r.InputTokens)
			blockTokens += w
			if old, ok := cheapest[h]; !ok || w < old {
				cheapest[h] = w
			}
		}
	}
	hits := blockTokens
	for _, w := range cheapest {
		hits -= w
	}
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
	lru := newBlockLRU(hr.LRUCapacityBlocks)
	var lruHits uint64
	for _, i := range order {
		lruHits += lru.take(seqs[i], bs, trace[i].InputTokens)
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

// blockLRU is one LRU cache of sequence hashes. It is a map into a slice
// of nodes linked by index, not container/list, whose elements box each
// hash into an interface: an allocation per block of every request.
type blockLRU struct {
	capacity uint64
	index    map[protocol.SequenceHash]int32
	nodes    []lruNode
	head     int32 // the most recent, or -1
}

type lruNode struct {
	hash       protocol.SequenceHash
	prev, next int32 // a ring: head's prev is the least recent
}

func newBlockLRU(capacity uint64) *blockLRU {
	return &blockLRU{capacity: capacity, index: map[protocol.SequenceHash]int32{}, head: -1}
}

// take matches a request's prompt against the cache and returns the input
// tokens its cached prefix holds; then it puts every block of the prompt
// in, deepest first, so that the first block is the most recent and a
// child is evicted before its parent.
func (c *blockLRU) take(seq []protocol.SequenceHash, bs, input uint64) uint64 {
	hit := 0
	for hit < len(seq) {
		if _, ok := c.index[seq[hit]]; !ok {
			break
		}
		hit++
	}
	for k := len(seq) - 1; k >= 0 && c.capacity > 0; k-- {
		c.touch(seq[k])
	}
	return min(uint64(hit)*bs, input)
}

// touch makes h the most recent, adding it (and evicting the least recent
// when full) if it is not cached.
func (c *blockLRU) touch(h protocol.SequenceHash) {
	if n, ok := c.index[h]; ok {
		if n != c.head {
			c.unlink(n)
			c.pushFront(n)
		}
		return
	}
	var n int32
	if uint64(len(c.nodes)) < c.capacity {
		n = int32(len(c.nodes))
		c.nodes = append(c.nodes, lruNode{})
	} else { // full: the least recent's node is the new block's
		n = c.nodes[c.head].prev
		delete(c.index, c.nodes[n].hash)
		c.unlink(n)
	}
	c.nodes[n].hash = h
	c.index[h] = n
	c.pushFront(n)
}

func (c *blockLRU) unlink(n int32) {
	x := &c.nodes[n]
	if x.next == n { // the only one
		c.head = -1
		return
	}
	c.nodes[x.prev].next, c.nodes[x.next].prev = x.next, x.prev
	if c.head == n {
		c.head = x.next
	}
}

func (c *blockLRU) pushFront(n int32) {
	x := &c.nodes[n]
	if c.head < 0 {
		x.prev, x.next, c.head = n, n, n
		return
	}
	h := &c.nodes[c.head]
	x.prev, x.next = h.prev, c.head
	c.nodes[h.prev].next = n
	h.prev = n
	c.head = n
}
