package kvindex

import "unsafe"

// tree is the index's radix tree of cached prefixes, keyed by local block
// hashes: a node is a prefix, found from its parent by the local hash of its
// last block, and carries the ranks caching it (holders.go). Node
// ids stay valid until the node is pruned.
//
// Most nodes of a prompt tree have one child, so each node keeps its first
// child itself and only further children go to the shared edge table: a walk
// down a chain reads one node per block instead of probing the table too,
// and a stored chain that extends a leaf adds no edge at all.
//
// Nodes live in fixed-size pages: a tree of millions of nodes grows by one
// page at a time, never copying what it holds (a doubling slice copied and
// cleared hundreds of megabytes, and its copies held up the garbage
// collector's stops). Nodes hold no pointers, so the collector skips them.
type tree struct {
	pages    []*treePage
	size     uint32 // node ids in use or freed: the next new id
	free     []uint32
	children edgeTable
	// tabled lists, for a node and a group of ranks, the node's children
	// in the edge table that ranks of the group hold, and tabledAt where
	// each child is in such a list: a removal visits the children its
	// rank's group holds, not the thousands other groups may have given a
	// shared node, and a child leaves a list in O(1). inEdges counts each
	// node's children in the edge table (those nodes carry inTable).
	tabled   map[nodeGroup][]uint32
	tabledAt map[nodeGroup]int
	inEdges  map[uint32]uint32
	wide     holders // the lists of the nodes several groups hold (holders.go)
}

// treePage is a page of nodes and, beside them (so that a node stays 32
// bytes), each node's group: the group whose mask the node keeps.
type treePage struct {
	nodes  [pageSize]treeNode
	groups [pageSize]uint16
}

const (
	pageBits = 12
	pageSize = 1 << pageBits
)

// root is the empty prefix, the parent of every first block.
const root uint32 = 0

type treeNode struct {
	up    uint32 // the parent's id, and the inTable, wideFlag and tabledFlag flags
	first uint32 // a child kept here rather than in the edge table; 0: none
	local uint64
	mask  uint64 // the ranks of the node's group that hold it; with wideFlag, the index of its list (holders.go)
	hash  uint64 // the block hash the node was first stored under
}

// inTable marks a node some of whose children are in the edge table,
// wideFlag one that ranks of more than one group hold (holders.go), and
// tabledFlag a node that is itself one of those children: a node coming
// to be held or let go reads its own flag rather than its parent (a
// second cache miss a block, a third of a removal's time). Node ids stay
// below all three.
const (
	inTable    = 1 << 31
	wideFlag   = 1 << 30
	tabledFlag = 1 << 29
)

func (n *treeNode) parent() uint32 { return n.up &^ (inTable | wideFlag | tabledFlag) }

func (n *treeNode) wide() bool { return n.up&wideFlag != 0 }

// leaf reports whether the node has no children.
func (n *treeNode) leaf() bool { return n.first == 0 && n.up&inTable == 0 }

// newTree returns a tree holding only the root.
func newTree() *tree {
	t := &tree{tabled: map[nodeGroup][]uint32{}, tabledAt: map[nodeGroup]int{}, inEdges: map[uint32]uint32{}}
	t.alloc()
	return t
}

// node returns node n; the pointer stays valid until n is pruned.
func (t *tree) node(n uint32) *treeNode {
	return &t.pages[n>>pageBits].nodes[n&(pageSize-1)]
}

// group returns node n's group, and groupAt where it is.
func (t *tree) group(n uint32) uint16 { return t.pages[n>>pageBits].groups[n&(pageSize-1)] }

func (t *tree) groupAt(n uint32) *uint16 { return &t.pages[n>>pageBits].groups[n&(pageSize-1)] }

// walk is a position in the tree for following a prompt down from the
// root, one block at a time, without looking up the current node again.
type walk struct {
	t  *tree
	id uint32
	n  *treeNode
}

// down moves to the child for local and reports whether there is one; if
// not, the walk stays where it is.
func (w *walk) down(local uint64) bool {
	p := w.n
	if p.first != 0 {
		if c := w.t.node(p.first); c.local == local {
			w.id, w.n = p.first, c
			return true
		}
	}
	if p.up&inTable == 0 {
		return false
	}
	c, ok := w.t.children.find(w.id, local)
	if ok {
		w.id, w.n = c, w.t.node(c)
	}
	return ok
}

// child finds or makes the child of parent for local, and reports whether
// it made it.
func (t *tree) child(parent uint32, local uint64) (uint32, bool) {
	p := t.node(parent)
	if p.first != 0 && t.node(p.first).local == local {
		return p.first, false
	}
	var c uint32
	up := parent
	if p.leaf() {
		c = t.alloc()
		p.first = c
	} else {
		var added bool
		if c, added = t.children.findOrAdd(parent, local, t.alloc); !added {
			return c, false
		}
		t.inEdges[parent]++
		p.up |= inTable
		up |= tabledFlag
	}
	*t.node(c) = treeNode{up: up, local: local}
	return c, true
}

// kids appends the children of n to out: the one kept in the node, and,
// with tabled, those in the edge table that ranks of group g hold.
func (t *tree) kids(n uint32, g uint32, tabled bool, out []uint32) []uint32 {
	nd := t.node(n)
	if nd.first != 0 {
		out = append(out, nd.first)
	}
	if tabled && nd.up&inTable != 0 {
		out = append(out, t.tabled[nodeGroup{n, g}]...)
	}
	return out
}

// nodeGroup is a node and a group of ranks.
type nodeGroup struct {
	node  uint32
	group uint32
}

// joined and left keep tabled as group g comes to hold node n, or stops.
func (t *tree) joined(n uint32, g uint32) {
	if p, ok := t.tabledChild(n); ok {
		k := nodeGroup{p, g}
		t.tabledAt[nodeGroup{n, g}] = len(t.tabled[k])
		t.tabled[k] = append(t.tabled[k], n)
	}
}

func (t *tree) left(n uint32, g uint32) {
	p, ok := t.tabledChild(n)
	if !ok {
		return
	}
	k, at := nodeGroup{p, g}, nodeGroup{n, g}
	kids, i := t.tabled[k], t.tabledAt[at]
	last := kids[len(kids)-1]
	kids[i], t.tabledAt[nodeGroup{last, g}] = last, i
	delete(t.tabledAt, at)
	if kids = kids[:len(kids)-1]; len(kids) == 0 {
		delete(t.tabled, k)
	} else {
		t.tabled[k] = kids
	}
}

// tabledChild returns the parent of n, and whether n is one of the
// parent's children in the edge table (a child stays where it was put).
func (t *tree) tabledChild(n uint32) (uint32, bool) {
	nd := t.node(n)
	return nd.parent(), nd.up&tabledFlag != 0
}

// alloc takes a free node id, adding a page if there is none.
func (t *tree) alloc() uint32 {
	if n := len(t.free); n > 0 {
		c := t.free[n-1]
		t.free = t.free[:n-1]
		return c
	}
	if t.size&(pageSize-1) == 0 {
		if t.size == tabledFlag {
			panic("kvindex: 2^29 tree nodes (17 GiB of them): node ids would collide with the node flags")
		}
		page := new(treePage)
		_ = prefault(unsafe.Pointer(page), unsafe.Sizeof(*page))
		t.pages = append(t.pages, page)
	}
	t.size++
	return t.size - 1
}

// unlink removes leaf n from the tree, frees its id and returns its parent.
func (t *tree) unlink(n uint32) uint32 {
	nd := t.node(n)
	parent := nd.parent()
	p := t.node(parent)
	if p.first == n {
		p.first = 0
	} else {
		// No group holds n: it is in no group's list.
		t.children.take(parent, nd.local)
		if t.inEdges[parent]--; t.inEdges[parent] == 0 {
			delete(t.inEdges, parent)
			p.up &^= inTable
		}
	}
	*nd = treeNode{}
	*t.groupAt(n) = 0
	t.free = append(t.free, n)
	return parent
}

// nodes returns how many prefixes the tree holds, the root excluded.
func (t *tree) nodes() int { return int(t.size) - 1 - len(t.free) }
