package kvindex

import "unsafe"

// edgeTable maps a tree edge (parent node, local hash) to the child node:
// open addressing with linear probing over 16-byte slots that hold the edge
// itself, so a lookup compares exact keys (no collision handling beyond
// probing) and finding or adding a child is one probe sequence, usually
// within one cache line. Removal shifts the rest of the probe run back
// instead of leaving a tombstone, so a table that churns (the active tree
// adds and drops a prompt per request) never needs rehashing to stay short.
type edgeTable struct {
	slots []edgeSlot // length a power of two, or nil
	used  int        // live edges
}

type edgeSlot struct {
	local  uint64
	parent uint32
	node   uint32 // 0: empty (the root is nobody's child)
}

func hashEdge(parent uint32, local uint64) uint64 {
	// A strong finaliser: hosts may send small, regular local hashes.
	x := local ^ (uint64(parent)+1)*0x9e3779b97f4a7c15
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

// find returns the child of parent for local. It probes itself rather
// than through locate: every step of a walk down the tree calls it, and
// locate, a loop, is not inlined.
func (t *edgeTable) find(parent uint32, local uint64) (uint32, bool) {
	if t.slots == nil {
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	for i := hashEdge(parent, local) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.node == 0 {
			return 0, false
		}
		if s.local == local && s.parent == parent {
			return s.node, true
		}
	}
}

// findOrAdd returns the child of parent for local, or stores next() as that
// child and returns it (added true).
func (t *edgeTable) findOrAdd(parent uint32, local uint64, next func() uint32) (node uint32, added bool) {
	if (t.used+1)*4 > len(t.slots)*3 {
		t.grow(t.used + 1)
	}
	mask := uint64(len(t.slots) - 1)
	for i := hashEdge(parent, local) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.node == 0 {
			*s = edgeSlot{local: local, parent: parent, node: next()}
			t.used++
			return s.node, true
		}
		if s.local == local && s.parent == parent {
			return s.node, false
		}
	}
}

// home reads the first slot a probe for the edge visits, so that a caller
// about to probe for many edges can have their cache misses overlap instead
// of taking them one after another. (A rehash between the two only wastes
// the reads that came before it.)
func (t *edgeTable) home(parent uint32, local uint64) uint64 {
	if t.slots == nil {
		return 0
	}
	return t.slots[hashEdge(parent, local)&uint64(len(t.slots)-1)].local
}

// set points the edge of parent for local, which must exist, at node.
func (t *edgeTable) set(parent uint32, local uint64, node uint32) {
	i, _ := t.locate(parent, local)
	t.slots[i].node = node
}

// take removes the edge of parent for local and returns its node, if there
// is one.
func (t *edgeTable) take(parent uint32, local uint64) (uint32, bool) {
	i, ok := t.locate(parent, local)
	if !ok {
		return 0, false
	}
	node := t.slots[i].node
	t.removeAt(i)
	return node, true
}

// takeIf removes the edge of parent for local if it leads to node, in one
// probe sequence, and reports whether it did.
func (t *edgeTable) takeIf(parent uint32, local uint64, node uint32) bool {
	i, ok := t.locate(parent, local)
	if !ok || t.slots[i].node != node {
		return false
	}
	t.removeAt(i)
	return true
}

// locate returns the slot of the edge of parent for local, if there is one.
func (t *edgeTable) locate(parent uint32, local uint64) (uint64, bool) {
	if t.slots == nil {
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	for i := hashEdge(parent, local) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.node == 0 {
			return 0, false
		}
		if s.local == local && s.parent == parent {
			return i, true
		}
	}
}

// removeAt empties slot hole. Every later slot of the probe run whose home
// is not between the hole and itself moves back into the hole, so that no
// lookup meets an empty slot before its key.
func (t *edgeTable) removeAt(hole uint64) {
	mask := uint64(len(t.slots) - 1)
	for j := (hole + 1) & mask; t.slots[j].node != 0; j = (j + 1) & mask {
		home := hashEdge(t.slots[j].parent, t.slots[j].local) & mask
		// Distances along the probe order: j may fill the hole unless its
		// home lies after the hole.
		if (j-home)&mask >= (j-hole)&mask {
			t.slots[hole] = t.slots[j]
			hole = j
		}
	}
	t.slots[hole] = edgeSlot{}
	t.used--
}

// grow moves the edges into a table with room for n edges and as many
// again at the 3/4 load limit. Sizes being powers of two, a full table
// quadruples: doubling instead saved 1 in 20 bytes of the index and cost
// 5% end to end (more rehashes, longer probes).
func (t *edgeTable) grow(n int) {
	size := 16
	for size*3 < n*4*2 {
		size *= 2
	}
	old := t.slots
	t.slots = make([]edgeSlot, size)
	_ = prefault(unsafe.Pointer(&t.slots[0]), uintptr(size)*unsafe.Sizeof(edgeSlot{}))
	mask := uint64(size - 1)
	for _, s := range old {
		if s.node == 0 {
			continue
		}
		i := hashEdge(s.parent, s.local) & mask
		for t.slots[i].node != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// remap points every edge at f of its node.
func (t *edgeTable) remap(f func(node uint32) uint32) {
	for i := range t.slots {
		if t.slots[i].node != 0 {
			t.slots[i].node = f(t.slots[i].node)
		}
	}
}
