package kvindex

import (
	"math/bits"
	"slices"
)

// Who holds a node. Ranks are taken in groups of maskRanks by id, and a
// group's holders of a node are one 64-bit mask. A node held by one group
// keeps that mask in itself (and the group beside it, in its page). A node
// held by several keeps instead, in the same field, the index of its list:
// the groups and their masks side by side in two slabs, sorted by group,
// and how many ranks they hold in all; it carries wideFlag.
//
// One tree for every rank, with the masks of the groups that share a
// prefix side by side, so that a match walks the prompt down the tree
// once, whatever the rank count, and reads a node's masks in a row. A node
// held by one group, as almost every node past a shared prefix is, costs
// what it costs with 64 ranks, and 2 bytes for its group.

// maskRanks is how many ranks a group holds: the width of a node's rank
// mask.
const maskRanks = 64

// maxGroups bounds the groups of ranks (2 M ranks; the engine holds
// protocol.MaxRanks, 64 Ki): a node's group is a uint16, and a list's run,
// a uint16 too, doubles up to it.
const maxGroups = 1 << 15

// runSizes is how many run sizes there are: 2^0 to 2^15 (maxGroups).
const runSizes = 16

// groupPair is the ranks of one group that hold a node, or that are still
// matching in a walk.
type groupPair struct {
	group uint32
	mask  uint64
}

// wideList is where a node's list is in the slabs, and how many ranks it
// holds.
type wideList struct {
	off       uint32
	len, size uint16 // size: the run's length in the slabs, a power of two
	held      uint32
}

// holders keeps the lists of the nodes that several groups hold.
type holders struct {
	lists     []wideList
	freeLists []uint32
	groups    []uint16           // slab: each list's groups, in order
	masks     []uint64           // slab: each list's masks, beside its groups
	freeRuns  [runSizes][]uint32 // by log2 of the run's size
}

func split(id RankID) (uint32, uint64) {
	return uint32(id / maskRanks), 1 << (id % maskRanks)
}

// list returns node nd's list, which it has.
func (t *tree) list(nd *treeNode) *wideList { return &t.wide.lists[nd.mask] }

// find returns where group g is in list l, and whether it is there.
func (h *holders) find(l *wideList, g uint32) (int, bool) {
	return slices.BinarySearch(h.groups[l.off:l.off+uint32(l.len)], uint16(g))
}

// holds reports whether rank id holds node n.
func (t *tree) holds(n uint32, id RankID) bool {
	g, bit := split(id)
	nd := t.node(n)
	if !nd.wide() {
		return nd.mask&bit != 0 && t.group(n) == uint16(g) // the group only if the bit is set: it is on another line
	}
	l := t.list(nd)
	i, ok := t.wide.find(l, g)
	return ok && t.wide.masks[l.off+uint32(i)]&bit != 0
}

// held reports whether any rank holds node n.
func (t *tree) held(n uint32) bool {
	nd := t.node(n)
	return nd.mask != 0 || nd.wide()
}

// count returns how many ranks hold node n (at nd).
func (t *tree) count(nd *treeNode) int {
	if nd.wide() {
		return int(t.list(nd).held)
	}
	return bits.OnesCount64(nd.mask)
}

// hold makes rank id a holder of node n, and reports whether it was not
// one already.
func (t *tree) hold(n uint32, id RankID) bool {
	g, bit := split(id)
	nd := t.node(n)
	if !nd.wide() {
		own := t.groupAt(n)
		switch {
		case nd.mask == 0:
			*own, nd.mask = uint16(g), bit
			t.joined(n, g)
			return true
		case uint32(*own) == g:
			was := nd.mask
			nd.mask |= bit
			return was&bit == 0
		}
		// A second group: the node's mask moves to a list of its own.
		i := t.wide.newList()
		l := &t.wide.lists[i]
		t.wide.insert(l, 0, uint32(*own), nd.mask)
		l.held = uint32(bits.OnesCount64(nd.mask))
		*own, nd.mask = 0, uint64(i)
		nd.up |= wideFlag
	}
	h, l := &t.wide, t.list(nd)
	i, ok := h.find(l, g)
	if !ok {
		h.insert(l, i, g, 0)
		t.joined(n, g)
	}
	m := &h.masks[l.off+uint32(i)]
	if *m&bit != 0 {
		return false
	}
	*m |= bit
	l.held++
	return true
}

// release takes rank id off node n, if it holds it.
func (t *tree) release(n uint32, id RankID) {
	g, bit := split(id)
	nd := t.node(n)
	if !nd.wide() {
		if t.group(n) == uint16(g) && nd.mask&bit != 0 {
			if nd.mask &^= bit; nd.mask == 0 {
				t.left(n, g)
			}
		}
		return
	}
	h, i := &t.wide, uint32(nd.mask)
	l := &h.lists[i]
	at, ok := h.find(l, g)
	if !ok || h.masks[l.off+uint32(at)]&bit == 0 {
		return
	}
	m := &h.masks[l.off+uint32(at)]
	*m &^= bit
	l.held--
	if *m == 0 {
		h.remove(l, at)
		t.left(n, g)
	}
	if l.len == 1 {
		// One group left: the node keeps its mask in itself again.
		*t.groupAt(n), nd.mask = h.groups[l.off], h.masks[l.off]
		nd.up &^= wideFlag
		h.freeList(i)
	}
}

// newList returns the index of a new, empty list.
func (h *holders) newList() uint32 {
	if k := len(h.freeLists); k > 0 {
		i := h.freeLists[k-1]
		h.freeLists = h.freeLists[:k-1]
		return i
	}
	h.lists = append(h.lists, wideList{})
	return uint32(len(h.lists) - 1)
}

func (h *holders) freeList(i uint32) {
	l := &h.lists[i]
	h.freeRun(l.off, l.size)
	*l = wideList{}
	h.freeLists = append(h.freeLists, i)
}

// insert puts group g with mask at position at of list l, moving it to a
// run twice the size when it is full.
func (h *holders) insert(l *wideList, at int, g uint32, mask uint64) {
	if l.len == l.size {
		size := max(2*l.size, 2)
		off := h.run(size)
		copy(h.groups[off:], h.groups[l.off:l.off+uint32(l.len)])
		copy(h.masks[off:], h.masks[l.off:l.off+uint32(l.len)])
		if l.size > 0 {
			h.freeRun(l.off, l.size)
		}
		l.off, l.size = off, size
	}
	gs, ms := h.groups[l.off:l.off+uint32(l.len)+1], h.masks[l.off:l.off+uint32(l.len)+1]
	copy(gs[at+1:], gs[at:])
	copy(ms[at+1:], ms[at:])
	gs[at], ms[at] = uint16(g), mask
	l.len++
}

// remove takes the entry at position at out of list l.
func (h *holders) remove(l *wideList, at int) {
	gs, ms := h.groups[l.off:l.off+uint32(l.len)], h.masks[l.off:l.off+uint32(l.len)]
	copy(gs[at:], gs[at+1:])
	copy(ms[at:], ms[at+1:])
	l.len--
}

// run returns the offset of a free run of size entries in the slabs.
func (h *holders) run(size uint16) uint32 {
	c := bits.TrailingZeros16(size)
	if k := len(h.freeRuns[c]); k > 0 {
		off := h.freeRuns[c][k-1]
		h.freeRuns[c] = h.freeRuns[c][:k-1]
		return off
	}
	off := uint32(len(h.groups))
	h.groups = append(h.groups, make([]uint16, size)...)
	h.masks = append(h.masks, make([]uint64, size)...)
	return off
}

func (h *holders) freeRun(off uint32, size uint16) {
	c := bits.TrailingZeros16(size)
	h.freeRuns[c] = append(h.freeRuns[c], off)
}

// narrow keeps, of the ranks still matching (alive, by group in order),
// those that hold node n; those that do not have matched depth blocks,
// which it writes as their overlap (setDepth). It reuses alive's array.
func (t *tree) narrow(n uint32, alive []groupPair, depth uint32, overlap []uint32, matched []RankID) ([]groupPair, []RankID) {
	nd := t.node(n)
	var gs []uint16
	var ms []uint64
	if nd.wide() {
		l := t.list(nd)
		gs, ms = t.wide.groups[l.off:l.off+uint32(l.len)], t.wide.masks[l.off:l.off+uint32(l.len)]
	} else {
		gs, ms = []uint16{t.group(n)}, []uint64{nd.mask}
	}
	k, j := 0, 0
	for _, a := range alive {
		for j < len(gs) && uint32(gs[j]) < a.group {
			j++
		}
		still := uint64(0)
		if j < len(gs) && uint32(gs[j]) == a.group {
			still = a.mask & ms[j]
		}
		if depth > 0 {
			matched = setDepth(a.group, a.mask&^still, depth, overlap, matched)
		}
		if still != 0 {
			alive[k] = groupPair{a.group, still}
			k++
		}
	}
	return alive[:k], matched
}

// setDepth writes depth as the overlap of every rank of group g in mask,
// and appends each to matched.
func setDepth(g uint32, mask uint64, depth uint32, overlap []uint32, matched []RankID) []RankID {
	base := RankID(g) * maskRanks
	for m := mask; m != 0; m &= m - 1 {
		if r := base + RankID(bits.TrailingZeros64(m)); int(r) < len(overlap) {
			overlap[r] = depth
			matched = append(matched, r)
		}
	}
	return matched
}

// copyHolders makes edge to, held by no rank, held as edge from is. It
// leaves the lists of tabled children to the caller: a split's tail is
// no tabled child, and its head takes the place of the edge it came from.
func (t *tree) copyHolders(from, to uint32) {
	f, d := t.node(from), t.node(to)
	if !f.wide() {
		d.mask, *t.groupAt(to) = f.mask, t.group(from)
		return
	}
	h := &t.wide
	i := h.newList()
	l, src := &h.lists[i], h.lists[f.mask]
	for k := range uint32(src.len) {
		h.insert(l, int(k), uint32(h.groups[src.off+k]), h.masks[src.off+k])
	}
	l.held = src.held
	d.mask = uint64(i)
	d.up |= wideFlag
}

// eachGroup calls f with every group holding edge n.
func (t *tree) eachGroup(n uint32, f func(g uint32)) {
	nd := t.node(n)
	if !nd.wide() {
		if nd.mask != 0 {
			f(uint32(t.group(n)))
		}
		return
	}
	l := t.list(nd)
	for k := range uint32(l.len) {
		f(uint32(t.wide.groups[l.off+k]))
	}
}
