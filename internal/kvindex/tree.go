package kvindex

import "slices"

// Tree is a radix tree of prompts keyed by local block hashes: a node is a
// prefix, found from its parent by the local hash of its last block, and
// carries a payload P. Both the cache index and the engine's active-block
// accounting are such trees. Node ids stay valid until the node is pruned.
//
// Most nodes of a prompt tree have one child, so each node keeps its first
// child itself and only further children go to the shared edge table: a walk
// down a chain reads one node per block instead of probing the table too,
// and a stored chain that extends a leaf adds no edge at all.
type Tree[P any] struct {
	nodes    []treeNode[P]
	free     []uint32
	children edgeTable
}

// Root is the empty prefix, the parent of every first block.
const Root uint32 = 0

type treeNode[P any] struct {
	parent    uint32
	nchildren uint32
	first     uint32 // a child kept here rather than in the edge table; 0: none
	local     uint64
	payload   P
}

// NewTree returns a tree holding only the root.
func NewTree[P any]() *Tree[P] {
	return &Tree[P]{nodes: make([]treeNode[P], 1)}
}

// Lookup finds the child of parent for local.
func (t *Tree[P]) Lookup(parent uint32, local uint64) (uint32, bool) {
	p := &t.nodes[parent]
	if p.first != 0 && t.nodes[p.first].local == local {
		return p.first, true
	}
	if !p.inTable() {
		return 0, false
	}
	return t.children.find(parent, local)
}

// inTable reports whether some of the node's children are in the edge table.
func (n *treeNode[P]) inTable() bool {
	return n.nchildren > 1 || (n.nchildren == 1 && n.first == 0)
}

// Child finds or makes the child of parent for local.
func (t *Tree[P]) Child(parent uint32, local uint64) uint32 {
	p := &t.nodes[parent]
	if p.first != 0 && t.nodes[p.first].local == local {
		return p.first
	}
	var c uint32
	if p.first == 0 && p.nchildren == 0 {
		c = t.alloc()
		t.nodes[parent].first = c
	} else {
		var added bool
		if c, added = t.children.findOrAdd(parent, local, t.alloc); !added {
			return c
		}
	}
	t.nodes[c] = treeNode[P]{parent: parent, local: local}
	t.nodes[parent].nchildren++
	return c
}

// alloc takes a free node id, growing the node slice if there is none.
func (t *Tree[P]) alloc() uint32 {
	if n := len(t.free); n > 0 {
		c := t.free[n-1]
		t.free = t.free[:n-1]
		return c
	}
	if len(t.nodes) == cap(t.nodes) {
		// Double: append's gentler growth for large slices copies a
		// fast-growing tree several times over.
		t.nodes = slices.Grow(t.nodes, len(t.nodes))
	}
	t.nodes = append(t.nodes, treeNode[P]{})
	return uint32(len(t.nodes) - 1)
}

// At returns node n's payload; the pointer is valid until the next Child.
func (t *Tree[P]) At(n uint32) *P { return &t.nodes[n].payload }

// Prune frees n if it has no children and its payload is empty, then its
// ancestors likewise, walking up toward the root.
func (t *Tree[P]) Prune(n uint32, empty func(n uint32, p *P) bool) {
	for n != Root && t.nodes[n].nchildren == 0 && empty(n, &t.nodes[n].payload) {
		nd := t.nodes[n]
		if p := &t.nodes[nd.parent]; p.first == n {
			p.first = 0
		} else {
			t.children.remove(nd.parent, nd.local)
		}
		t.nodes[nd.parent].nchildren--
		var zero treeNode[P]
		t.nodes[n] = zero
		t.free = append(t.free, n)
		n = nd.parent
	}
}

// Len returns how many prefixes the tree holds, the root excluded.
func (t *Tree[P]) Len() int { return len(t.nodes) - 1 - len(t.free) }
