package engine

import "github.com/offline-router/offline-router/internal/protocol"

// Load booking: what each rank is busy with, from the router's own
// placements. The prompts of the placed requests form a radix tree keyed by
// local block hashes, like the cache index; a block is active on the ranks
// whose requests include its prefix, with a reference count per rank, so
// requests sharing a prefix on one rank count it once. Because a prefix
// active on a rank has all its own prefixes active there too, counting a new
// prompt's active blocks on every rank is one walk down the tree that stops
// where the prompt leaves it, and booking extends that walk.
//
// The tree is path-compressed: a segment is a run of blocks that every
// request through it holds whole, so a prompt is a few segments (a shared
// prefix, its own tail) and booking or releasing it touches those, not
// every block. Segments split where a new prompt leaves one or ends inside
// it, and go when no request holds them.

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

// activeTree holds segments by id; 0 is the root, the empty prefix.
type activeTree struct {
	segs     []segment
	free     []uint32
	children map[segmentEdge]uint32
}

// walkEnd is where countActive's walk stopped: blocks of the prompt found,
// and the segment holding the last of them with how many of its blocks
// the prompt matched (fewer than it has when the prompt left it midway).
type walkEnd struct {
	blocks  int
	seg     uint32
	matched int
}

func newActiveTree() *activeTree {
	return &activeTree{segs: make([]segment, 1), children: map[segmentEdge]uint32{}}
}

// Len returns how many segments the tree holds, the root excluded.
func (t *activeTree) Len() int { return len(t.segs) - 1 - len(t.free) }

// countActive walks the prompt down the active tree, adding to hits[slot]
// the blocks active on every rank, and keeps where it stopped in e.walk for
// book. hits must cover every slot.
func (e *Engine) countActive(local []protocol.LocalBlockHash) {
	clear(e.hits)
	t := e.active
	e.walk = walkEnd{}
	for e.walk.blocks < len(local) {
		c, ok := t.children[segmentEdge{e.walk.seg, local[e.walk.blocks]}]
		if !ok {
			return
		}
		s := &t.segs[c]
		rest := local[e.walk.blocks:]
		m := 1 // the edge matched the first block
		for m < len(s.local) && m < len(rest) && s.local[m] == rest[m] {
			m++
		}
		e.hits[s.holders.first.slot] += uint32(m)
		for _, ref := range s.holders.more {
			e.hits[ref.slot] += uint32(m)
		}
		e.walk = walkEnd{blocks: e.walk.blocks + m, seg: c, matched: m}
		if m < len(s.local) {
			return
		}
	}
}

// bookBlocks makes the request's prompt active on rank rk, extending the
// walk countActive just made for it, and remembers where it ends.
func (e *Engine) bookBlocks(req *request, rk *rank) {
	local := req.d.local
	t := e.active
	end := e.walk.seg
	if e.walk.matched < len(t.segs[end].local) {
		end = t.split(end, e.walk.matched)
	}
	if e.walk.blocks < len(local) {
		end = t.add(end, local[e.walk.blocks:])
	}
	req.end = end
	for s := end; s != 0; s = t.segs[s].parent {
		if t.segs[s].holders.add(rk.slot) {
			rk.distinctBlocks += uint64(len(t.segs[s].local))
		}
	}
}

// releaseBlocks undoes bookBlocks from the request's last segment up,
// dropping segments left unused.
func (e *Engine) releaseBlocks(req *request, rk *rank) {
	t := e.active
	for s := req.end; s != 0; {
		seg := &t.segs[s]
		parent := seg.parent
		if seg.holders.remove(rk.slot) {
			rk.distinctBlocks -= uint64(len(seg.local))
		}
		if seg.holders.first.refs == 0 && seg.nchildren == 0 {
			t.drop(s)
		}
		s = parent
	}
}

// split cuts segment s after its first n blocks and returns the new segment
// holding those; s keeps the rest, its id and its children, so requests
// ending at s still do. Both halves keep s's holders.
func (t *activeTree) split(s uint32, n int) uint32 {
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
func (t *activeTree) add(parent uint32, local []protocol.LocalBlockHash) uint32 {
	s := t.alloc(segment{parent: parent, local: local})
	t.children[segmentEdge{parent, local[0]}] = s
	t.segs[parent].nchildren++
	return s
}

// drop removes segment s, which has no holders and no children.
func (t *activeTree) drop(s uint32) {
	seg := t.segs[s]
	delete(t.children, segmentEdge{seg.parent, seg.local[0]})
	t.segs[seg.parent].nchildren--
	t.segs[s] = segment{}
	t.free = append(t.free, s)
}

func (t *activeTree) alloc(seg segment) uint32 {
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
