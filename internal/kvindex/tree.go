package kvindex

import (
	"unsafe"

	"github.com/offline-router/offline-router/internal/protocol"
)

// tree is the index's radix tree of cached prefixes, keyed by local block
// hashes and path-compressed: a node is an edge, a run of consecutive
// blocks (each the only child of the one before it) that the same ranks
// hold (holders.go), its blocks side by side in the slab (slab.go). A
// child hangs off its parent edge's last block and is found by its first
// block's local hash. An edge is cut in two where its blocks stop sharing
// holders or a child hangs off a block inside it; a store or removal of a
// run of blocks then costs a few edges, and a walk compares the blocks of
// an edge in a row. Edge ids stay valid until the edge is pruned, or, for
// an edge with children, split (its head then has a new id; its tail,
// where the children hang, keeps it).
//
// Most edges have one child, so each edge keeps its first child itself and
// only further children go to the shared edge table: a walk down a chain
// reads one edge per step instead of probing the table too.
//
// Edges live in fixed-size pages: a tree of millions of edges grows by one
// page at a time, never copying what it holds (a doubling slice copied and
// cleared hundreds of megabytes, and its copies held up the garbage
// collector's stops). Edges hold no pointers, so the collector skips them.
type tree struct {
	pages    []*treePage
	size     uint32 // edge ids in use or freed: the next new id
	free     []uint32
	children edgeTable
	// tabled lists, for an edge and a group of ranks, the edge's children
	// in the edge table that ranks of the group hold, and tabledAt where
	// each child is in such a list: a removal visits the children its
	// rank's group holds, not the thousands other groups may have given a
	// shared edge, and a child leaves a list in O(1). inEdges counts each
	// edge's children in the edge table (those edges carry inTable).
	tabled   map[nodeGroup][]uint32
	tabledAt map[nodeGroup]int
	inEdges  map[uint32]uint32
	wide     holders // the lists of the edges several groups hold (holders.go)
	slab     slab
	blocks   int       // the edges' blocks: prefixes held
	ends     *endIndex // for a lazy index (Index.Lazy): each edge by its last block's hash
}

// treePage is a page of edges and, beside them (so that an edge stays 32
// bytes), each edge's group: the group whose mask the edge keeps.
type treePage struct {
	nodes  [pageSize]treeNode
	groups [pageSize]uint16
}

const (
	pageBits = 12
	pageSize = 1 << pageBits
)

// root is the empty prefix, the parent of every first block: an edge of no
// blocks.
const root uint32 = 0

type treeNode struct {
	up    uint32 // the parent's id, and the inTable, wideFlag and tabledFlag flags
	first uint32 // a child kept here rather than in the edge table; 0: none
	local uint64 // the first block's local hash, which the parent finds it by
	mask  uint64 // the ranks of the edge's group that hold it; with wideFlag, the index of its list (holders.go)
	start uint32 // its first block's slot
	n     uint32 // its blocks; 0 for the root and a free id
}

// inTable marks an edge some of whose children are in the edge table,
// wideFlag one that ranks of more than one group hold (holders.go), and
// tabledFlag an edge that is itself one of those children: an edge coming
// to be held or let go reads its own flag rather than its parent (a
// second cache miss, a third of a removal's time). Ids stay below all
// three.
const (
	inTable    = 1 << 31
	wideFlag   = 1 << 30
	tabledFlag = 1 << 29
)

func (n *treeNode) parent() uint32 { return n.up &^ (inTable | wideFlag | tabledFlag) }

func (n *treeNode) wide() bool { return n.up&wideFlag != 0 }

// leaf reports whether the edge has no children.
func (n *treeNode) leaf() bool { return n.first == 0 && n.up&inTable == 0 }

// newTree returns a tree holding only the root.
func newTree() *tree {
	t := &tree{tabled: map[nodeGroup][]uint32{}, tabledAt: map[nodeGroup]int{}, inEdges: map[uint32]uint32{}, slab: newSlab()}
	t.alloc()
	return t
}

// node returns edge n; the pointer stays valid until n is pruned.
func (t *tree) node(n uint32) *treeNode {
	return &t.pages[n>>pageBits].nodes[n&(pageSize-1)]
}

// group returns edge n's group, and groupAt where it is.
func (t *tree) group(n uint32) uint16 { return t.pages[n>>pageBits].groups[n&(pageSize-1)] }

func (t *tree) groupAt(n uint32) *uint16 { return &t.pages[n>>pageBits].groups[n&(pageSize-1)] }

// local returns the local hash of the block at slot.
func (t *tree) local(slot uint32) uint64 { return t.slab.at(slot).local }

// child returns the child of edge p for local, if there is one.
func (t *tree) child(p uint32, local uint64) (uint32, bool) {
	nd := t.node(p)
	if nd.first != 0 && t.node(nd.first).local == local {
		return nd.first, true
	}
	if nd.up&inTable == 0 {
		return 0, false
	}
	return t.children.find(p, local)
}

// maxEdge bounds an edge's blocks, so that finding a block's edge in the
// slab's start bits (slab.edgeOf) scans at most maxEdge/64 words: a chain
// longer than that is stored as edges of maxEdge, as if cut. (A variable
// so that tests cut chains short.)
var maxEdge = 4096

// addEdge makes an edge of blocks, as many as an edge holds, held by no
// rank, a child of parent, which has none for the first block's local
// hash, and returns it.
func (t *tree) addEdge(parent uint32, blocks []Block) uint32 {
	blocks = blocks[:min(len(blocks), maxEdge)]
	c := t.alloc()
	start := t.slab.alloc(len(blocks))
	for i, b := range blocks {
		*t.slab.at(start + uint32(i)) = slabBlock{local: uint64(b.TokensHash), hash: uint64(b.BlockHash)}
	}
	t.slab.mark(start, c)
	t.blocks += len(blocks)
	if t.ends != nil {
		t.ends.add(uint64(blocks[len(blocks)-1].BlockHash), c)
	}
	up := parent
	p := t.node(parent)
	if p.leaf() {
		p.first = c
	} else {
		t.children.findOrAdd(parent, uint64(blocks[0].TokensHash), func() uint32 { return c })
		t.inEdges[parent]++
		p.up |= inTable
		up |= tabledFlag
	}
	*t.node(c) = treeNode{up: up, local: uint64(blocks[0].TokensHash), start: start, n: uint32(len(blocks))}
	return c
}

// split cuts edge e before its block at offset i (0 < i < its length)
// and returns the two edges, head and tail, held as e was. An edge without
// children keeps its id on the head, so that its parent's links stay; one
// with children keeps it on the tail, where they hang, and the head takes
// its place under the parent.
func (t *tree) split(e, i uint32) (head, tail uint32) {
	nd := t.node(e)
	if nd.leaf() {
		tail = t.alloc()
		nd = t.node(e)
		tn := t.node(tail)
		*tn = treeNode{up: e, local: t.local(nd.start + i), start: nd.start + i, n: nd.n - i}
		t.copyHolders(e, tail)
		if t.ends != nil {
			end := t.endHash(nd)
			t.ends.remove(end, e)
			t.ends.add(end, tail)
			t.ends.add(t.slab.at(nd.start+i-1).hash, e)
		}
		nd.n, nd.first = i, tail
		t.slab.mark(tn.start, tail)
		return e, tail
	}
	head = t.alloc()
	nd = t.node(e)
	hn := t.node(head)
	*hn = treeNode{up: nd.up &^ (inTable | wideFlag), local: nd.local, start: nd.start, n: i, first: e}
	t.copyHolders(e, head)
	parent, tabled := nd.parent(), nd.up&tabledFlag != 0
	nd.up = nd.up&(inTable|wideFlag) | head
	nd.local, nd.start, nd.n = t.local(nd.start+i), nd.start+i, nd.n-i
	t.slab.mark(hn.start, head)
	t.slab.mark(nd.start, e)
	if t.ends != nil {
		t.ends.add(t.endHash(hn), head)
	}
	if p := t.node(parent); p.first == e {
		p.first = head
	} else {
		t.children.set(parent, hn.local, head)
	}
	if tabled {
		t.eachGroup(head, func(g uint32) {
			at := t.tabledAt[nodeGroup{e, g}]
			delete(t.tabledAt, nodeGroup{e, g})
			t.tabled[nodeGroup{parent, g}][at] = head
			t.tabledAt[nodeGroup{head, g}] = at
		})
	}
	return head, e
}

// kids appends the children of n to out: the one kept in the edge, and,
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

// nodeGroup is an edge and a group of ranks.
type nodeGroup struct {
	node  uint32
	group uint32
}

// joined and left keep tabled as group g comes to hold edge n, or stops.
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

// alloc takes a free edge id, adding a page if there is none.
func (t *tree) alloc() uint32 {
	if n := len(t.free); n > 0 {
		c := t.free[n-1]
		t.free = t.free[:n-1]
		return c
	}
	if t.size&(pageSize-1) == 0 {
		if t.size == tabledFlag {
			panic("kvindex: 2^29 tree edges (17 GiB of them): ids would collide with the edge flags")
		}
		page := new(treePage)
		_ = prefault(unsafe.Pointer(page), unsafe.Sizeof(*page))
		t.pages = append(t.pages, page)
	}
	t.size++
	return t.size - 1
}

// unlink removes leaf n from the tree, frees its id and its blocks, and
// returns its parent.
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
	if t.ends != nil {
		t.ends.remove(t.endHash(nd), n)
	}
	t.slab.unmark(nd.start)
	t.slab.dead += int(nd.n)
	t.blocks -= int(nd.n)
	*nd = treeNode{}
	*t.groupAt(n) = 0
	t.free = append(t.free, n)
	return parent
}

// endHash is the block hash of edge nd's last block.
func (t *tree) endHash(nd *treeNode) uint64 { return t.slab.at(nd.start + nd.n - 1).hash }

// follow returns how many of local's first blocks edge nd's blocks are, the
// first of which a child look-up has matched already.
func (t *tree) follow(nd *treeNode, local []protocol.LocalBlockHash) int {
	j := 1
	for j < int(nd.n) && j < len(local) && t.local(nd.start+uint32(j)) == uint64(local[j]) {
		j++
	}
	return j
}

// hashed reports whether blocks have the hashes their blocks from slot on
// were first stored under.
func (t *tree) hashed(slot uint32, blocks []Block) bool {
	for i, b := range blocks {
		if t.slab.at(slot+uint32(i)).hash != uint64(b.BlockHash) {
			return false
		}
	}
	return true
}
