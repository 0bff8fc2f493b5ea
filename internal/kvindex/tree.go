package kvindex

// Tree is a radix tree of prompts keyed by local block hashes: a node is a
// prefix, found from its parent by the local hash of its last block, and
// carries a payload P. Both the cache index and the engine's active-block
// accounting are such trees. Node ids stay valid until the node is pruned.
type Tree[P any] struct {
	// pages of pageSize nodes: a growing tree adds pages and never copies
	// the nodes it has (node n is pages[n>>pageBits][n&pageMask]).
	pages    [][]treeNode[P]
	next     uint32 // the next never-used node id
	free     []uint32
	children edgeTable
}

const (
	pageBits = 12
	pageSize = 1 << pageBits
	pageMask = pageSize - 1
)

// Root is the empty prefix, the parent of every first block.
const Root uint32 = 0

type treeNode[P any] struct {
	parent    uint32
	nchildren uint32
	local     uint64
	payload   P
}

// NewTree returns a tree holding only the root.
func NewTree[P any]() *Tree[P] {
	return &Tree[P]{pages: [][]treeNode[P]{make([]treeNode[P], pageSize)}, next: 1}
}

func (t *Tree[P]) node(n uint32) *treeNode[P] { return &t.pages[n>>pageBits][n&pageMask] }

// Lookup finds the child of parent for local.
func (t *Tree[P]) Lookup(parent uint32, local uint64) (uint32, bool) {
	return t.children.find(parent, local)
}

// Child finds or makes the child of parent for local.
func (t *Tree[P]) Child(parent uint32, local uint64) uint32 {
	c, added := t.children.findOrAdd(parent, local, t.alloc)
	if added {
		*t.node(c) = treeNode[P]{parent: parent, local: local}
		t.node(parent).nchildren++
	}
	return c
}

// alloc takes a free node id, adding a page if there is none.
func (t *Tree[P]) alloc() uint32 {
	if n := len(t.free); n > 0 {
		c := t.free[n-1]
		t.free = t.free[:n-1]
		return c
	}
	if int(t.next>>pageBits) == len(t.pages) {
		t.pages = append(t.pages, make([]treeNode[P], pageSize))
	}
	t.next++
	return t.next - 1
}

// At returns node n's payload; the pointer stays valid while n is in the tree.
func (t *Tree[P]) At(n uint32) *P { return &t.node(n).payload }

// Prune frees n if it has no children and its payload is empty, then its
// ancestors likewise, walking up toward the root.
func (t *Tree[P]) Prune(n uint32, empty func(n uint32, p *P) bool) {
	for n != Root && t.node(n).nchildren == 0 && empty(n, &t.node(n).payload) {
		nd := *t.node(n)
		t.children.remove(nd.parent, nd.local)
		t.node(nd.parent).nchildren--
		*t.node(n) = treeNode[P]{}
		t.free = append(t.free, n)
		n = nd.parent
	}
}

// Len returns how many prefixes the tree holds, the root excluded.
func (t *Tree[P]) Len() int { return int(t.next) - 1 - len(t.free) }
