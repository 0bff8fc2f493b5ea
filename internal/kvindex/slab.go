package kvindex

import (
	"math/bits"
	"slices"
	"unsafe"
)

// slab holds the blocks of the tree's edges: an edge's blocks are
// consecutive slots, so a walk along an edge reads them in a row, and a
// block's slot does not change when its edge is split (a rank's table maps
// a block hash to its slot). A bit marks each slot an edge starts at, so
// that a slot's edge is the one at the nearest marked slot at or before it.
//
// Slots of pruned blocks are not reused one by one (an edge needs its
// blocks side by side): once they are twice the live ones, compact slides
// every edge's blocks down over them and the index maps its slots anew, a
// pass over what is live paid for by twice as many blocks freed.
type slab struct {
	pages  []*slabPage
	starts []uint64          // a bit per slot: an edge starts there
	edgeAt map[uint32]uint32 // the slot an edge starts at -> the edge
	next   uint32            // slots handed out; slot 0 is never one (a table's 0 is empty)
	dead   int               // slots handed out whose blocks were pruned
}

type slabPage [slabPageSize]slabBlock

type slabBlock struct {
	local, hash uint64 // the block's local hash, and the block hash it was first stored under
}

const (
	slabPageBits = 12
	slabPageSize = 1 << slabPageBits
)

// compactMin is how many pruned slots there must be before a compaction:
// fewer are not worth a pass (a variable so that tests compact often).
var compactMin = 1 << 16

func newSlab() slab {
	s := slab{edgeAt: map[uint32]uint32{}}
	s.alloc(1) // slot 0: none
	return s
}

func (s *slab) at(slot uint32) *slabBlock {
	return &s.pages[slot>>slabPageBits][slot&(slabPageSize-1)]
}

// alloc hands out n consecutive slots and returns the first.
func (s *slab) alloc(n int) uint32 {
	first := s.next
	end := uint64(first) + uint64(n)
	if end >= 1<<32 {
		panic("kvindex: 2^32 block slots (64 GiB of them)")
	}
	for uint64(len(s.pages))<<slabPageBits < end {
		page := new(slabPage)
		_ = prefault(unsafe.Pointer(page), unsafe.Sizeof(*page))
		s.pages = append(s.pages, page)
	}
	for uint64(len(s.starts))*64 < end {
		s.starts = append(s.starts, 0)
	}
	s.next = uint32(end)
	return first
}

// mark records that edge e starts at slot; unmark that none does.
func (s *slab) mark(slot, e uint32) {
	s.starts[slot/64] |= 1 << (slot % 64)
	s.edgeAt[slot] = e
}

func (s *slab) unmark(slot uint32) {
	s.starts[slot/64] &^= 1 << (slot % 64)
	delete(s.edgeAt, slot)
}

// edgeOf returns the edge slot belongs to and the slot it starts at. It
// scans the start bits back a word at a time: at most an edge's length
// over 64 words, and an edge holds at most maxEdge blocks.
func (s *slab) edgeOf(slot uint32) (edge, start uint32) {
	w := slot / 64
	m := s.starts[w] & (^uint64(0) >> (63 - slot%64))
	for m == 0 {
		w--
		m = s.starts[w]
	}
	start = w*64 + uint32(63-bits.LeadingZeros64(m))
	return s.edgeAt[start], start
}

// compact slides every edge's blocks down over the pruned slots, in slot
// order, moving each edge's start (edge gives where an edge keeps it, and
// its length), and returns where a slot handed out before has gone.
func (s *slab) compact(edge func(e uint32) (start *uint32, n uint32)) (moved func(uint32) uint32) {
	var was, now []uint32 // each edge's first slot before and after, in slot order
	for w, m := range s.starts {
		for ; m != 0; m &= m - 1 {
			was = append(was, uint32(w*64+bits.TrailingZeros64(m)))
		}
	}
	to := uint32(1)
	edgeAt := make(map[uint32]uint32, len(was))
	for _, from := range was {
		e := s.edgeAt[from]
		start, n := edge(e)
		for i := range n {
			*s.at(to + i) = *s.at(from + i)
		}
		now = append(now, to)
		edgeAt[to] = e
		*start = to
		to += n
	}
	s.edgeAt, s.next, s.dead = edgeAt, to, 0
	clear(s.starts)
	for _, st := range now {
		s.starts[st/64] |= 1 << (st % 64)
	}
	keep := (int(to) + slabPageSize - 1) / slabPageSize
	clear(s.pages[keep:]) // let the collector have the pages past the last block
	s.pages = s.pages[:keep]
	s.starts = s.starts[:(int(to)+63)/64]
	return func(slot uint32) uint32 {
		i, found := slices.BinarySearch(was, slot)
		if !found {
			i--
		}
		return now[i] + slot - was[i]
	}
}
