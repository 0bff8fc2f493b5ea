package kvindex

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/offline-router/offline-router/internal/protocol"
)

func storeChain(t *testing.T, x *Index, id RankID, parent *protocol.SequenceHash, local ...protocol.LocalBlockHash) []protocol.SequenceHash {
	t.Helper()
	// The chain goes on from parent: seeded with it as the first hash,
	// SequenceHashes gives parent back first and then the blocks' hashes.
	var prev []protocol.LocalBlockHash
	if parent != nil {
		prev = []protocol.LocalBlockHash{protocol.LocalBlockHash(*parent)}
	}
	seq := SequenceHashes(append(prev, local...))[len(prev):]
	blocks := make([]Block, len(local))
	for i := range local {
		blocks[i] = Block{BlockHash: seq[i], TokensHash: local[i]}
	}
	if x.Store(id, parent, blocks) != nil {
		t.Fatalf("store on rank %d refused", id)
	}
	return seq
}

func TestFindMatchesSharedPrefix(t *testing.T) {
	x := New()
	x.AddRank(0)
	x.AddRank(1)
	x.AddRank(2)
	storeChain(t, x, 0, nil, 10, 20, 30)
	storeChain(t, x, 1, nil, 10, 20, 99)
	storeChain(t, x, 2, nil, 11)
	overlap := make([]uint32, 3)
	x.FindMatches([]protocol.LocalBlockHash{10, 20, 30, 40}, overlap)
	if diff := cmp.Diff([]uint32{3, 2, 0}, overlap); diff != "" {
		t.Fatalf("overlap (-want +got):\n%s", diff)
	}
	if got := x.Nodes(); got != 5 {
		t.Fatalf("nodes = %d, want 5 (10, 20, 30, 99, 11)", got)
	}
}

// Removing a block in the middle of a chain takes the blocks below it too
// (Dynamo's test_remove_mid_chain_block), so storing it again under its
// parent brings back only itself, not what hung below it.
func TestRemoveMiddleBlockCutsThePrefix(t *testing.T) {
	x := New()
	x.AddRank(0)
	seq := storeChain(t, x, 0, nil, 1, 2, 3)
	if n := x.Remove(0, []protocol.SequenceHash{seq[1], 12345}); n != 2 {
		t.Fatalf("removed %d, want 2 (block 2 and block 3 below it; the unknown hash is ignored)", n)
	}
	overlap := make([]uint32, 1)
	x.FindMatches([]protocol.LocalBlockHash{1, 2, 3}, overlap)
	if overlap[0] != 1 || x.Blocks(0) != 1 {
		t.Fatalf("overlap = %d and %d blocks held, want 1 and 1", overlap[0], x.Blocks(0))
	}
	storeChain(t, x, 0, &seq[0], 2)
	x.FindMatches([]protocol.LocalBlockHash{1, 2, 3}, overlap)
	if overlap[0] != 2 || x.HasBlock(0, seq[2]) {
		t.Fatalf("overlap = %d after storing block 2 again, want 2: block 3 must not come back", overlap[0])
	}
}

func TestStoreUnderUnknownParentIsRefused(t *testing.T) {
	x := New()
	x.AddRank(0)
	p := protocol.SequenceHash(77)
	if x.Store(0, &p, []Block{{BlockHash: 1, TokensHash: 1}}) == nil {
		t.Fatal("store under an unknown parent applied")
	}
	if x.Blocks(0) != 0 || x.Nodes() != 0 {
		t.Fatal("a refused store changed the index")
	}
}

func TestDropRankPrunesTheTree(t *testing.T) {
	x := New()
	x.AddRank(0)
	x.AddRank(1)
	storeChain(t, x, 0, nil, 1, 2, 3)
	storeChain(t, x, 1, nil, 1, 2)
	if n := x.DropRank(0); n != 3 {
		t.Fatalf("dropped %d, want 3", n)
	}
	if x.Nodes() != 2 {
		t.Fatalf("nodes = %d, want 2 after dropping rank 0", x.Nodes())
	}
	x.DropRank(1)
	if x.Nodes() != 0 || edges(x) != 0 {
		t.Fatalf("tree not empty: %d nodes, %d edges", x.Nodes(), edges(x))
	}
}

// TestNodesCountAPrefixOnce: ranks of different groups of 64 that cache
// the same prompt share its nodes, so index_nodes counts each prefix once
// at any rank count.
func TestNodesCountAPrefixOnce(t *testing.T) {
	x := New()
	for _, id := range []RankID{0, 70, 200} {
		x.AddRank(id)
		storeChain(t, x, id, nil, 1, 2, 3)
	}
	if x.Nodes() != 3 {
		t.Fatalf("nodes = %d, want 3: one per prefix of the prompt the three ranks cache", x.Nodes())
	}
}

// checkHolders checks what FindMatches relies on to skip reading masks:
// a rank that holds an edge holds its parent, and an edge's count is the
// number of ranks that hold it; and that no edge is longer than maxEdge.
func checkHolders(t *rapid.T, x *Index, ids []RankID) {
	for n := uint32(1); n < x.tree.size; n++ {
		nd := x.tree.node(n)
		if !x.tree.held(n) && nd.leaf() {
			continue // free
		}
		if nd.n > uint32(maxEdge) {
			t.Fatalf("edge %d holds %d blocks, more than an edge may (%d): finding a block's edge would scan them", n, nd.n, maxEdge)
		}
		held := 0
		for _, r := range ids {
			if !x.tree.holds(n, r) {
				continue
			}
			held++
			if p := nd.parent(); p != root && !x.tree.holds(p, r) {
				t.Fatalf("rank %d holds node %d but not its parent %d", r, n, p)
			}
		}
		if c := x.tree.count(nd); c != held {
			t.Fatalf("node %d: count %d, held by %d ranks", n, c, held)
		}
	}
}

func TestLastEventIDIsTheLastRecorded(t *testing.T) {
	x := New()
	x.AddRank(0)
	if _, seen := x.LastEventID(0); seen {
		t.Fatal("a fresh rank has no last event")
	}
	x.RecordEventID(0, 5)
	x.RecordEventID(0, 2) // arrival order: the last one, not the highest
	if last, seen := x.LastEventID(0); !seen || last != 2 {
		t.Fatalf("last event %d (%v), want 2", last, seen)
	}
	x.AddRank(0)
	if _, seen := x.LastEventID(0); seen {
		t.Fatal("a re-added rank starts with no event history")
	}
}

// model is the obvious implementation: every block remembers its whole
// path, and a rank's phantoms are the paths it holds with none of its
// hashes (one moved elsewhere; Dynamo's old node keeps the worker).
type model map[RankID]*rankModel

type rankModel struct {
	blocks  map[protocol.SequenceHash][]protocol.LocalBlockHash
	phantom map[string][]protocol.LocalBlockHash
}

func newRankModel() *rankModel {
	return &rankModel{blocks: map[protocol.SequenceHash][]protocol.LocalBlockHash{}, phantom: map[string][]protocol.LocalBlockHash{}}
}

// byHash reports whether one of the rank's hashes addresses path.
func (m *rankModel) byHash(path []protocol.LocalBlockHash) bool {
	for _, p := range m.blocks {
		if slices.Equal(p, path) {
			return true
		}
	}
	return false
}

func (m *rankModel) held(path []protocol.LocalBlockHash) bool {
	_, phantom := m.phantom[fmt.Sprint(path)]
	return phantom || m.byHash(path)
}

// store puts hash h at path; a hash that was elsewhere leaves its old path
// held as a phantom if no other hash of the rank addresses it.
func (m *rankModel) store(h protocol.SequenceHash, path []protocol.LocalBlockHash) {
	old, moved := m.blocks[h]
	m.blocks[h] = path
	delete(m.phantom, fmt.Sprint(path))
	if moved && !slices.Equal(old, path) && !m.byHash(old) {
		m.phantom[fmt.Sprint(old)] = old
	}
}

// prefixes counts the distinct prefixes some rank holds, by a hash or as
// a phantom: what index_nodes counts (PROTOCOL.md §6).
func (m model) prefixes() int {
	held := map[string]bool{}
	for _, rm := range m {
		for _, p := range rm.blocks {
			held[fmt.Sprint(p)] = true
		}
		for k := range rm.phantom {
			held[k] = true
		}
	}
	return len(held)
}

func (m *rankModel) overlap(local []protocol.LocalBlockHash) uint32 {
	n := uint32(0)
	for n < uint32(len(local)) && m.held(local[:n+1]) {
		n++
	}
	return n
}

// dropBelow is a removal's cascade: once the rank no longer holds path, it
// loses every block and phantom below path (Dynamo's tree: what hangs under
// a removed block is unreachable), and this returns how many blocks.
func (m *rankModel) dropBelow(path []protocol.LocalBlockHash) int {
	if m.held(path) {
		return 0 // another hash of the rank still holds it
	}
	below := func(q []protocol.LocalBlockHash) bool {
		return len(q) > len(path) && slices.Equal(q[:len(path)], path)
	}
	n := 0
	for h, q := range m.blocks {
		if below(q) {
			delete(m.blocks, h)
			n++
		}
	}
	maps.DeleteFunc(m.phantom, func(_ string, q []protocol.LocalBlockHash) bool { return below(q) })
	return n
}

// remove is a removed event of hashes, in order, and returns the blocks it
// drops.
func (m *rankModel) remove(hashes []protocol.SequenceHash) int {
	n := 0
	for _, h := range hashes {
		if path, ok := m.blocks[h]; ok {
			delete(m.blocks, h)
			n += 1 + m.dropBelow(path)
		}
	}
	return n
}

// blockHashes draws the block hashes a host sends for local: the sequence
// hashes, the same under another worker's hash seed (one prefix under two
// hashes), or, with collide, hashes from a tiny alphabet (one hash moving
// between prefixes).
func blockHashes(t *rapid.T, local []protocol.LocalBlockHash, collide bool) []protocol.SequenceHash {
	seq := SequenceHashes(local)
	kinds := 1
	if collide {
		kinds = 2
	}
	if !collide && rapid.IntRange(0, 3).Draw(t, "seeded") > 0 {
		return seq // a lazy index mostly sees one seed, so that its ranks stay lazy a while
	}
	switch rapid.IntRange(0, kinds).Draw(t, "hashes") {
	case 1:
		for i := range seq {
			seq[i] ^= 0x5eed
		}
	case 2:
		for i := range seq {
			seq[i] = hashIn[protocol.SequenceHash](1, 4).Draw(t, "hash")
		}
	}
	return seq
}

// modelledIndex is a new index (lazy, or with tables) and its model, both
// with ids added, under drawn knobs: the slab compacted at every chance
// (which moves every slot the ranks, their phantoms, aliases and extra
// hashes name) or only when large, and edges of a block or two (which cut
// every chain, maxEdge) or long. restore puts the knobs back.
func modelledIndex(t *rapid.T, ids []RankID, lazy bool) (*Index, model, func()) {
	wasCompact, wasEdge := compactMin, maxEdge
	if rapid.Bool().Draw(t, "compact eagerly") {
		compactMin = 1
	}
	maxEdge = rapid.SampledFrom([]int{1, 2, 4096}).Draw(t, "longest edge")
	x := New()
	if lazy {
		x.Lazy()
	}
	m := model{}
	for _, r := range ids {
		x.AddRank(r)
		m[r] = newRankModel()
	}
	return x, m, func() { compactMin, maxEdge = wasCompact, wasEdge }
}

// TestIndexMatchesModel drives random stores (at the root or under a block
// the rank holds or not, found by its hash or its path), removes, clears
// and drops, in an index with tables or a lazy one, with the slab
// compacted whenever it can be or only when large, and checks every
// rank's matches, block count and blocks against the model after every
// step, and that dropping every rank leaves nothing behind.
func TestIndexMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// Ranks of one group of 64 (the first, or another), or of four, so
		// that a node's own mask and its list of further groups both hold
		// ranks, and several share the list.
		ids := rapid.SampledFrom([][]RankID{{0, 1, 5}, {70, 71, 100}, {0, 1, 70, 71, 130, 200}}).Draw(t, "ranks")
		// A lazy index takes a hash to name one prefix: no tiny alphabet.
		// One prefix under two seeds, a hash it does not hold and a
		// block inside an edge named give a rank its table.
		lazy := rapid.Bool().Draw(t, "lazy")
		x, m, restore := modelledIndex(t, ids, lazy)
		defer restore()
		// Local hashes from a tiny alphabet make shared prefixes common.
		gen := rapid.SliceOfN(hashIn[protocol.LocalBlockHash](1, 3), 1, 5)
		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			r := rapid.SampledFrom(ids).Draw(t, "rank")
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1, 2, 3, 4, 5:
				var parent *protocol.SequenceHash
				var prefix []protocol.LocalBlockHash
				held := slices.Sorted(maps.Keys(m[r].blocks))
				if rapid.Bool().Draw(t, "under a parent") {
					p := hashIn[protocol.SequenceHash](1, 4).Draw(t, "unknown parent")
					if len(held) > 0 && rapid.Bool().Draw(t, "a held parent") {
						p = rapid.SampledFrom(held).Draw(t, "parent")
					}
					parent, prefix = &p, m[r].blocks[p]
				}
				// The path a store names its parent by: the parent's own,
				// or, from a careless caller, another block's.
				path := prefix
				if len(held) > 0 && rapid.Bool().Draw(t, "another block's path") {
					path = m[r].blocks[rapid.SampledFrom(held).Draw(t, "path of")]
				}
				local := gen.Draw(t, "local")
				seq := blockHashes(t, append(slices.Clone(prefix), local...), !lazy)[len(prefix):]
				blocks := make([]Block, len(local))
				for i := range local {
					blocks[i] = Block{BlockHash: seq[i], TokensHash: local[i]}
				}
				var want error
				switch {
				case parent != nil && prefix == nil:
					want = ErrUnknownParent
				case parent != nil && rapid.Bool().Draw(t, "a block names its parent"):
					blocks[rapid.IntRange(0, len(blocks)-1).Draw(t, "which")].BlockHash = *parent
					fallthrough
				case parent != nil && slices.ContainsFunc(blocks, func(b Block) bool { return b.BlockHash == *parent }):
					want = ErrSelfReference
				}
				store := x.Store
				if rapid.Bool().Draw(t, "parent by its path") {
					store = func(id RankID, parent *protocol.SequenceHash, blocks []Block) error {
						return x.StoreUnder(id, path, parent, blocks)
					}
				}
				if err := store(r, parent, blocks); err != want {
					t.Fatalf("store under parent %v (held prefix %v) returned %v, want %v", parent != nil, prefix, err, want)
				} else if err == nil {
					for i := range local {
						m[r].store(seq[i], append(slices.Clone(prefix), local[:i+1]...))
					}
				}
			case 6, 7:
				// A removed event of a run of a chain's hashes (one, or
				// several, from its middle or its tail), tail first as an
				// engine frees a request's blocks, head first, or in any
				// order.
				seq := blockHashes(t, gen.Draw(t, "local"), !lazy)
				from := rapid.IntRange(0, len(seq)-1).Draw(t, "run from")
				run := slices.Clone(seq[from:rapid.IntRange(from+1, len(seq)).Draw(t, "run to")])
				switch rapid.IntRange(0, 2).Draw(t, "order") {
				case 0:
					slices.Reverse(run)
				case 1:
					run = rapid.Permutation(run).Draw(t, "shuffled")
				}
				if rapid.Bool().Draw(t, "a second chain after it") { // the first's head is no chain with the second's tail
					more := blockHashes(t, gen.Draw(t, "local"), !lazy)
					slices.Reverse(more)
					run = append(run, more...)
				}
				if got, want := x.Remove(r, run), m[r].remove(run); got != want {
					t.Fatalf("remove of %v returned %d, want %d", run, got, want)
				}
			case 8:
				if got := x.Clear(r); got != len(m[r].blocks) {
					t.Fatalf("clear dropped %d, model %d", got, len(m[r].blocks))
				}
				m[r] = newRankModel()
			case 9:
				x.DropRank(r)
				x.AddRank(r)
				m[r] = newRankModel()
			}
			probe := gen.Draw(t, "probe")
			checkModel(t, x, m, ids, probe, blockHashes(t, probe, !lazy))
		}
		for _, r := range ids {
			x.DropRank(r)
		}
		if x.Nodes() != 0 || edges(x) != 0 || childCounts(x) != 0 || wideLists(x) != 0 || tabledLists(x) != 0 {
			t.Fatalf("every rank dropped, yet %d nodes, %d edges, %d child counts, %d group lists and %d tabled-children entries remain",
				x.Nodes(), edges(x), childCounts(x), wideLists(x), tabledLists(x))
		}
	})
}

// TestOnePrefixUnderTwoBlockHashes: a rank that stored the same prefix under
// two block hashes keeps it until both are removed.
func TestOnePrefixUnderTwoBlockHashes(t *testing.T) {
	for _, id := range []RankID{3, 80} {
		x := New()
		x.AddRank(id)
		x.Store(id, nil, []Block{{BlockHash: 100, TokensHash: 1}})
		x.Store(id, nil, []Block{{BlockHash: 200, TokensHash: 1}})
		overlap := make([]uint32, 81)
		x.Remove(id, []protocol.SequenceHash{100})
		if x.FindMatches([]protocol.LocalBlockHash{1}, overlap); overlap[id] != 1 {
			t.Fatalf("rank %d: removing one of two hashes dropped the prefix", id)
		}
		x.Remove(id, []protocol.SequenceHash{200})
		if x.FindMatches([]protocol.LocalBlockHash{1}, overlap); overlap[id] != 0 || x.Nodes() != 0 {
			t.Fatalf("rank %d: the prefix outlived both hashes", id)
		}
	}
}

// hashIn draws a hash of type H in [lo, hi].
func hashIn[H ~uint64](lo, hi uint64) *rapid.Generator[H] {
	return rapid.Map(rapid.Uint64Range(lo, hi), func(v uint64) H { return H(v) })
}

// TestMovedHashKeepsItsOldPrefix: a hash stored again under another prefix
// moves there, and the rank keeps its old prefix (Dynamo's old node keeps
// the worker), so a removal above the old prefix still takes what the rank
// holds below it, and storing that prefix again does not bring it back.
func TestMovedHashKeepsItsOldPrefix(t *testing.T) {
	for _, id := range []RankID{0, 70} {
		x := New()
		x.AddRank(id)
		x.Store(id, nil, []Block{{BlockHash: 10, TokensHash: 1}, {BlockHash: 20, TokensHash: 2}, {BlockHash: 30, TokensHash: 3}})
		x.Store(id, nil, []Block{{BlockHash: 20, TokensHash: 9}}) // hash 20 moves from [1 2] to [9]
		overlap := make([]uint32, 71)
		if x.FindMatches([]protocol.LocalBlockHash{1, 2, 3}, overlap); overlap[id] != 3 {
			t.Fatalf("rank %d: overlap %d after the move, want 3: the old prefix stays held", id, overlap[id])
		}
		if n := x.Remove(id, []protocol.SequenceHash{10}); n != 2 || x.Blocks(id) != 1 {
			t.Fatalf("rank %d: removing block 10 dropped %d, holding %d; want 2 (10 and 30 below it) and 1 (20, moved)", id, n, x.Blocks(id))
		}
		x.Store(id, nil, []Block{{BlockHash: 10, TokensHash: 1}, {BlockHash: 21, TokensHash: 2}})
		if x.FindMatches([]protocol.LocalBlockHash{1, 2, 3}, overlap); overlap[id] != 2 {
			t.Fatalf("rank %d: overlap %d, want 2: block 30 went with block 10", id, overlap[id])
		}
		if x.Clear(id); x.Nodes() != 0 {
			t.Fatalf("rank %d: %d nodes outlived a clear", id, x.Nodes())
		}
	}
}

// checkModel checks the index against the model after a step: every
// rank's match of probe (and Matched), the holders, the prefix count, and
// every rank's block count and blocks among probeHashes.
func checkModel(t *rapid.T, x *Index, m model, ids []RankID, probe []protocol.LocalBlockHash, probeHashes []protocol.SequenceHash) {
	overlap := make([]uint32, ids[len(ids)-1]+1)
	x.FindMatches(probe, overlap)
	// Matched lists each rank given an overlap, once.
	var given []RankID
	for r, o := range overlap {
		if o > 0 {
			given = append(given, RankID(r))
		}
	}
	if got := slices.Sorted(slices.Values(x.Matched())); !slices.Equal(got, given) {
		t.Fatalf("probe %v: matched %v, ranks given an overlap %v", probe, got, given)
	}
	checkHolders(t, x, ids)
	if want := m.prefixes(); x.Nodes() != want {
		t.Fatalf("%d nodes, but the ranks hold %d distinct prefixes", x.Nodes(), want)
	}
	for _, rr := range ids {
		if want := m[rr].overlap(probe); overlap[rr] != want {
			t.Fatalf("rank %d probe %v: overlap %d, want %d", rr, probe, overlap[rr], want)
		}
		if x.Blocks(rr) != len(m[rr].blocks) {
			t.Fatalf("rank %d holds %d blocks, model %d", rr, x.Blocks(rr), len(m[rr].blocks))
		}
		for _, h := range probeHashes {
			if _, want := m[rr].blocks[h]; hasBlock(x, rr, h) != want {
				t.Fatalf("rank %d block %d: held %v, model %v", rr, h, !want, want)
			}
		}
	}
}

// hasBlock is HasBlock without giving a lazy rank its table (which would
// leave the rest of a test nothing lazy to try): a look through every block
// the rank holds.
func hasBlock(x *Index, id RankID, h protocol.SequenceHash) bool {
	if x.ranks[id].table {
		return x.HasBlock(id, h)
	}
	found := false
	x.heldBelow(root, id, func(c uint32) {
		nd := x.tree.node(c)
		for s := nd.start; s < nd.start+nd.n; s++ {
			found = found || x.tree.slab.at(s).hash == uint64(h)
		}
	})
	return found
}

// edges, childCounts and wideLists are the edge-table entries, the
// tabled-child counts and the lists of further groups holding a node.
func edges(x *Index) int { return x.tree.children.used }

func childCounts(x *Index) int { return len(x.tabledHeld) }

// tabledLists counts the entries of the tree's lists of tabled children.
func tabledLists(x *Index) int {
	return len(x.tree.tabled) + len(x.tree.tabledAt) + len(x.tree.inEdges)
}

func wideLists(x *Index) int { return len(x.tree.wide.lists) - len(x.tree.wide.freeLists) }

// TestReleaseOfANonHolderChangesNothing: taking a rank off a node it does
// not hold, in a group the node lists or not, or beside the group whose
// mask the node keeps, leaves every holder and the count as they were.
func TestReleaseOfANonHolderChangesNothing(t *testing.T) {
	tr := newTree()
	one, many := tr.alloc(), tr.alloc()
	tr.hold(one, 70)
	for _, id := range []RankID{0, 70, 200} {
		tr.hold(many, id)
	}
	for _, id := range []RankID{1, 71, 130, 201, 300} {
		tr.release(one, id)
		tr.release(many, id)
	}
	if !tr.holds(one, 70) || tr.count(tr.node(one)) != 1 {
		t.Fatalf("the node one rank holds: count %d", tr.count(tr.node(one)))
	}
	for _, id := range []RankID{0, 70, 200} {
		if !tr.holds(many, id) {
			t.Fatalf("rank %d no longer holds the node", id)
		}
	}
	if c := tr.count(tr.node(many)); c != 3 {
		t.Fatalf("the node three groups hold: count %d", c)
	}
}

// TestStoreForADroppedRankPanics: a match counts on only live ranks holding
// nodes (a dropped rank's store would make another rank match what it does
// not cache), so a store for a rank not added is a caller's bug.
func TestStoreForADroppedRankPanics(t *testing.T) {
	x := New()
	for _, id := range []RankID{0, 64, 128} {
		x.AddRank(id)
	}
	x.DropRank(128)
	defer func() {
		if recover() == nil {
			t.Fatal("a store for a dropped rank was taken")
		}
	}()
	x.Store(128, nil, []Block{{BlockHash: 11, TokensHash: 1}})
}

// TestRemovalVisitsItsGroupsChildren: a shared node's children in the edge
// table are listed by the group that holds them, so that a rank's removal
// visits its own group's, not the thousands other groups may have added.
func TestRemovalVisitsItsGroupsChildren(t *testing.T) {
	x := New()
	shared := Block{BlockHash: 1, TokensHash: 1}
	for _, id := range []RankID{0, 70, 140} {
		x.AddRank(id)
		x.Store(id, nil, []Block{shared})
		for i := range 3 { // the first child is kept in the node; the rest go to the edge table
			h := 100 + 10*int(id) + i
			x.Store(id, &shared.BlockHash, []Block{{BlockHash: protocol.SequenceHash(h), TokensHash: protocol.LocalBlockHash(h)}})
		}
	}
	slot, _ := x.ranks[70].blocks.find(0, uint64(shared.BlockHash))
	p, _ := x.tree.slab.edgeOf(slot)
	kids := x.heldKids(p, 70, nil)
	for _, c := range kids {
		if c != x.tree.node(p).first && !x.tree.holds(c, 70) {
			t.Fatalf("rank 70's removal would visit node %d, which only other groups hold (children listed: %v)", c, kids)
		}
	}
	if len(kids) < 3 {
		t.Fatalf("rank 70's children listed: %v, want its 3 (and the node's first)", kids)
	}
}

// TestLazyIndexMatchesModel drives a lazy index as the replay does, so that
// its ranks mostly stay without tables: chains stored under the root or a
// held block found by its path, with sequence hashes; removals of a held
// block and the blocks above it, tail first; clears and drops; then the
// checks of TestIndexMatchesModel. It catches a rank without a table that
// finds a chain's next block, counts its blocks, or walks to a parent
// wrongly.
func TestLazyIndexMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ids := rapid.SampledFrom([][]RankID{{0, 1, 5}, {0, 1, 70, 71, 130, 200}}).Draw(t, "ranks")
		x, m, restore := modelledIndex(t, ids, true)
		defer restore()
		gen := rapid.SliceOfN(hashIn[protocol.LocalBlockHash](1, 3), 1, 6)
		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			r := rapid.SampledFrom(ids).Draw(t, "rank")
			held := slices.Sorted(maps.Keys(m[r].blocks))
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op < 6:
				var parent *protocol.SequenceHash
				var prefix []protocol.LocalBlockHash
				if len(held) > 0 && rapid.IntRange(0, 3).Draw(t, "at the root") > 0 {
					p := rapid.SampledFrom(held).Draw(t, "parent")
					parent, prefix = &p, m[r].blocks[p]
				}
				local := gen.Draw(t, "local")
				path := append(slices.Clone(prefix), local...)
				seq := SequenceHashes(path)[len(prefix):]
				blocks := make([]Block, len(local))
				for i := range local {
					blocks[i] = Block{BlockHash: seq[i], TokensHash: local[i]}
				}
				if err := x.StoreUnder(r, prefix, parent, blocks); err != nil {
					t.Fatalf("store under a held parent refused: %v", err)
				}
				for i := range local {
					m[r].store(seq[i], path[:len(prefix)+i+1])
				}
			case op < 9 && len(held) > 0:
				path := m[r].blocks[rapid.SampledFrom(held).Draw(t, "deepest")]
				seq := SequenceHashes(path)
				run := slices.Clone(seq[rapid.IntRange(0, len(seq)-1).Draw(t, "from"):])
				slices.Reverse(run)
				if rapid.Bool().Draw(t, "another chain after it") { // not a chain with the first
					more := SequenceHashes(m[r].blocks[rapid.SampledFrom(held).Draw(t, "its deepest")])
					more = more[rapid.IntRange(0, len(more)-1).Draw(t, "its from"):]
					slices.Reverse(more)
					run = append(run, more...)
				}
				if got, want := x.Remove(r, run), m[r].remove(run); got != want {
					t.Fatalf("remove of %v returned %d, want %d", run, got, want)
				}
			case op == 9 && rapid.Bool().Draw(t, "clear"):
				x.Clear(r)
				m[r] = newRankModel()
			case op == 9:
				x.DropRank(r)
				x.AddRank(r)
				m[r] = newRankModel()
			}
			probe := gen.Draw(t, "probe")
			checkModel(t, x, m, ids, probe, SequenceHashes(probe))
		}
	})
}
