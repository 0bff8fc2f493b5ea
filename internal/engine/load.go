package engine

import "github.com/offline-router/offline-router/internal/kvindex"

// Load booking: what each rank is busy with, from the router's own
// placements. The prompts of the placed requests form a radix tree keyed by
// local block hashes, like the cache index; a node is active on the ranks
// whose requests include that prefix, with a reference count per rank, so
// requests sharing a prefix on one rank count it once. Because a prefix
// active on a rank has all its own prefixes active there too, counting a new
// prompt's active blocks on every rank is one walk down the tree that stops
// where the prompt leaves it, and booking extends that walk.

// rankRef is one rank's reference count on an active block.
type rankRef struct {
	slot uint32
	refs uint32
}

// holders are the ranks holding one active block. The first is kept inline:
// a block is usually active on one rank.
type holders struct {
	first rankRef // refs 0: none
	more  []rankRef
}

type activeTree = kvindex.Tree[holders]

// countActive walks the prompt down the active tree, adding to hits[slot]
// the blocks active on every rank, and keeps the nodes it passed in e.path
// for book. hits must cover every slot.
func (e *Engine) countActive(local []uint64) {
	clear(e.hits)
	e.path = e.path[:0]
	w := e.active.Walk()
	for _, h := range local {
		if !w.Down(h) {
			return
		}
		hs := w.Payload()
		e.hits[hs.first.slot]++
		for _, ref := range hs.more {
			e.hits[ref.slot]++
		}
		e.path = append(e.path, w.Node())
	}
}

// bookBlocks makes the request's prompt active on rank rk, extending the
// walk countActive just made for it, and remembers the path for release.
func (e *Engine) bookBlocks(req *request, rk *rank) {
	local := req.d.local
	req.path = make([]uint32, len(local))
	cur := kvindex.Root
	for i, h := range local {
		n := cur
		if i < len(e.path) {
			n = e.path[i]
		} else {
			n = e.active.Child(cur, h)
		}
		if e.active.At(n).add(rk.slot) {
			rk.distinctBlocks++
		}
		req.path[i] = n
		cur = n
	}
}

// releaseBlocks undoes bookBlocks, deepest block first so that nodes left
// unused are pruned from the leaves up.
func (e *Engine) releaseBlocks(req *request, rk *rank) {
	for i := len(req.path) - 1; i >= 0; i-- {
		n := req.path[i]
		if e.active.At(n).remove(rk.slot) {
			rk.distinctBlocks--
		}
		e.active.Prune(n, func(_ uint32, hs *holders) bool { return hs.first.refs == 0 })
	}
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
