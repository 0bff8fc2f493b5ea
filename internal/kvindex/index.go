package kvindex

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"

	"github.com/offline-router/offline-router/internal/protocol"
)

// RankID names one (worker, dp_rank) cache inside the index. The engine hands
// out dense IDs so that per-rank results fit in a plain slice.
type RankID uint32

// Block is one stored block of a KV "stored" event: its sequence hash
// addresses it in events, its local hash keys the tree under the parent.
type Block = protocol.StoredBlock

// Index is the cache index of every rank: a radix tree of cached prefixes,
// a node a prefix, found from its parent by its last block's local hash,
// with the ranks that hold it (holders.go), and for each rank a table from
// its block hashes to its nodes.
//
// Not safe for concurrent use.
type Index struct {
	tree *tree
	// extra counts a rank's additional block hashes on one node (a rank
	// that stored one prefix under two block hashes), so that removing one
	// keeps the rank on the node.
	extra map[rankNode]int
	// alias lists a rank's block hashes for a node other than the one the
	// node was first stored under (hosts hashing with other seeds), so that
	// a removal that takes the rank off the node's descendants finds them.
	alias map[rankNode]map[protocol.SequenceHash]struct{}
	// tabledHeld counts, for a rank and a node, the node's children in the
	// edge table that the rank holds, so that a removal passes over the
	// children of a shared node the rank holds none of (others may have
	// given it thousands). Only branching nodes have such children.
	tabledHeld map[rankNode]uint32
	below      []uint32 // scratch: the nodes a removal still has to visit
	ranks      []rankCache
	live       []uint64    // by group: the mask of its live ranks
	alive      []groupPair // scratch: the ranks a match is still following
	matched    []RankID    // the ranks the last FindMatches gave an overlap
	warm       uint64      // where Store and Remove leave the slots they warm, so the loads stay
}

type rankCache struct {
	live   bool
	blocks edgeTable // block_hash (as the local hash, under parent 0) -> node
	// phantom lists the nodes the rank still holds though none of its block
	// hashes addresses them: a hash moved to another prefix. As in Dynamo,
	// whose old node keeps the worker, what the rank holds below stays
	// reachable, and a removal above finds it.
	phantom map[uint32]struct{}
	lastID  uint64
	seenAny bool
}

type rankNode struct {
	rank RankID
	node uint32
}

// New returns an empty index.
func New() *Index {
	return &Index{tree: newTree(), extra: map[rankNode]int{}, alias: map[rankNode]map[protocol.SequenceHash]struct{}{},
		tabledHeld: map[rankNode]uint32{}}
}

// AddRank starts an empty cache for id, dropping anything an earlier user of
// the same id left behind.
func (x *Index) AddRank(id RankID) {
	if id/maskRanks >= maxGroups {
		panic("kvindex: rank id past the groups a node can name") // protocol.MaxRanks is far below
	}
	for int(id) >= len(x.ranks) {
		x.ranks = append(x.ranks, rankCache{})
	}
	x.DropRank(id)
	x.ranks[id] = rankCache{live: true}
	g, bit := split(id)
	for int(g) >= len(x.live) {
		x.live = append(x.live, 0)
	}
	x.live[g] |= bit
}

// DropRank removes every entry of id and forgets it; it returns how many
// blocks were dropped.
func (x *Index) DropRank(id RankID) int {
	if !x.hasRank(id) {
		return 0
	}
	n := x.Clear(id)
	x.ranks[id] = rankCache{}
	g, bit := split(id)
	x.live[g] &^= bit
	return n
}

// hasRank reports whether id has a live cache.
func (x *Index) hasRank(id RankID) bool {
	return int(id) < len(x.ranks) && x.ranks[id].live
}

// RecordEventID notes eventID as the last event applied to id.
func (x *Index) RecordEventID(id RankID, eventID uint64) {
	x.ranks[id].seenAny, x.ranks[id].lastID = true, eventID
}

// LastEventID returns the last applied event id of id, and whether there is one.
func (x *Index) LastEventID(id RankID) (uint64, bool) {
	r := &x.ranks[id]
	return r.lastID, r.seenAny
}

// HasBlock reports whether id caches the block addressed by blockHash.
func (x *Index) HasBlock(id RankID, blockHash protocol.SequenceHash) bool {
	_, ok := x.ranks[id].blocks.find(0, uint64(blockHash))
	return ok
}

// Why a store is refused; a refused store changes nothing.
var (
	ErrUnknownParent = errors.New("the rank does not cache the parent")
	// ErrSelfReference: a block whose hash is its parent's would be stored
	// under itself (Dynamo refuses it as an invalid block sequence).
	ErrSelfReference = errors.New("a block's hash is its parent's")
)

// Store adds blocks as a chain under parent (nil = root) for id, which
// must have been added (and not dropped since): a match counts on only
// live ranks holding nodes.
func (x *Index) Store(id RankID, parent *protocol.SequenceHash, blocks []Block) error {
	r := &x.ranks[id]
	if !r.live {
		panic(fmt.Sprintf("kvindex: a store for rank %d, which is not added", id))
	}
	cur := root
	if parent != nil {
		var ok bool
		if cur, ok = r.blocks.find(0, uint64(*parent)); !ok {
			return ErrUnknownParent
		}
		for _, b := range blocks {
			if b.BlockHash == *parent {
				return ErrSelfReference
			}
		}
	}
	warm := uint64(0)
	for _, b := range blocks {
		warm ^= r.blocks.home(0, uint64(b.BlockHash))
	}
	x.warm = warm
	for _, b := range blocks {
		child, made := x.tree.child(cur, uint64(b.TokensHash))
		if made {
			x.tree.node(child).hash = uint64(b.BlockHash)
		}
		old, added := r.blocks.findOrAdd(0, uint64(b.BlockHash), func() uint32 { return child })
		switch {
		case added:
			x.attach(child, id, b.BlockHash)
		case old != child:
			// The hash moves to another prefix. Attach first: detaching
			// could otherwise prune child if it is an ancestor of old.
			x.attach(child, id, b.BlockHash)
			r.blocks.set(0, uint64(b.BlockHash), child)
			x.unalias(old, id, b.BlockHash)
			x.vacate(old, id)
		}
		cur = child
	}
	return nil
}

// vacate takes one of id's hashes off nd, which it moved elsewhere. A move
// is no removal: if it was the rank's last hash there, the rank keeps nd as
// a phantom, so that every node it holds keeps its whole prefix held.
func (x *Index) vacate(nd uint32, id RankID) {
	if len(x.extra) > 0 && x.extra[rankNode{id, nd}] > 0 {
		x.detach(nd, id)
		return
	}
	r := &x.ranks[id]
	if r.phantom == nil {
		r.phantom = map[uint32]struct{}{}
	}
	r.phantom[nd] = struct{}{}
}

// Remove drops the blocks of id addressed by hashes; unknown hashes are
// ignored (their store may have been skipped). A block the rank then no
// longer holds takes with it every block the rank holds below it, as in
// Dynamo's tree: a removed block's descendants are unreachable, and must not
// come back when it is stored again. It returns how many blocks it dropped.
func (x *Index) Remove(id RankID, hashes []protocol.SequenceHash) int {
	r := &x.ranks[id]
	warm := uint64(0)
	for _, h := range hashes { // as in Store: let the misses overlap
		warm ^= r.blocks.home(0, uint64(h))
	}
	x.warm = warm
	n := 0
	for _, h := range hashes {
		if nd, ok := r.blocks.take(0, uint64(h)); ok {
			x.unalias(nd, id, h)
			if len(x.extra) == 0 || x.extra[rankNode{id, nd}] == 0 { // its last hash there: it leaves nd
				n += x.dropBelow(nd, id)
			}
			x.detach(nd, id)
			n++
		}
	}
	return n
}

// dropBelow takes id off every node below nd that it holds, reached through
// nodes it holds, with their block hashes, and returns how many hashes.
func (x *Index) dropBelow(nd uint32, id RankID) int {
	r := &x.ranks[id]
	n := 0
	x.below = x.heldKids(nd, id, x.below[:0])
	for len(x.below) > 0 {
		c := x.below[len(x.below)-1]
		x.below = x.below[:len(x.below)-1]
		if !x.tree.holds(c, id) {
			continue
		}
		x.below = x.heldKids(c, id, x.below)
		if r.blocks.takeIf(0, x.tree.node(c).hash, c) {
			n++
		}
		if len(x.alias) > 0 || len(x.extra) > 0 || len(r.phantom) > 0 { // the rare cases: one lookup each
			k := rankNode{id, c}
			for h := range x.alias[k] {
				r.blocks.take(0, uint64(h))
				n++
			}
			delete(x.alias, k)
			delete(x.extra, k)
			delete(r.phantom, c)
		}
		x.detach(c, id) // prunes c once nothing holds it and it has no children
	}
	return n
}

// heldKids appends the children of nd that id may hold to out: the tabled
// ones (those its group holds) only if it holds any. Only a node with
// children in the edge table can have such children, so the count is
// looked up for branching nodes only: a lookup a block on a chain's removal
// was a sixth of an index churn's time.
func (x *Index) heldKids(nd uint32, id RankID, out []uint32) []uint32 {
	g, _ := split(id)
	tabled := x.tree.node(nd).up&inTable != 0 && x.tabledHeld[rankNode{id, nd}] > 0
	return x.tree.kids(nd, g, tabled, out)
}

// holdsChild and leftChild keep tabledHeld as id comes to hold node nd, or
// stops holding it.
func (x *Index) holdsChild(nd uint32, id RankID) {
	if p, tabled := x.tree.tabledChild(nd); tabled {
		x.tabledHeld[rankNode{id, p}]++
	}
}

func (x *Index) leftChild(nd uint32, id RankID) {
	if p, tabled := x.tree.tabledChild(nd); tabled {
		k := rankNode{id, p}
		if x.tabledHeld[k]--; x.tabledHeld[k] == 0 {
			delete(x.tabledHeld, k)
		}
	}
}

// unalias forgets h as a hash of id for nd, when it is not nd's own.
func (x *Index) unalias(nd uint32, id RankID, h protocol.SequenceHash) {
	if uint64(h) == x.tree.node(nd).hash {
		return
	}
	k := rankNode{id, nd}
	if hs := x.alias[k]; hs != nil {
		if delete(hs, h); len(hs) == 0 {
			delete(x.alias, k)
		}
	}
}

// Clear drops every block of id and returns how many there were.
func (x *Index) Clear(id RankID) int {
	r := &x.ranks[id]
	n := r.blocks.used
	r.blocks.each(func(nd uint32) {
		delete(x.alias, rankNode{id, nd})
		x.detach(nd, id)
	})
	// Sorted, so that the nodes are freed, and their ids reused, in the
	// same order on every run.
	for _, nd := range slices.Sorted(maps.Keys(r.phantom)) {
		x.detach(nd, id)
	}
	r.blocks, r.phantom = edgeTable{}, nil
	return n
}

// Blocks returns how many blocks id caches.
func (x *Index) Blocks(id RankID) int { return x.ranks[id].blocks.used }

// Nodes returns how many prefixes the index holds: nodes of its tree.
func (x *Index) Nodes() int { return x.tree.nodes() }

// FindMatches writes into overlap[r] the number of leading blocks of local
// that rank r caches as one contiguous prefix, for every rank r below
// len(overlap). Matched then lists the ranks it gave an overlap.
//
// It walks the prompt down the tree once for all ranks, keeping the ranks
// still matching as a mask per group, and stops as soon as none is.
func (x *Index) FindMatches(local []protocol.LocalBlockHash, overlap []uint32) {
	clear(overlap)
	x.matched = x.matched[:0]
	x.alive = x.alive[:0]
	alive := 0
	for g, m := range x.live {
		if m != 0 {
			x.alive = append(x.alive, groupPair{uint32(g), m})
			alive += bits.OnesCount64(m)
		}
	}
	depth := uint32(0)
	w := walk{t: x.tree, id: root, n: x.tree.node(root)}
	for _, h := range local {
		if alive == 0 || !w.down(uint64(h)) {
			break
		}
		// Between commands a rank that holds a node holds its parent, and
		// only live ranks hold nodes (Store takes live ranks only), so the
		// ranks still matching are the node's holders, and a child's are
		// among its parent's: as many means the same ones, and only where
		// there are fewer need the masks be read. A rank's overlap is the
		// depth at which it drops out, written once per rank (and not at
		// all for those that match nothing: overlap starts cleared).
		if n := x.tree.count(w.n); n != alive {
			x.alive, x.matched = x.tree.narrow(w.id, x.alive, depth, overlap, x.matched)
			alive = n
		}
		depth++
	}
	if depth > 0 {
		for _, a := range x.alive {
			x.matched = setDepth(a.group, a.mask, depth, overlap, x.matched)
		}
	}
}

// Matched returns the ranks the last FindMatches gave an overlap, each
// once, in no particular order: a caller that wants only those need not
// read every rank's. The slice is the index's, valid until the next
// FindMatches.
func (x *Index) Matched() []RankID { return x.matched }

func (x *Index) attach(nd uint32, id RankID, h protocol.SequenceHash) {
	if uint64(h) != x.tree.node(nd).hash {
		k := rankNode{id, nd}
		if x.alias[k] == nil {
			x.alias[k] = map[protocol.SequenceHash]struct{}{}
		}
		x.alias[k][h] = struct{}{}
	}
	if r := &x.ranks[id]; len(r.phantom) > 0 {
		if _, ok := r.phantom[nd]; ok { // the rank holds nd already, now by a hash
			delete(r.phantom, nd)
			return
		}
	}
	if x.tree.hold(nd, id) {
		x.holdsChild(nd, id)
	} else {
		x.extra[rankNode{id, nd}]++
	}
}

// detach removes id from node nd and prunes nodes left with neither ranks
// nor children.
func (x *Index) detach(nd uint32, id RankID) {
	switch {
	case len(x.extra) > 0 && x.extra[rankNode{id, nd}] > 0:
		if x.extra[rankNode{id, nd}]--; x.extra[rankNode{id, nd}] == 0 {
			delete(x.extra, rankNode{id, nd})
		}
		return
	default:
		x.tree.release(nd, id)
	}
	x.leftChild(nd, id)
	x.prune(nd)
}

// prune frees node n if it has no children and no rank holds it, then its
// ancestors likewise, walking up toward the root.
func (x *Index) prune(n uint32) {
	for n != root {
		if !x.tree.node(n).leaf() || x.tree.held(n) {
			return
		}
		n = x.tree.unlink(n)
	}
}

// PathHashes appends to out the block hash of each node down the prompt's
// path, at most depth of them: out[d-1] is the hash a rank matching d
// blocks last matched (the node's first hash: a rank that stored it under
// another seed is not told apart). A lower tier's match continues from it.
func (x *Index) PathHashes(local []protocol.LocalBlockHash, depth int, out []protocol.SequenceHash) []protocol.SequenceHash {
	w := walk{t: x.tree, id: root, n: x.tree.node(root)}
	for _, h := range local[:min(depth, len(local))] {
		if !w.down(uint64(h)) {
			break
		}
		out = append(out, protocol.SequenceHash(w.n.hash))
	}
	return out
}
