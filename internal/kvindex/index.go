package kvindex

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/offline-router/offline-router/internal/protocol"
)

// RankID names one (worker, dp_rank) cache inside the index. The engine hands
// out dense IDs so that per-rank results fit in a plain slice.
type RankID uint32

// Block is one stored block of a KV "stored" event: its sequence hash
// addresses it in events, its local hash keys the tree under the parent.
type Block = protocol.StoredBlock

// Index is the cache index of every rank: a radix tree of cached prefixes
// (tree.go), its edges runs of blocks found from their parent by their
// first block's local hash, with the ranks that hold them (holders.go), and
// for each rank a table from its block hashes to the blocks' slots.
//
// Not safe for concurrent use.
type Index struct {
	tree *tree
	// extra counts a rank's additional block hashes on one block (a rank
	// that stored one prefix under two block hashes), so that removing one
	// keeps the rank on the block.
	extra map[rankSlot]int
	// alias lists a rank's block hashes for a block other than the one the
	// block was first stored under (hosts hashing with other seeds), so
	// that a removal that takes the rank off the block's descendants finds
	// them.
	alias map[rankSlot]map[protocol.SequenceHash]struct{}
	// tabledHeld counts, for a rank and an edge, the edge's children in the
	// edge table that the rank holds, so that a removal passes over the
	// children of a shared edge the rank holds none of (others may have
	// given it thousands). Only branching edges have such children.
	tabledHeld map[rankNode]uint32
	below      []uint32 // scratch: the edges a removal still has to visit
	ranks      []rankCache
	live       []uint64    // by group: the mask of its live ranks
	alive      []groupPair // scratch: the ranks a match is still following
	matched    []RankID    // the ranks the last FindMatches gave an overlap
	warm       uint64      // where Store and Remove leave the slots they warm, so the loads stay
	lazy       bool        // ranks keep no tables until one is needed (Lazy)
}

type rankCache struct {
	live bool
	// table: the rank keeps blocks, a table from its block hashes (as the
	// local hash, under parent 0) to the blocks' slots. A rank of a lazy
	// index keeps none until it needs one, and counts its blocks in held.
	table  bool
	blocks edgeTable
	held   int
	// phantom lists the blocks (slots) the rank still holds though none of
	// its block hashes addresses them: a hash moved to another prefix. As
	// in Dynamo, whose old node keeps the worker, what the rank holds below
	// stays reachable, and a removal above finds it.
	phantom map[uint32]struct{}
	lastID  uint64
	seenAny bool
}

// rankNode is a rank and an edge; rankSlot a rank and a block.
type rankNode struct {
	rank RankID
	node uint32
}

type rankSlot struct {
	rank RankID
	slot uint32
}

// New returns an empty index.
func New() *Index {
	return &Index{tree: newTree(), extra: map[rankSlot]int{}, alias: map[rankSlot]map[protocol.SequenceHash]struct{}{},
		tabledHeld: map[rankNode]uint32{}}
}

// AddRank starts an empty cache for id, dropping anything an earlier user of
// the same id left behind.
func (x *Index) AddRank(id RankID) {
	if id/maskRanks >= maxGroups {
		panic("kvindex: rank id past the groups a node can name") // protocol.MaxRanks is far below
	}
	for int(id) >= len(x.ranks) {
		x.ranks = append(x.ranks, rankCache{})
	}
	x.DropRank(id)
	x.ranks[id] = rankCache{live: true, table: !x.lazy}
	g, bit := split(id)
	for int(g) >= len(x.live) {
		x.live = append(x.live, 0)
	}
	x.live[g] |= bit
}

// DropRank removes every entry of id and forgets it; it returns how many
// blocks were dropped.
func (x *Index) DropRank(id RankID) int {
	if !x.hasRank(id) {
		return 0
	}
	n := x.Clear(id)
	x.ranks[id] = rankCache{}
	g, bit := split(id)
	x.live[g] &^= bit
	return n
}

// hasRank reports whether id has a live cache.
func (x *Index) hasRank(id RankID) bool {
	return int(id) < len(x.ranks) && x.ranks[id].live
}

// RecordEventID notes eventID as the last event applied to id.
func (x *Index) RecordEventID(id RankID, eventID uint64) {
	x.ranks[id].seenAny, x.ranks[id].lastID = true, eventID
}

// LastEventID returns the last applied event id of id, and whether there is one.
func (x *Index) LastEventID(id RankID) (uint64, bool) {
	r := &x.ranks[id]
	return r.lastID, r.seenAny
}

// Why a store is refused; a refused store changes nothing.
var (
	ErrUnknownParent = errors.New("the rank does not cache the parent")
	// ErrSelfReference: a block whose hash is its parent's would be stored
	// under itself (Dynamo refuses it as an invalid block sequence).
	ErrSelfReference = errors.New("a block's hash is its parent's")
)

// Store adds blocks as a chain under parent (nil = root) for id, which
// must have been added (and not dropped since): a match counts on only
// live ranks holding blocks.
//
// The chain is taken an edge at a time: along an edge the rank holds, its
// blocks are compared in a row; an edge it comes to hold is held once,
// cut first where the chain leaves it; the blocks past the last existing
// one become one new edge. Only the rank's table is kept a block at a time.
func (x *Index) Store(id RankID, parent *protocol.SequenceHash, blocks []Block) error {
	return x.StoreUnder(id, nil, parent, blocks)
}

// StoreUnder is Store told path, the local hashes of parent's prefix (as
// many as its depth): a rank of a lazy index finds parent by them, in a
// walk, not by its hash, which may name a block inside an edge.
func (x *Index) StoreUnder(id RankID, path []protocol.LocalBlockHash, parent *protocol.SequenceHash, blocks []Block) error {
	r := &x.ranks[id]
	if !r.live {
		panic(fmt.Sprintf("kvindex: a store for rank %d, which is not added", id))
	}
	x.compactIfSparse()
	t := x.tree
	e, off := root, uint32(0) // the edge of the block the next one hangs from, and its offset there
	if parent != nil {
		ps, ok := uint32(0), false
		if !r.table && len(path) > 0 {
			ps, ok = x.walkTo(id, path, uint64(*parent))
		}
		if !ok {
			ps, ok = x.find(id, *parent)
		}
		if !ok {
			return ErrUnknownParent
		}
		for _, b := range blocks {
			if b.BlockHash == *parent {
				return ErrSelfReference
			}
		}
		var start uint32
		e, start = t.slab.edgeOf(ps)
		off = ps - start
	}
	if r.table {
		warm := uint64(0)
		for _, b := range blocks {
			warm ^= r.blocks.home(0, uint64(b.BlockHash))
		}
		x.warm = warm
	}
	for k := 0; k < len(blocks); {
		// The next blocks' edge c from offset at, and whether the rank
		// held them before.
		var c, at uint32
		held := true
		nd := t.node(e)
		switch local := uint64(blocks[k].TokensHash); {
		case off+1 < nd.n && t.local(nd.start+off+1) == local:
			c, at = e, off+1
		case off+1 < nd.n: // the chain leaves e inside it
			e, _ = t.split(e, off+1)
			c, held = t.addEdge(e, blocks[k:]), false
		default:
			var ok bool
			if c, ok = t.child(e, local); !ok {
				c, held = t.addEdge(e, blocks[k:]), false
			} else {
				held = t.holds(c, id)
			}
		}
		cn := t.node(c)
		m := uint32(1)
		for m < cn.n-at && k+int(m) < len(blocks) && t.local(cn.start+at+m) == uint64(blocks[k+int(m)].TokensHash) {
			m++
		}
		base := cn.start + at
		if !r.table && !t.hashed(base, blocks[k:k+int(m)]) {
			x.materialize(id) // a block stored under another hash: an alias
		}
		if !held {
			// Entered at c's first block (the rank holds the block before,
			// so it holds all of any edge that block is inside).
			if m < cn.n {
				c, _ = t.split(c, m)
			}
			x.hold(c, id)
		}
		for j := range m {
			if !r.table {
				break // the rank held these already, or holds them now
			}
			b, s := blocks[k+int(j)], base+j
			old, added := r.blocks.findOrAdd(0, uint64(b.BlockHash), func() uint32 { return s })
			switch {
			case added:
				x.attach(s, id, b.BlockHash, held)
			case old != s:
				// The hash moves to another prefix; the rank keeps the old
				// one (vacate prunes nothing).
				x.attach(s, id, b.BlockHash, held)
				r.blocks.set(0, uint64(b.BlockHash), s)
				x.unalias(old, id, b.BlockHash)
				x.vacate(old, id)
			}
		}
		e, off, k = c, at+m-1, k+int(m)
	}
	return nil
}

// attach notes hash h of id for block s: an alias if it is not s's own,
// and, if id held s before (by another hash, or as a phantom), one more
// hash there. A block id did not hold it has come to hold with its edge.
func (x *Index) attach(s uint32, id RankID, h protocol.SequenceHash, held bool) {
	if uint64(h) != x.tree.slab.at(s).hash {
		k := rankSlot{id, s}
		if x.alias[k] == nil {
			x.alias[k] = map[protocol.SequenceHash]struct{}{}
		}
		x.alias[k][h] = struct{}{}
	}
	if r := &x.ranks[id]; len(r.phantom) > 0 {
		if _, ok := r.phantom[s]; ok { // the rank holds s already, now by a hash
			delete(r.phantom, s)
			return
		}
	}
	if held {
		x.extra[rankSlot{id, s}]++
	}
}

// vacate takes one of id's hashes off block s, which it moved elsewhere. A
// move is no removal: if it was the rank's last hash there, the rank keeps
// s as a phantom, so that every block it holds keeps its whole prefix held.
func (x *Index) vacate(s uint32, id RankID) {
	if x.hasExtra(id, s) {
		x.dropExtra(id, s)
		return
	}
	r := &x.ranks[id]
	if r.phantom == nil {
		r.phantom = map[uint32]struct{}{}
	}
	r.phantom[s] = struct{}{}
}

func (x *Index) hasExtra(id RankID, s uint32) bool {
	return len(x.extra) > 0 && x.extra[rankSlot{id, s}] > 0
}

func (x *Index) dropExtra(id RankID, s uint32) {
	k := rankSlot{id, s}
	if x.extra[k]--; x.extra[k] == 0 {
		delete(x.extra, k)
	}
}

// Remove drops the blocks of id addressed by hashes; unknown hashes are
// ignored (their store may have been skipped). A block the rank then no
// longer holds takes with it every block the rank holds below it, as in
// Dynamo's tree: a removed block's descendants are unreachable, and must not
// come back when it is stored again. It returns how many blocks it dropped.
//
// Hashes that name, one after another, each the block before the last
// (a chain freed tail first, as engines free a request's blocks) leave
// their edge together: one cut, not one a block.
func (x *Index) Remove(id RankID, hashes []protocol.SequenceHash) int {
	r := &x.ranks[id]
	if r.table {
		warm := uint64(0)
		for _, h := range hashes { // as in Store: let the misses overlap
			warm ^= r.blocks.home(0, uint64(h))
		}
		x.warm = warm
	}
	n := 0
	for i := 0; i < len(hashes); i++ {
		s, ok := x.take(id, hashes[i])
		if !ok {
			continue
		}
		n++
		if x.hasExtra(id, s) { // not its last hash there: it keeps s
			x.dropExtra(id, s)
			continue
		}
		e, start := x.tree.slab.edgeOf(s)
		lo := s
		for i+1 < len(hashes) && lo > start && x.takeBefore(id, hashes[i+1], lo-1) {
			i, lo = i+1, lo-1
			n++
		}
		n += x.leave(e, lo-start, s-start, id)
	}
	return n
}

// leave takes id off edge e's blocks from offset lo on, and off every
// block it holds below them, whose hashes it takes (those from lo to top
// the caller took), and returns how many hashes it took.
func (x *Index) leave(e, lo, top uint32, id RankID) int {
	nd := x.tree.node(e)
	n := x.takeHeld(nd.start+top+1, nd.start+nd.n, id)
	n += x.dropBelow(e, id)
	if lo > 0 {
		_, e = x.tree.split(e, lo)
	}
	x.release(e, id)
	return n
}

// dropBelow takes id off every edge below e that it holds, reached through
// edges it holds, with their blocks' hashes, and returns how many hashes.
func (x *Index) dropBelow(e uint32, id RankID) int {
	n := 0
	x.heldBelow(e, id, func(c uint32) {
		nd := x.tree.node(c)
		n += x.takeHeld(nd.start, nd.start+nd.n, id)
		x.release(c, id) // prunes c once nothing holds it and it has no children
	})
	return n
}

// heldBelow calls f with every edge below e that id holds, reached through
// edges it holds, each once its children are listed, so that f may take id
// off it (and prune it).
func (x *Index) heldBelow(e uint32, id RankID, f func(c uint32)) {
	x.below = x.heldKids(e, id, x.below[:0])
	for len(x.below) > 0 {
		c := x.below[len(x.below)-1]
		x.below = x.below[:len(x.below)-1]
		if !x.tree.holds(c, id) {
			continue
		}
		x.below = x.heldKids(c, id, x.below)
		f(c)
	}
}

// takeHeld takes from id's table the hashes it has for blocks from to end
// (slots), which it is leaving, with what else it keeps about them, and
// returns how many. A rank without a table has one hash a block.
func (x *Index) takeHeld(from, end uint32, id RankID) int {
	r := &x.ranks[id]
	if !r.table {
		return int(end - from)
	}
	n := 0
	for s := from; s < end; s++ {
		if r.blocks.takeIf(0, x.tree.slab.at(s).hash, s) {
			n++
		}
		if len(x.alias) > 0 || len(x.extra) > 0 || len(r.phantom) > 0 { // the rare cases: one lookup each
			k := rankSlot{id, s}
			for h := range x.alias[k] {
				r.blocks.take(0, uint64(h))
				n++
			}
			delete(x.alias, k)
			delete(x.extra, k)
			delete(r.phantom, s)
		}
	}
	return n
}

// heldKids appends the children of e that id may hold to out: the tabled
// ones (those its group holds) only if it holds any. Only an edge with
// children in the edge table can have such children, so the count is
// looked up for branching edges only.
func (x *Index) heldKids(e uint32, id RankID, out []uint32) []uint32 {
	g, _ := split(id)
	tabled := x.tree.node(e).up&inTable != 0 && x.tabledHeld[rankNode{id, e}] > 0
	return x.tree.kids(e, g, tabled, out)
}

// hold makes id a holder of edge e, which it did not hold; release takes
// it off e, which it held, and prunes what is left with neither ranks nor
// children. Both keep tabledHeld.
func (x *Index) hold(e uint32, id RankID) {
	x.tree.hold(e, id)
	if r := &x.ranks[id]; !r.table {
		r.held += int(x.tree.node(e).n)
	}
	if p, tabled := x.tree.tabledChild(e); tabled {
		x.tabledHeld[rankNode{id, p}]++
	}
}

func (x *Index) release(e uint32, id RankID) {
	x.tree.release(e, id)
	if r := &x.ranks[id]; !r.table {
		r.held -= int(x.tree.node(e).n)
	}
	if p, tabled := x.tree.tabledChild(e); tabled {
		k := rankNode{id, p}
		if x.tabledHeld[k]--; x.tabledHeld[k] == 0 {
			delete(x.tabledHeld, k)
		}
	}
	x.prune(e)
}

// unalias forgets h as a hash of id for block s, when it is not s's own.
func (x *Index) unalias(s uint32, id RankID, h protocol.SequenceHash) {
	if uint64(h) == x.tree.slab.at(s).hash {
		return
	}
	k := rankSlot{id, s}
	if hs := x.alias[k]; hs != nil {
		if delete(hs, h); len(hs) == 0 {
			delete(x.alias, k)
		}
	}
}

// Clear drops every block of id and returns how many there were. Every
// block the rank holds has its prefix held, so a walk from the root
// through what it holds finds them all.
func (x *Index) Clear(id RankID) int {
	r := &x.ranks[id]
	n := x.Blocks(id)
	x.dropBelow(root, id)
	r.blocks, r.phantom, r.table, r.held = edgeTable{}, nil, !x.lazy, 0
	return n
}

// Tables returns how many live ranks keep a table of their block hashes.
func (x *Index) Tables() int {
	n := 0
	for i := range x.ranks {
		if x.ranks[i].live && x.ranks[i].table {
			n++
		}
	}
	return n
}

// Blocks returns how many blocks id caches.
func (x *Index) Blocks(id RankID) int {
	if r := &x.ranks[id]; !r.table {
		return r.held
	}
	return x.ranks[id].blocks.used
}

// Nodes returns how many prefixes the index holds: blocks of its tree.
func (x *Index) Nodes() int { return x.tree.blocks }

// FindMatches writes into overlap[r] the number of leading blocks of local
// that rank r caches as one contiguous prefix, for every rank r below
// len(overlap). Matched then lists the ranks it gave an overlap.
//
// It walks the prompt down the tree once for all ranks, an edge at a time,
// keeping the ranks still matching as a mask per group, and stops as soon
// as none is.
func (x *Index) FindMatches(local []protocol.LocalBlockHash, overlap []uint32) {
	clear(overlap)
	x.matched = x.matched[:0]
	x.alive = x.alive[:0]
	alive := 0
	for g, m := range x.live {
		if m != 0 {
			x.alive = append(x.alive, groupPair{uint32(g), m})
			alive += bits.OnesCount64(m)
		}
	}
	t := x.tree
	depth, e := 0, root
	for depth < len(local) && alive > 0 {
		c, ok := t.child(e, uint64(local[depth]))
		if !ok {
			break
		}
		// Between commands a rank that holds an edge holds its parent, and
		// only live ranks hold edges (Store takes live ranks only), so the
		// ranks still matching are the edge's holders, and a child's are
		// among its parent's: as many means the same ones, and only where
		// there are fewer need the masks be read. A rank's overlap is the
		// depth at which it drops out, written once per rank (and not at
		// all for those that match nothing: overlap starts cleared).
		nd := t.node(c)
		if n := t.count(nd); n != alive {
			x.alive, x.matched = t.narrow(c, x.alive, uint32(depth), overlap, x.matched)
			alive = n
		}
		j := t.follow(nd, local[depth:])
		depth += j
		if j < int(nd.n) {
			break
		}
		e = c
	}
	if depth > 0 {
		for _, a := range x.alive {
			x.matched = setDepth(a.group, a.mask, uint32(depth), overlap, x.matched)
		}
	}
}

// Matched returns the ranks the last FindMatches gave an overlap, each
// once, in no particular order: a caller that wants only those need not
// read every rank's. The slice is the index's, valid until the next
// FindMatches.
func (x *Index) Matched() []RankID { return x.matched }

// prune frees edge n if it has no children and no rank holds it, then its
// ancestors likewise, walking up toward the root.
func (x *Index) prune(n uint32) {
	for n != root {
		if !x.tree.node(n).leaf() || x.tree.held(n) {
			return
		}
		n = x.tree.unlink(n)
	}
}

// PathHashes appends to out the block hash of each block down the prompt's
// path, at most depth of them: out[d-1] is the hash a rank matching d
// blocks last matched (the block's first hash: a rank that stored it under
// another seed is not told apart). A lower tier's match continues from it.
func (x *Index) PathHashes(local []protocol.LocalBlockHash, depth int, out []protocol.SequenceHash) []protocol.SequenceHash {
	t := x.tree
	local = local[:min(depth, len(local))]
	for e, d := root, 0; d < len(local); {
		c, ok := t.child(e, uint64(local[d]))
		if !ok {
			break
		}
		nd := t.node(c)
		j := t.follow(nd, local[d:])
		for s := nd.start; s < nd.start+uint32(j); s++ {
			out = append(out, protocol.SequenceHash(t.slab.at(s).hash))
		}
		if d += j; j < int(nd.n) {
			break
		}
		e = c
	}
	return out
}

// compactIfSparse compacts the slab once its pruned slots are twice its
// live ones (and many), mapping every slot the ranks know anew. At once
// as many, compactions were 7% of a 16-token replay's CPU; half as often,
// the slab holds at most three slots a live block (16 bytes each).
func (x *Index) compactIfSparse() {
	t := x.tree
	if t.slab.dead < compactMin || t.slab.dead <= 2*t.blocks {
		return
	}
	moved := t.slab.compact(func(e uint32) (*uint32, uint32) {
		nd := t.node(e)
		return &nd.start, nd.n
	})
	for i := range x.ranks {
		r := &x.ranks[i]
		r.blocks.remap(moved)
		if len(r.phantom) > 0 {
			p := make(map[uint32]struct{}, len(r.phantom))
			for s := range r.phantom {
				p[moved(s)] = struct{}{}
			}
			r.phantom = p
		}
	}
	if len(x.alias) > 0 {
		a := make(map[rankSlot]map[protocol.SequenceHash]struct{}, len(x.alias))
		for k, v := range x.alias {
			a[rankSlot{k.rank, moved(k.slot)}] = v
		}
		x.alias = a
	}
	if len(x.extra) > 0 {
		m := make(map[rankSlot]int, len(x.extra))
		for k, v := range x.extra {
			m[rankSlot{k.rank, moved(k.slot)}] = v
		}
		x.extra = m
	}
}
