package kvindex

import (
	"math"
	"slices"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Vectors of Dynamo's salted hashing, tokens 1..12 at block size 4, worked
// with another implementation than this one: Python calling the system's
// libxxhash 0.8.1 (XXH3_64bits_withSeed) by Dynamo's rule (seed = 1337 +
// xxh3(lora, 0) + xxh3(namespace, 1); blocks at that seed, the chain at
// 1337). The same method gives Dynamo's own unsalted constants (the first
// row: lib/tokens' HASH_1_4, HASH_5_8, SEQ_HASH_5_8, SEQ_HASH_9_12), which
// is how the method was checked. Catches a salt on the chain, the seeds of
// the two names swapped, or an empty name salting.
func TestSaltedHashesMatchDynamo(t *testing.T) {
	tokens := make([]uint32, 12)
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	for _, c := range []struct {
		lora, ns    string
		seed        uint64
		blocks, seq []uint64
	}{
		{"", "", 1337, []uint64{14643705804678351452, 16777012769546811212, 483935686894639516},
			[]uint64{14643705804678351452, 4945711292740353085, 12583592247330656132}},
		{"adapter-a", "", 8842669519798868182, []uint64{11381080598872079209, 5698110331184095209, 10923852707342720619},
			[]uint64{11381080598872079209, 17518568667535815909, 12857975441449519705}},
		{"", "tenant-a", 1948188790972764086, []uint64{5738685477468498325, 11202231085456067787, 9318114775459440904},
			[]uint64{5738685477468498325, 1076233986426276607, 14251413665512820044}},
		{"adapter-a", "tenant-a", 10790858310771630931, []uint64{9967753091837871098, 17145582438027477403, 1573782188507051189},
			[]uint64{9967753091837871098, 8253787442643436499, 6376789474022567002}},
	} {
		seed := Salt(c.lora, c.ns)
		if seed != c.seed {
			t.Errorf("lora %q ns %q: seed %d, want %d", c.lora, c.ns, seed, c.seed)
		}
		local := SaltedBlockHashes(tokens, 4, seed)
		seq := SequenceHashes(local)
		gotB, gotS := make([]uint64, len(local)), make([]uint64, len(seq))
		for i := range local {
			gotB[i], gotS[i] = uint64(local[i]), uint64(seq[i])
		}
		if !slices.Equal(gotB, c.blocks) || !slices.Equal(gotS, c.seq) {
			t.Errorf("lora %q ns %q: blocks %v seq %v, want %v %v", c.lora, c.ns, gotB, gotS, c.blocks, c.seq)
		}
	}
	if got := BlockHashes(tokens, 4); !slices.Equal(got, SaltedBlockHashes(tokens, 4, Salt("", ""))) {
		t.Errorf("no names must hash as BlockHashes: %v", got)
	}
}

// Vectors of an opaque id's salted hash, worked as the ones above (Python
// on libxxhash: XXH3_64bits_withSeed of the id's 8 little-endian bytes at
// seed 1337 + xxh3("adapter-a", 0), that seed checked above), and the
// chain over them at 1337. Catches the id hashed as anything but its 8
// little-endian bytes (4 bytes, big-endian), the seed not applied, or a
// salt on the chain.
func TestSaltedBlockIDs(t *testing.T) {
	seed := Salt("adapter-a", "")
	var local []protocol.LocalBlockHash
	for id, want := range map[protocol.LocalBlockHash]uint64{
		0: 13520462270883517306, 1: 7793658154075201090, 2: 11328844629582152976,
		3: 10972370049064777663, math.MaxUint64: 13617156303910923362,
	} {
		if got := SaltedBlockID(id, seed); uint64(got) != want {
			t.Errorf("id %d: %d, want %d", id, got, want)
		}
	}
	for _, id := range []protocol.LocalBlockHash{1, 2, 3} {
		local = append(local, SaltedBlockID(id, seed))
	}
	seq := SequenceHashes(local)
	if want := []protocol.SequenceHash{7793658154075201090, 4430378543177475219, 8795138659690951996}; !slices.Equal(seq, want) {
		t.Errorf("the chain over ids 1, 2, 3: %v, want %v", seq, want)
	}
}
