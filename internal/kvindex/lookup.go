package kvindex

import "github.com/offline-router/offline-router/internal/protocol"

// How a rank's block hashes are found: through its table, or, in a lazy
// index, without one (by the path a store names its parent by, by the
// end of the edge a freed chain starts at, by comparing the hashes of the
// blocks before), until the rank needs a table and gets one.

// HasBlock reports whether id caches the block addressed by blockHash.
func (x *Index) HasBlock(id RankID, blockHash protocol.SequenceHash) bool {
	if _, ok := x.lazyEnd(id, blockHash); ok {
		return true
	}
	_, ok := x.ranks[id].blocks.find(0, uint64(blockHash))
	return ok
}

// Lazy makes the ranks of the index, which must be new, keep no tables
// from their block hashes to their blocks: a store then costs a few edges
// whatever its length, not a table entry a block, and so does a removal of
// a chain tail first, found by the hash of the edge it starts at the end
// of (tree.ends). It takes a block hash to name one prefix, as the hash of
// a chain of local hashes does (kvindex.SequenceHashes, the replay's):
// a rank that names a hash it cannot find so, or stores a block under
// another hash than the one it was first stored under, gets its table
// then, and keeps it.
func (x *Index) Lazy() {
	x.lazy = true
	x.tree.ends = &endIndex{}
}

// materialize gives rank id its table: every block it holds, by its hash.
func (x *Index) materialize(id RankID) {
	r := &x.ranks[id]
	r.table = true
	x.heldBelow(root, id, func(c uint32) {
		nd := x.tree.node(c)
		for s := nd.start; s < nd.start+nd.n; s++ {
			r.blocks.findOrAdd(0, x.tree.slab.at(s).hash, func() uint32 { return s })
		}
	})
}

// find returns the slot of id's block named h: from its table, or, for a
// rank that keeps none, the end of an edge it holds, else from the table it
// then gets.
func (x *Index) find(id RankID, h protocol.SequenceHash) (uint32, bool) {
	if s, ok := x.lazyEnd(id, h); ok {
		return s, true
	}
	return x.ranks[id].blocks.find(0, uint64(h))
}

// lazyEnd returns, for a rank that keeps no table, the slot of the block
// named h if it ends an edge the rank holds (the only edge ending in h), as
// a rank's deepest block does; else the rank gets its table, and the caller
// looks h up there (as it does for a rank that had one).
func (x *Index) lazyEnd(id RankID, h protocol.SequenceHash) (uint32, bool) {
	if x.ranks[id].table {
		return 0, false
	}
	if e, ok := x.tree.ends.find(uint64(h)); ok && x.tree.holds(e, id) {
		nd := x.tree.node(e)
		return nd.start + nd.n - 1, true
	}
	x.materialize(id)
	return 0, false
}

// walkTo returns the slot of the block at the end of path, if id holds it
// and its hash is h.
func (x *Index) walkTo(id RankID, path []protocol.LocalBlockHash, h uint64) (uint32, bool) {
	t := x.tree
	for e, d := root, 0; ; {
		c, ok := t.child(e, uint64(path[d]))
		if !ok {
			return 0, false
		}
		nd := t.node(c)
		j := t.follow(nd, path[d:])
		if d+j == len(path) {
			s := nd.start + uint32(j) - 1
			return s, t.holds(c, id) && t.slab.at(s).hash == h
		}
		if j < int(nd.n) {
			return 0, false
		}
		d, e = d+j, c
	}
}

// take takes hash h from id's hashes and returns its block's slot, if id
// has it (a rank that keeps no table has it at the end of an edge it
// holds, or gets its table).
func (x *Index) take(id RankID, h protocol.SequenceHash) (uint32, bool) {
	if s, ok := x.lazyEnd(id, h); ok {
		return s, true
	}
	s, ok := x.ranks[id].blocks.take(0, uint64(h))
	if ok {
		x.unalias(s, id, h)
	}
	return s, ok
}

// takeBefore takes h from id's hashes if it names block s, the one before a
// block it is leaving, by its only hash there.
func (x *Index) takeBefore(id RankID, h protocol.SequenceHash, s uint32) bool {
	if !x.ranks[id].table {
		return x.tree.slab.at(s).hash == uint64(h)
	}
	if x.hasExtra(id, s) || !x.ranks[id].blocks.takeIf(0, uint64(h), s) {
		return false
	}
	x.unalias(s, id, h)
	return true
}
