package kvindex

import (
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
)

func tierBlocks(local, hashes []uint64) []Block {
	out := make([]Block, len(local))
	for i := range local {
		out[i] = Block{BlockHash: protocol.SequenceHash(hashes[i]), TokensHash: protocol.LocalBlockHash(local[i])}
	}
	return out
}

func locals(v ...uint64) []protocol.LocalBlockHash {
	out := make([]protocol.LocalBlockHash, len(v))
	for i, x := range v {
		out[i] = protocol.LocalBlockHash(x)
	}
	return out
}

func parentOf(h uint64) *protocol.SequenceHash { p := protocol.SequenceHash(h); return &p }

// Dynamo's own cases (lower_tier.rs at the pinned commit): a tail whose
// parent is in no tier matches from the device's last hash, and a
// continuation may start mid-segment. Catches a walk that starts at the
// root, or that needs the parent stored in the tier.
func TestTierContinuesFromTheLastMatchedHash(t *testing.T) {
	x := NewTier()
	x.Store(3, parentOf(999), tierBlocks([]uint64{21, 22, 23}, []uint64{201, 202, 203}))
	c := Continuation{Rank: 3, Pos: 2, Hash: 999}
	if n := x.Extend(locals(1, 2, 21, 22, 23), &c); n != 3 || c.Pos != 5 || c.Hash != 203 {
		t.Fatalf("missing-parent tail: %d hits, at %+v; want 3 at 5, hash 203", n, c)
	}
	y := NewTier()
	y.Store(5, parentOf(700), tierBlocks([]uint64{31, 32, 33}, []uint64{301, 302, 303}))
	c = Continuation{Rank: 5, Pos: 2, Hash: 301}
	if n := y.Extend(locals(10, 31, 32, 33), &c); n != 2 {
		t.Fatalf("mid-segment: %d hits, want 2", n)
	}
	// The wrong anchor matches nothing, though the local hashes agree.
	c = Continuation{Rank: 3, Pos: 2, Hash: 998}
	if n := x.Extend(locals(1, 2, 21, 22, 23), &c); n != 0 || c.Pos != 2 {
		t.Fatalf("wrong anchor: %d hits at %d", n, c.Pos)
	}
}

// A root store is found by its first block; only its owners start there;
// another rank's edge is not this rank's. Catches RootOwners ignoring the
// rooted flag (a parent hash 0 is not a root) and Extend not checking the
// owner.
func TestTierRootsAndOwners(t *testing.T) {
	x := NewTier()
	x.Store(1, nil, tierBlocks([]uint64{101, 102}, []uint64{1, 2}))
	x.Store(2, parentOf(0), tierBlocks([]uint64{101}, []uint64{9}))
	if got := x.RootOwners(101); len(got) != 1 || got[0] != 1 {
		t.Fatalf("root owners %v, want [1]", got)
	}
	c := Continuation{Rank: 1, Rooted: true}
	if n := x.Extend(locals(101, 102, 103), &c); n != 2 {
		t.Fatalf("rank 1 from the root: %d hits, want 2", n)
	}
	c = Continuation{Rank: 2, Rooted: true}
	if n := x.Extend(locals(101, 102), &c); n != 0 {
		t.Fatalf("rank 2 holds no root: %d hits", n)
	}
}

// The first mapping wins (Dynamo): a store naming an edge that leads to
// another block, or a block the rank holds under another edge, stops
// there. Removal takes an owner off in O(1), the moved owner keeps its
// edge, and clearing takes everything. Catches a conflicting store that
// overwrites, and a swap-remove that loses the moved owner's place.
func TestTierConflictsRemovalAndClear(t *testing.T) {
	x := NewTier()
	x.Store(1, nil, tierBlocks([]uint64{101, 102}, []uint64{1, 2}))
	x.Store(2, nil, tierBlocks([]uint64{101, 102}, []uint64{1, 2}))
	x.Store(3, nil, tierBlocks([]uint64{101, 102}, []uint64{1, 2}))
	x.Store(4, nil, tierBlocks([]uint64{101, 102}, []uint64{1, 7})) // 102 leads to 2 already
	if x.RankBlocks(4) != 1 || x.Blocks() != 7 {
		t.Fatalf("conflict: rank 4 holds %d, tier %d; want 1 and 7", x.RankBlocks(4), x.Blocks())
	}
	x.Store(1, parentOf(2), tierBlocks([]uint64{101}, []uint64{1})) // block 1 moved under 2: refused
	x.Remove(1, []protocol.SequenceHash{1, 5})                      // 5 is not held: passed over
	for _, r := range []RankID{2, 3} {
		c := Continuation{Rank: r, Rooted: true}
		if n := x.Extend(locals(101, 102), &c); n != 2 {
			t.Fatalf("rank %d after rank 1 left the root edge: %d hits, want 2", r, n)
		}
	}
	c := Continuation{Rank: 1, Rooted: true}
	if n := x.Extend(locals(101, 102), &c); n != 0 {
		t.Fatalf("rank 1 removed its root: %d hits", n)
	}
	x.Clear(2)
	x.Clear(3)
	x.Clear(4)
	x.Remove(1, []protocol.SequenceHash{2})
	if x.Blocks() != 0 || len(x.edges) != 0 {
		t.Fatalf("after clearing: %d blocks, %d edges", x.Blocks(), len(x.edges))
	}
}
