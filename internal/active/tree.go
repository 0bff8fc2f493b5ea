// Package active is the router's account of what each rank is busy with,
// from its own placements: the prompts of the booked requests form a radix
// tree keyed by local block hashes, like the cache index; a block is active
// on the ranks whose requests include its prefix, with a reference count
// per rank, so requests sharing a prefix on one rank count it once. Because
// a prefix active on a rank has all its own prefixes active there too,
// counting a new prompt's active blocks on every rank is one walk down the
// tree that stops where the prompt leaves it, and booking extends that walk.
//
// The tree is path-compressed: a segment is a run of blocks that every
// request through it holds whole, so a prompt is a few segments (a shared
// prefix, its own tail) and booking or releasing it touches those, not
// every block. Segments split where a new prompt leaves one or ends inside
// it, and go when no request holds them. Ranks are named by dense slots.
package active

import "github.com/offline-router/offline-router/internal/protocol"

// rankRef is one rank's reference count on an active segment.
type rankRef struct {
	slot uint32
	refs uint32
}

// holders are the ranks holding one active segment. The first is kept
// inline: a segment is usually active on one rank.
type holders struct {
	first rankRef // refs 0: none
	more  []rankRef
}

// segment is a run of blocks of the active tree.
type segment struct {
	parent    uint32
	nchildren uint32
	local     []protocol.LocalBlockHash // the blocks' local hashes: part of the prompt that made it
	holders   holders
}

// segmentEdge finds a child segment by its first block.
type segmentEdge struct {
	parent uint32
	first  protocol.LocalBlockHash
}

// Tree holds segments by id; 0 is the root, the empty prefix. Not safe for
// concurrent use.
type Tree struct {
	segs     []segment
	free     []uint32
	children map[segmentEdge]uint32
	touched  []uint32 // the slots the last Count gave hits
}

// Walk is where Count's walk stopped: blocks of the prompt found, and the
// segment holding the last of them with how many of its blocks the prompt
// matched (fewer than it has when the prompt left it midway). Book extends
// it, so nothing may change the tree between the two.
type Walk struct {
	blocks  int
	seg     uint32
	matched int
}

// New returns an empty tree.
func New() *Tree {
	return &Tree{segs: make([]segment, 1), children: map[segmentEdge]uint32{}}
}

// Len returns how many segments the tree holds, the root excluded.
func (t *Tree) Len() int { return len(t.segs) - 1 - len(t.free) }

// hit adds m blocks to slot's hits, noting the slot the first time.
func (t *Tree) hit(hits []uint32, slot uint32, m int) {
	if hits[slot] == 0 {
		t.touched = append(t.touched, slot)
	}
	hits[slot] += uint32(m)
}

// Touched returns the slots the last Count gave hits, each once, in no
// particular order; valid until the next Count.
func (t *Tree) Touched() []uint32 { return t.touched }

// Count walks the prompt down the tree, setting hits[slot] to the prompt's
// blocks active on each rank, and returns where it stopped, for Book. hits
// must cover every slot and be as the last Count left it (or zero): only
// the slots that Count touched are cleared, so that a count costs the
// ranks the prompt reaches, not the fleet.
func (t *Tree) Count(local []protocol.LocalBlockHash, hits []uint32) Walk {
	for _, s := range t.touched {
		hits[s] = 0
	}
	t.touched = t.touched[:0]
	w := Walk{}
	for w.blocks < len(local) {
		c, ok := t.children[segmentEdge{w.seg, local[w.blocks]}]
		if !ok {
			return w
		}
		s := &t.segs[c]
		rest := local[w.blocks:]
		m := 1 // the edge matched the first block
		for m < len(s.local) && m < len(rest) && s.local[m] == rest[m] {
			m++
		}
		t.hit(hits, s.holders.first.slot, m)
		for _, ref := range s.holders.more {
			t.hit(hits, ref.slot, m)
		}
		w = Walk{blocks: w.blocks + m, seg: c, matched: m}
		if m < len(s.local) {
			return w
		}
	}
	return w
}

// Book makes the prompt active on slot, extending w, the walk Count just
// made for it. It returns the segment the prompt ends at, which Release
// takes, and how many blocks became active on slot that were not.
// The tree keeps local: the caller must not change it afterwards.
func (t *Tree) Book(w Walk, local []protocol.LocalBlockHash, slot uint32) (end uint32, added uint64) {
	end = w.seg
	if w.matched < len(t.segs[end].local) {
		end = t.split(end, w.matched)
	}
	if w.blocks < len(local) {
		end = t.add(end, local[w.blocks:])
	}
	for s := end; s != 0; s = t.segs[s].parent {
		if t.segs[s].holders.add(slot) {
			added += uint64(len(t.segs[s].local))
		}
	}
	return end, added
}

// Release undoes a Book of slot that ended at end, from there up, dropping
// segments left unused, and returns how many blocks stopped being active
// on slot.
func (t *Tree) Release(end, slot uint32) (removed uint64) {
	for s := end; s != 0; {
		seg := &t.segs[s]
		parent := seg.parent
		if seg.holders.remove(slot) {
			removed += uint64(len(seg.local))
		}
		if seg.holders.first.refs == 0 && seg.nchildren == 0 {
			t.drop(s)
		}
		s = parent
	}
	return removed
}

// split cuts segment s after its first n blocks and returns the new segment
// holding those; s keeps the rest, its id and its children, so requests
// ending at s still do. Both halves keep s's holders.
func (t *Tree) split(s uint32, n int) uint32 {
	old := t.segs[s]
	top := t.alloc(segment{parent: old.parent, nchildren: 1, local: old.local[:n],
		holders: holders{first: old.holders.first, more: append([]rankRef(nil), old.holders.more...)}})
	t.children[segmentEdge{old.parent, old.local[0]}] = top
	seg := &t.segs[s]
	seg.parent, seg.local = top, old.local[n:]
	t.children[segmentEdge{top, seg.local[0]}] = s
	return top
}

// add makes a segment of blocks under parent, which has no child starting
// with the first of them.
func (t *Tree) add(parent uint32, local []protocol.LocalBlockHash) uint32 {
	s := t.alloc(segment{parent: parent, local: local})
	t.children[segmentEdge{parent, local[0]}] = s
	t.segs[parent].nchildren++
	return s
}

// drop removes segment s, which has no holders and no children.
func (t *Tree) drop(s uint32) {
	seg := t.segs[s]
	delete(t.children, segmentEdge{seg.parent, seg.local[0]})
	t.segs[seg.parent].nchildren--
	t.segs[s] = segment{}
	t.free = append(t.free, s)
}

func (t *Tree) alloc(seg segment) uint32 {
	if n := len(t.free); n > 0 {
		s := t.free[n-1]
		t.free = t.free[:n-1]
		t.segs[s] = seg
		return s
	}
	t.segs = append(t.segs, seg)
	return uint32(len(t.segs) - 1)
}

// add counts one more reference by slot and reports whether slot is new.
func (hs *holders) add(slot uint32) bool {
	switch {
	case hs.first.refs == 0:
		hs.first = rankRef{slot: slot, refs: 1}
		return true
	case hs.first.slot == slot:
		hs.first.refs++
		return false
	}
	for i := range hs.more {
		if hs.more[i].slot == slot {
			hs.more[i].refs++
			return false
		}
	}
	hs.more = append(hs.more, rankRef{slot: slot, refs: 1})
	return true
}

// remove drops one reference by slot and reports whether slot's last went.
func (hs *holders) remove(slot uint32) bool {
	if hs.first.slot == slot && hs.first.refs > 0 {
		if hs.first.refs--; hs.first.refs > 0 {
			return false
		}
		if n := len(hs.more); n > 0 {
			hs.first, hs.more = hs.more[n-1], hs.more[:n-1]
		}
		return true
	}
	for i := range hs.more {
		if hs.more[i].slot != slot {
			continue
		}
		if hs.more[i].refs--; hs.more[i].refs > 0 {
			return false
		}
		hs.more[i] = hs.more[len(hs.more)-1]
		hs.more = hs.more[:len(hs.more)-1]
		return true
	}
	return false
}
