package kvindex

// RankID names one (worker, dp_rank) cache inside the index. The engine hands
// out dense IDs so that per-rank results fit in a plain slice.
type RankID uint32

// Block is one stored block of a KV "stored" event.
type Block struct {
	BlockHash  uint64 // chained sequence hash: how events address the block
	TokensHash uint64 // local hash: how the tree is keyed under the parent
}

const rootNode = 0

// edge keys a child by its parent node and local hash: one map for the whole
// tree instead of a map per node keeps the footprint per block small.
type edge struct {
	parent uint32
	local  uint64
}

type node struct {
	parent    uint32
	local     uint64
	ranks     []RankID // ranks caching the prefix that ends at this node
	nchildren uint32
}

type rankCache struct {
	live    bool
	blocks  map[uint64]uint32 // block_hash -> node
	lastID  uint64
	seenAny bool
}

// Index is a radix tree of cached prefixes shared by every rank: a node is a
// prefix, and lists the ranks that hold it. Not safe for concurrent use.
type Index struct {
	nodes    []node
	free     []uint32
	children map[edge]uint32
	ranks    []rankCache
}

// New returns an empty index.
func New() *Index {
	return &Index{nodes: make([]node, 1), children: make(map[edge]uint32)}
}

// AddRank starts an empty cache for id, dropping anything an earlier user of
// the same id left behind.
func (x *Index) AddRank(id RankID) {
	for int(id) >= len(x.ranks) {
		x.ranks = append(x.ranks, rankCache{})
	}
	x.DropRank(id)
	x.ranks[id] = rankCache{live: true, blocks: make(map[uint64]uint32)}
}

// DropRank removes every entry of id and forgets it; it returns how many
// blocks were dropped.
func (x *Index) DropRank(id RankID) int {
	if !x.HasRank(id) {
		return 0
	}
	n := x.Clear(id)
	x.ranks[id] = rankCache{}
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
		x.nodes[child].ranks = append(x.nodes[child].ranks, id)
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
// len(overlap). It walks the prompt once for all ranks and stops as soon as
// no rank is still matching.
func (x *Index) FindMatches(local []uint64, overlap []uint32) {
	clear(overlap)
	cur := uint32(rootNode)
	for i, h := range local {
		child, ok := x.children[edge{cur, h}]
		if !ok {
			return
		}
		matching := false
		for _, r := range x.nodes[child].ranks {
			if int(r) < len(overlap) && overlap[r] == uint32(i) {
				overlap[r]++
				matching = true
			}
		}
		if !matching {
			return
		}
		cur = child
	}
}

func (x *Index) child(parent uint32, local uint64) uint32 {
	if c, ok := x.children[edge{parent, local}]; ok {
		return c
	}
	var c uint32
	if n := len(x.free); n > 0 {
		c, x.free = x.free[n-1], x.free[:n-1]
		x.nodes[c] = node{parent: parent, local: local}
	} else {
		c = uint32(len(x.nodes))
		x.nodes = append(x.nodes, node{parent: parent, local: local})
	}
	x.children[edge{parent, local}] = c
	x.nodes[parent].nchildren++
	return c
}

// detach removes id from node nd and prunes nodes left with neither ranks
// nor children, walking up toward the root.
func (x *Index) detach(nd uint32, id RankID) {
	rs := x.nodes[nd].ranks
	for i, r := range rs {
		if r == id {
			rs[i] = rs[len(rs)-1]
			x.nodes[nd].ranks = rs[:len(rs)-1]
			break
		}
	}
	for nd != rootNode && len(x.nodes[nd].ranks) == 0 && x.nodes[nd].nchildren == 0 {
		n := x.nodes[nd]
		delete(x.children, edge{n.parent, n.local})
		x.nodes[n.parent].nchildren--
		x.nodes[nd] = node{}
		x.free = append(x.free, nd)
		nd = n.parent
	}
}
