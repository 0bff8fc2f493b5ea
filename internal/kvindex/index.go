package kvindex

import (
	"math/bits"
	"slices"
)

// RankID names one (worker, dp_rank) cache inside the index. The engine hands
// out dense IDs so that per-rank results fit in a plain slice.
type RankID uint32

// Block is one stored block of a KV "stored" event.
type Block struct {
	BlockHash  uint64 // chained sequence hash: how events address the block
	TokensHash uint64 // local hash: how the tree is keyed under the parent
}

const (
	rootNode = 0
	// maskRanks ranks are kept in a node's bit mask; higher ones (more than
	// 64 ranks in all) in a side table.
	maskRanks = 64
)

// edge is a child's exact key: its parent node and its local hash.
type edge struct {
	parent uint32
	local  uint64
}

// node is one cached prefix. It holds no pointers, so that a tree of
// millions of nodes costs the garbage collector nothing to scan.
type node struct {
	parent    uint32
	nchildren uint32
	local     uint64
	mask      uint64 // ranks below maskRanks that cache this prefix
}

type rankCache struct {
	live    bool
	blocks  map[uint64]uint32 // block_hash -> node
	lastID  uint64
	seenAny bool
}

// Index is a radix tree of cached prefixes shared by every rank: a node is a
// prefix, and records the ranks that hold it. Not safe for concurrent use.
type Index struct {
	nodes []node
	free  []uint32
	// children finds a node by a mix of its parent and local hash; a key
	// that two edges share (rare) sends the later one to overflow.
	children map[uint64]uint32
	overflow map[edge]uint32
	// wide holds the ranks from maskRanks up that cache each node.
	wide map[uint32][]RankID
	// extra counts a low rank's additional block hashes on one node (a rank
	// that stored one prefix under two block hashes), so that removing one
	// keeps the rank on the node.
	extra map[rankNode]int
	ranks []rankCache
	live  uint64 // mask of the live ranks below maskRanks
}

type rankNode struct {
	rank RankID
	node uint32
}

// New returns an empty index.
func New() *Index {
	return &Index{nodes: make([]node, 1), children: map[uint64]uint32{}, overflow: map[edge]uint32{},
		wide: map[uint32][]RankID{}, extra: map[rankNode]int{}}
}

func mix(parent uint32, local uint64) uint64 {
	return local ^ (uint64(parent)+1)*0x9e3779b97f4a7c15
}

// AddRank starts an empty cache for id, dropping anything an earlier user of
// the same id left behind.
func (x *Index) AddRank(id RankID) {
	for int(id) >= len(x.ranks) {
		x.ranks = append(x.ranks, rankCache{})
	}
	x.DropRank(id)
	x.ranks[id] = rankCache{live: true, blocks: make(map[uint64]uint32)}
	if id < maskRanks {
		x.live |= 1 << id
	}
}

// DropRank removes every entry of id and forgets it; it returns how many
// blocks were dropped.
func (x *Index) DropRank(id RankID) int {
	if !x.HasRank(id) {
		return 0
	}
	n := x.Clear(id)
	x.ranks[id] = rankCache{}
	if id < maskRanks {
		x.live &^= 1 << id
	}
	return n
}

// HasRank reports whether id has a live cache.
func (x *Index) HasRank(id RankID) bool {
	return int(id) < len(x.ranks) && x.ranks[id].live
}

// RecordEventID notes eventID as the last event applied to id.
func (x *Index) RecordEventID(id RankID, eventID uint64) {
	x.ranks[id].seenAny, x.ranks[id].lastID = true, eventID
}

// EventIDAbove reports whether eventID is above the last event applied to id;
// a stale or repeated event must be skipped.
func (x *Index) EventIDAbove(id RankID, eventID uint64) bool {
	r := &x.ranks[id]
	return !r.seenAny || eventID > r.lastID
}

// LastEventID returns the last applied event id of id, and whether there is one.
func (x *Index) LastEventID(id RankID) (uint64, bool) {
	r := &x.ranks[id]
	return r.lastID, r.seenAny
}

// HasBlock reports whether id caches the block addressed by blockHash.
func (x *Index) HasBlock(id RankID, blockHash uint64) bool {
	_, ok := x.ranks[id].blocks[blockHash]
	return ok
}

// CanStore reports whether a store under parent would apply on id: the parent
// must be nil (the root) or a block id already caches.
func (x *Index) CanStore(id RankID, parent *uint64) bool {
	if parent == nil {
		return true
	}
	_, ok := x.ranks[id].blocks[*parent]
	return ok
}

// Store adds blocks as a chain under parent (nil = root) for id. The caller
// checks CanStore first; Store reports false and changes nothing otherwise.
func (x *Index) Store(id RankID, parent *uint64, blocks []Block) bool {
	if !x.CanStore(id, parent) {
		return false
	}
	r := &x.ranks[id]
	cur := uint32(rootNode)
	if parent != nil {
		cur = r.blocks[*parent]
	}
	for _, b := range blocks {
		child := x.child(cur, b.TokensHash)
		if old, ok := r.blocks[b.BlockHash]; ok {
			if old == child {
				cur = child
				continue
			}
			x.detach(old, id)
		}
		x.attach(child, id)
		r.blocks[b.BlockHash] = child
		cur = child
	}
	return true
}

// Remove drops the blocks of id addressed by hashes; unknown hashes are
// ignored (their store may have been skipped). It returns how many it dropped.
func (x *Index) Remove(id RankID, hashes []uint64) int {
	r := &x.ranks[id]
	n := 0
	for _, h := range hashes {
		if nd, ok := r.blocks[h]; ok {
			delete(r.blocks, h)
			x.detach(nd, id)
			n++
		}
	}
	return n
}

// Clear drops every block of id and returns how many there were.
func (x *Index) Clear(id RankID) int {
	r := &x.ranks[id]
	n := len(r.blocks)
	for _, nd := range r.blocks {
		x.detach(nd, id)
	}
	clear(r.blocks)
	return n
}

// Blocks returns how many blocks id caches.
func (x *Index) Blocks(id RankID) int { return len(x.ranks[id].blocks) }

// Nodes returns how many prefixes the tree holds, the root excluded.
func (x *Index) Nodes() int { return len(x.nodes) - 1 - len(x.free) }

// FindMatches writes into overlap[r] the number of leading blocks of local
// that rank r caches as one contiguous prefix, for every rank r below
// len(overlap). It walks the prompt once for all ranks, keeping the ranks
// still matching as a bit mask, and stops as soon as none is.
func (x *Index) FindMatches(local []uint64, overlap []uint32) {
	clear(overlap)
	alive := x.live
	wideMatching := len(x.wide) > 0
	depth := uint32(0)
	cur := uint32(rootNode)
	for _, h := range local {
		child, ok := x.lookup(cur, h)
		if !ok {
			break
		}
		still := alive & x.nodes[child].mask
		alive = still
		if wideMatching {
			wideMatching = false
			for _, r := range x.wide[child] {
				if int(r) < len(overlap) && overlap[r] == depth {
					overlap[r]++
					wideMatching = true
				}
			}
		}
		if still == 0 && !wideMatching {
			break
		}
		depth++
		// A low rank's overlap is the depth at which its bit last survived.
		for m := still; m != 0; m &= m - 1 {
			if r := bits.TrailingZeros64(m); r < len(overlap) {
				overlap[r] = depth
			}
		}
		cur = child
	}
}

func (x *Index) lookup(parent uint32, local uint64) (uint32, bool) {
	c, ok := x.children[mix(parent, local)]
	if ok && x.nodes[c].parent == parent && x.nodes[c].local == local {
		return c, true
	}
	if len(x.overflow) > 0 {
		c, ok := x.overflow[edge{parent, local}]
		return c, ok
	}
	return 0, false
}

// child finds or makes the node for local under parent.
func (x *Index) child(parent uint32, local uint64) uint32 {
	key := mix(parent, local)
	c, taken := x.children[key]
	if taken && x.nodes[c].parent == parent && x.nodes[c].local == local {
		return c
	}
	if len(x.overflow) > 0 {
		if c, ok := x.overflow[edge{parent, local}]; ok {
			return c
		}
	}
	if n := len(x.free); n > 0 {
		c, x.free = x.free[n-1], x.free[:n-1]
		x.nodes[c] = node{parent: parent, local: local}
	} else {
		if len(x.nodes) == cap(x.nodes) {
			// Double: append's gentler growth for large slices copies a
			// fast-growing tree several times over.
			x.nodes = slices.Grow(x.nodes, len(x.nodes))
		}
		c = uint32(len(x.nodes))
		x.nodes = append(x.nodes, node{parent: parent, local: local})
	}
	if taken {
		x.overflow[edge{parent, local}] = c
	} else {
		x.children[key] = c
	}
	x.nodes[parent].nchildren++
	return c
}

func (x *Index) attach(nd uint32, id RankID) {
	if id >= maskRanks {
		x.wide[nd] = append(x.wide[nd], id)
		return
	}
	if x.nodes[nd].mask&(1<<id) != 0 {
		x.extra[rankNode{id, nd}]++
		return
	}
	x.nodes[nd].mask |= 1 << id
}

// detach removes id from node nd and prunes nodes left with neither ranks
// nor children, walking up toward the root.
func (x *Index) detach(nd uint32, id RankID) {
	switch {
	case id >= maskRanks:
		rs := x.wide[nd]
		for i, r := range rs {
			if r == id {
				rs[i] = rs[len(rs)-1]
				rs = rs[:len(rs)-1]
				break
			}
		}
		if len(rs) == 0 {
			delete(x.wide, nd)
		} else {
			x.wide[nd] = rs
		}
	case x.extra[rankNode{id, nd}] > 0:
		if x.extra[rankNode{id, nd}]--; x.extra[rankNode{id, nd}] == 0 {
			delete(x.extra, rankNode{id, nd})
		}
		return
	default:
		x.nodes[nd].mask &^= 1 << id
	}
	for nd != rootNode && x.nodes[nd].mask == 0 && x.nodes[nd].nchildren == 0 && len(x.wide[nd]) == 0 {
		n := x.nodes[nd]
		if c, ok := x.children[mix(n.parent, n.local)]; ok && c == nd {
			delete(x.children, mix(n.parent, n.local))
		} else {
			delete(x.overflow, edge{n.parent, n.local})
		}
		x.nodes[n.parent].nchildren--
		x.nodes[nd] = node{}
		x.free = append(x.free, nd)
		nd = n.parent
	}
}
