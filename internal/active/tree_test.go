package active

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/offline-router/offline-router/internal/protocol"
)

// TestTreeMatchesAModel books and releases random prompts over a tiny hash
// alphabet (so that prompts share prefixes, leave segments midway and end
// inside them) on three slots, and checks after every step, against a
// count of every prefix each slot's requests hold: each slot's distinct
// active blocks (the running sum of what Book added and Release removed),
// and the active blocks Count finds for a random prompt on every slot.
// Releasing everything must leave the tree empty.
func TestTreeMatchesAModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tree := New()
		const slots = 3
		prompt := rapid.SliceOfN(rapid.Map(rapid.Uint64Range(0, 2), func(v uint64) protocol.LocalBlockHash {
			return protocol.LocalBlockHash(v)
		}), 0, 7)
		type booking struct {
			local []protocol.LocalBlockHash
			slot  uint32
			end   uint32
		}
		held := [slots]map[string]int{} // slot -> prefix -> requests holding it
		distinct := [slots]uint64{}
		hits := make([]uint32, slots)
		var booked []booking
		apply := func(b booking, delta int) {
			if held[b.slot] == nil {
				held[b.slot] = map[string]int{}
			}
			for n := 1; n <= len(b.local); n++ {
				key := fmt.Sprint(b.local[:n])
				if held[b.slot][key] += delta; held[b.slot][key] == 0 {
					delete(held[b.slot], key)
				}
			}
		}
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			if len(booked) > 0 && rapid.Bool().Draw(t, "release") {
				i := rapid.IntRange(0, len(booked)-1).Draw(t, "which")
				b := booked[i]
				booked = slices.Delete(booked, i, i+1)
				distinct[b.slot] -= tree.Release(b.end, b.slot)
				apply(b, -1)
			} else {
				b := booking{local: prompt.Draw(t, "prompt"), slot: uint32(rapid.IntRange(0, slots-1).Draw(t, "slot"))}
				var added uint64
				b.end, added = tree.Book(tree.Count(b.local, hits), b.local, b.slot)
				distinct[b.slot] += added
				booked = append(booked, b)
				apply(b, +1)
			}
			probe := prompt.Draw(t, "probe")
			tree.Count(probe, hits)
			// Touched lists each slot given hits, once.
			var given []uint32
			for slot, h := range hits {
				if h > 0 {
					given = append(given, uint32(slot))
				}
			}
			if got := slices.Sorted(slices.Values(tree.Touched())); !slices.Equal(got, given) {
				t.Fatalf("probe %v: touched %v, slots given hits %v", probe, got, given)
			}
			for slot := range uint32(slots) {
				if got, want := distinct[slot], uint64(len(held[slot])); got != want {
					t.Fatalf("slot %d: %d distinct active blocks, model %d", slot, got, want)
				}
				want := 0
				for want < len(probe) && held[slot][fmt.Sprint(probe[:want+1])] > 0 {
					want++
				}
				if got := hits[slot]; int(got) != want {
					t.Fatalf("slot %d: %d active blocks of %v, model %d", slot, got, probe, want)
				}
			}
		}
		for _, b := range booked {
			tree.Release(b.end, b.slot)
		}
		if n := tree.Len(); n != 0 || len(tree.children) != 0 {
			t.Fatalf("%d segments and %d edges left after releasing everything", n, len(tree.children))
		}
	})
}
