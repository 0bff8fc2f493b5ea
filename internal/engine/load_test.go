package engine

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/offline-router/offline-router/internal/protocol"
)

// TestActiveTreeMatchesAModel books and releases random prompts over a tiny
// hash alphabet (so that prompts share prefixes, leave segments midway and
// end inside them) on three ranks, and checks after every step, against a
// count of every prefix each rank's requests hold: each rank's distinct
// active blocks, and the active blocks countActive finds for a random
// prompt on every rank. Releasing everything must leave the tree empty.
func TestActiveTreeMatchesAModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e, err := New(protocol.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		for w := uint64(1); w <= 3; w++ {
			var resp protocol.Response
			e.Apply(&protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(w)}, &resp)
		}
		ranks := []*rank{e.fleet.byID[1].ranks[0], e.fleet.byID[2].ranks[0], e.fleet.byID[3].ranks[0]}
		prompt := rapid.SliceOfN(hashIn[protocol.LocalBlockHash](0, 2), 0, 7)
		held := map[uint32]map[string]int{} // slot -> prefix -> requests holding it
		var booked []*request

		apply := func(req *request, delta int) {
			slot := req.rank.slot
			if held[slot] == nil {
				held[slot] = map[string]int{}
			}
			for n := 1; n <= len(req.d.local); n++ {
				key := fmt.Sprint(req.d.local[:n])
				if held[slot][key] += delta; held[slot][key] == 0 {
					delete(held[slot], key)
				}
			}
		}
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			if len(booked) > 0 && rapid.Bool().Draw(t, "release") {
				i := rapid.IntRange(0, len(booked)-1).Draw(t, "which")
				req := booked[i]
				booked = slices.Delete(booked, i, i+1)
				e.releaseBlocks(req, req.rank)
				apply(req, -1)
			} else {
				req := &request{d: &demand{local: prompt.Draw(t, "prompt")}, rank: ranks[rapid.IntRange(0, 2).Draw(t, "rank")]}
				e.countActive(req.d.local)
				e.bookBlocks(req, req.rank)
				booked = append(booked, req)
				apply(req, +1)
			}
			probe := prompt.Draw(t, "probe")
			e.countActive(probe)
			for _, r := range ranks {
				if got, want := r.distinctBlocks, uint64(len(held[r.slot])); got != want {
					t.Fatalf("rank %d: %d distinct active blocks, model %d", r.slot, got, want)
				}
				want := 0
				for want < len(probe) && held[r.slot][fmt.Sprint(probe[:want+1])] > 0 {
					want++
				}
				if got := e.hits[r.slot]; int(got) != want {
					t.Fatalf("rank %d: %d active blocks of %v, model %d", r.slot, got, probe, want)
				}
			}
		}
		for _, req := range booked {
			e.releaseBlocks(req, req.rank)
		}
		if n := e.active.Len(); n != 0 || len(e.active.children) != 0 {
			t.Fatalf("%d segments and %d edges left after releasing everything", n, len(e.active.children))
		}
	})
}
