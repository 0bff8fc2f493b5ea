package cluster

import (
	"slices"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
	"pgregory.net/rapid"
)

// refBlock is the model blockCache must agree with: a map and a slice,
// the obvious way.
type refBlock struct {
	refs   int
	stored bool
}

// TestBlockCacheMatchesModel drives the cache and a map-and-slice model
// with the same random operations, over few hash values (so that probe
// runs collide and removals shift them back), and requires the same
// lookups, counts and eviction order after each.
func TestBlockCacheMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := newBlockCache()
		model := map[protocol.SequenceHash]*refBlock{}
		var lru []protocol.SequenceHash // idle blocks, least recently used first
		// Hashes are drawn from a small set, some equal modulo the table.
		hashes := rapid.SliceOfNDistinct(rapid.Uint64Range(0, 1<<12), 1, 300, rapid.ID).Draw(t, "hashes")
		var held []protocol.SequenceHash // one entry per reference
		for step := range rapid.IntRange(1, 400).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 4).Draw(t, "op"); {
			case op == 0: // add a block no one has
				h := protocol.SequenceHash(hashes[rapid.IntRange(0, len(hashes)-1).Draw(t, "h")])
				if model[h] != nil {
					continue
				}
				c.add(h, protocol.LocalBlockHash(h+1))
				model[h] = &refBlock{refs: 1}
				held = append(held, h)
			case op == 1 && len(held) > 0: // reference a held or idle block again
				h := held[rapid.IntRange(0, len(held)-1).Draw(t, "ref")]
				if len(lru) > 0 && rapid.Bool().Draw(t, "idle") {
					h = lru[rapid.IntRange(0, len(lru)-1).Draw(t, "idleRef")]
					lru = slices.DeleteFunc(lru, func(x protocol.SequenceHash) bool { return x == h })
				}
				c.ref(c.find(h))
				model[h].refs++
				held = append(held, h)
			case op == 2 && len(held) > 0: // compute a held block
				h := held[rapid.IntRange(0, len(held)-1).Draw(t, "store")]
				c.blocks[c.find(h)].stored = true
				model[h].stored = true
			case op == 3 && len(held) > 0: // release a reference
				i := rapid.IntRange(0, len(held)-1).Draw(t, "unref")
				h := held[i]
				held = slices.Delete(held, i, i+1)
				c.unref(c.find(h))
				m := model[h]
				if m.refs--; m.refs == 0 {
					if m.stored {
						lru = append(lru, h)
					} else {
						delete(model, h)
					}
				}
			case op == 4 && len(lru) > 0:
				if got := c.evictOldest(); got != lru[0] {
					t.Fatalf("step %d: evicted %d, want %d (least recently used)", step, got, lru[0])
				}
				delete(model, lru[0])
				lru = lru[1:]
			}
			if c.used != len(model) || c.idle != len(lru) {
				t.Fatalf("step %d: %d blocks, %d idle; want %d, %d", step, c.used, c.idle, len(model), len(lru))
			}
			for _, h := range hashes {
				b, m := c.find(protocol.SequenceHash(h)), model[protocol.SequenceHash(h)]
				if (b != noBlock) != (m != nil) {
					t.Fatalf("step %d: find(%d) = %d, model has it: %v", step, h, b, m != nil)
				}
				if m != nil && (int(c.blocks[b].refs) != m.refs || c.blocks[b].stored != m.stored || c.blocks[b].hash != protocol.SequenceHash(h)) {
					t.Fatalf("step %d: block %d is %+v, want %+v", step, h, c.blocks[b], *m)
				}
			}
		}
	})
}
