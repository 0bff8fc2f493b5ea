package kvindex

import "slices"

// Tree is a radix tree of prompts keyed by local block hashes: a node is a
// prefix, found from its parent by the local hash of its last block, and
// carries a payload P. Both the cache index and the engine's active-block
// accounting are such trees. Node ids stay valid until the node is pruned.
type Tree[P any] struct {
	nodes []treeNode[P]
	free  []uint32
	// children finds a node by a mix of its parent and local hash; a key
	// that two edges share (rare) sends the later one to overflow.
	children map[uint64]uint32
	overflow map[edge]uint32
}

// Root is the empty prefix, the parent of every first block.
const Root uint32 = 0

type treeNode[P any] struct {
	parent    uint32
	nchildren uint32
	local     uint64
	payload   P
}

// edge is a child's exact key: its parent node and its local hash.
type edge struct {
	parent uint32
	local  uint64
}

// NewTree returns a tree holding only the root.
func NewTree[P any]() *Tree[P] {
	return &Tree[P]{nodes: make([]treeNode[P], 1), children: map[uint64]uint32{}, overflow: map[edge]uint32{}}
}

func mix(parent uint32, local uint64) uint64 {
	return local ^ (uint64(parent)+1)*0x9e3779b97f4a7c15
}

// Lookup finds the child of parent for local.
func (t *Tree[P]) Lookup(parent uint32, local uint64) (uint32, bool) {
	c, ok := t.children[mix(parent, local)]
	if ok && t.nodes[c].parent == parent && t.nodes[c].local == local {
		return c, true
	}
	if len(t.overflow) > 0 {
		c, ok := t.overflow[edge{parent, local}]
		return c, ok
	}
	return 0, false
}

// Child finds or makes the child of parent for local.
func (t *Tree[P]) Child(parent uint32, local uint64) uint32 {
	key := mix(parent, local)
	c, taken := t.children[key]
	if taken && t.nodes[c].parent == parent && t.nodes[c].local == local {
		return c
	}
	if len(t.overflow) > 0 {
		if c, ok := t.overflow[edge{parent, local}]; ok {
			return c
		}
	}
	if n := len(t.free); n > 0 {
		c, t.free = t.free[n-1], t.free[:n-1]
		t.nodes[c] = treeNode[P]{parent: parent, local: local}
	} else {
		if len(t.nodes) == cap(t.nodes) {
			// Double: append's gentler growth for large slices copies a
			// fast-growing tree several times over.
			t.nodes = slices.Grow(t.nodes, len(t.nodes))
		}
		c = uint32(len(t.nodes))
		t.nodes = append(t.nodes, treeNode[P]{parent: parent, local: local})
	}
	if taken {
		t.overflow[edge{parent, local}] = c
	} else {
		t.children[key] = c
	}
	t.nodes[parent].nchildren++
	return c
}

// At returns node n's payload; the pointer is valid until the next Child.
func (t *Tree[P]) At(n uint32) *P { return &t.nodes[n].payload }

// Prune frees n if it has no children and its payload is empty, then its
// ancestors likewise, walking up toward the root.
func (t *Tree[P]) Prune(n uint32, empty func(n uint32, p *P) bool) {
	for n != Root && t.nodes[n].nchildren == 0 && empty(n, &t.nodes[n].payload) {
		nd := t.nodes[n]
		if c, ok := t.children[mix(nd.parent, nd.local)]; ok && c == n {
			delete(t.children, mix(nd.parent, nd.local))
		} else {
			delete(t.overflow, edge{nd.parent, nd.local})
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
