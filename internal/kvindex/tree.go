package kvindex

// Tree is a radix tree of prompts keyed by local block hashes: a node is a
// prefix, found from its parent by the local hash of its last block, and
// carries a payload P. Both the cache index and the engine's active-block
// accounting are such trees. Node ids stay valid until the node is pruned.
//
// Most nodes of a prompt tree have one child, so each node keeps its first
// child itself and only further children go to the shared edge table: a walk
// down a chain reads one node per block instead of probing the table too,
// and a stored chain that extends a leaf adds no edge at all.
//
// Nodes live in fixed-size pages: a tree of millions of nodes grows by one
// page at a time, never copying what it holds (a doubling slice copied and
// cleared hundreds of megabytes, and its copies held up the garbage
// collector's stops).
type Tree[P any] struct {
	pages    []*[pageSize]treeNode[P]
	size     uint32 // node ids in use or freed: the next new id
	free     []uint32
	children edgeTable
}

const (
	pageBits = 12
	pageSize = 1 << pageBits
)

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
	t := &Tree[P]{}
	t.alloc()
	return t
}

// node returns node n; the pointer stays valid until n is pruned.
func (t *Tree[P]) node(n uint32) *treeNode[P] {
	return &t.pages[n>>pageBits][n&(pageSize-1)]
}

// step finds the child of node id (whose node is p) for local: its id and
// node, or nil.
func (t *Tree[P]) step(id uint32, p *treeNode[P], local uint64) (uint32, *treeNode[P]) {
	if p.first != 0 {
		if c := t.node(p.first); c.local == local {
			return p.first, c
		}
	}
	if !p.inTable() {
		return 0, nil
	}
	if c, ok := t.children.find(id, local); ok {
		return c, t.node(c)
	}
	return 0, nil
}

// Walk is a position in the tree for following a prompt down from the
// root, one block at a time, without looking up the current node again.
type Walk[P any] struct {
	t  *Tree[P]
	id uint32
	n  *treeNode[P]
}

// Walk starts a walk at the root.
func (t *Tree[P]) Walk() Walk[P] { return Walk[P]{t: t, id: Root, n: t.node(Root)} }

// Down moves to the child for local and reports whether there is one; if
// not, the walk stays where it is.
func (w *Walk[P]) Down(local uint64) bool {
	c, n := w.t.step(w.id, w.n, local)
	if n == nil {
		return false
	}
	w.id, w.n = c, n
	return true
}

// Node is the walk's current node.
func (w *Walk[P]) Node() uint32 { return w.id }

// Payload is the current node's payload.
func (w *Walk[P]) Payload() *P { return &w.n.payload }

// inTable reports whether some of the node's children are in the edge table.
func (n *treeNode[P]) inTable() bool {
	return n.nchildren > 1 || (n.nchildren == 1 && n.first == 0)
}

// Child finds or makes the child of parent for local.
func (t *Tree[P]) Child(parent uint32, local uint64) uint32 {
	p := t.node(parent)
	if p.first != 0 && t.node(p.first).local == local {
		return p.first
	}
	var c uint32
	if p.first == 0 && p.nchildren == 0 {
		c = t.alloc()
		p.first = c
	} else {
		var added bool
		if c, added = t.children.findOrAdd(parent, local, t.alloc); !added {
			return c
		}
	}
	*t.node(c) = treeNode[P]{parent: parent, local: local}
	p.nchildren++
	return c
}

// alloc takes a free node id, growing the node slice if there is none.
func (t *Tree[P]) alloc() uint32 {
	if n := len(t.free); n > 0 {
		c := t.free[n-1]
		t.free = t.free[:n-1]
		return c
	}
	if t.size&(pageSize-1) == 0 {
		t.pages = append(t.pages, new([pageSize]treeNode[P]))
	}
	t.size++
	return t.size - 1
}

// At returns node n's payload; the pointer stays valid until n is pruned.
func (t *Tree[P]) At(n uint32) *P { return &t.node(n).payload }

// Prune frees n if it has no children and its payload is empty, then its
// ancestors likewise, walking up toward the root.
func (t *Tree[P]) Prune(n uint32, empty func(n uint32, p *P) bool) {
	for n != Root && t.node(n).nchildren == 0 && empty(n, &t.node(n).payload) {
		nd := t.node(n)
		p := t.node(nd.parent)
		if p.first == n {
			p.first = 0
		} else {
			t.children.remove(nd.parent, nd.local)
		}
		p.nchildren--
		parent := nd.parent
		*nd = treeNode[P]{}
		t.free = append(t.free, n)
		n = parent
	}
}

// Len returns how many prefixes the tree holds, the root excluded.
func (t *Tree[P]) Len() int { return int(t.size) - 1 - len(t.free) }
