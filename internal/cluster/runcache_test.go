package cluster

import (
	"slices"
	"testing"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
	"pgregory.net/rapid"
)

// TestRunCacheMatchesBlockModel drives the run cache and the per-block
// model with the same random requests, as the simple model's worker does
// (admit, store, release, in any interleaving across requests), on prompts
// that share prefixes of every length, in caches small enough that
// requests evict, wait and do not fit whole. After each step it requires
// the same answers (hits, found blocks, admission, evicted hashes in
// order, blocks stored), the same counts, every block's references and
// computed flag, and the same idle order.
func TestRunCacheMatchesBlockModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		total := rapid.IntRange(1, 40).Draw(t, "total")
		var prompts [][]protocol.LocalBlockHash
		next := protocol.LocalBlockHash(1)
		for range rapid.IntRange(1, 12).Draw(t, "prompts") {
			var p []protocol.LocalBlockHash
			if len(prompts) > 0 && rapid.Bool().Draw(t, "shares") {
				from := prompts[rapid.IntRange(0, len(prompts)-1).Draw(t, "from")]
				p = slices.Clone(from[:rapid.IntRange(0, len(from)).Draw(t, "prefix")])
			}
			for range rapid.IntRange(0, 12).Draw(t, "extend") {
				p = append(p, next)
				next++
			}
			prompts = append(prompts, p)
		}
		rc, bm := newRunCache(), newBlockModel()
		var admitted, stored []*Request
		for step := range rapid.IntRange(1, 200).Draw(t, "steps") {
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				local := prompts[rapid.IntRange(0, len(prompts)-1).Draw(t, "prompt")]
				r := &Request{Local: local, Seq: kvindex.SequenceHashes(local)}
				running := len(admitted)+len(stored) > 0
				hit, found := rc.match(r.Seq)
				hitM, blocks := bm.match(r.Seq)
				foundM := slices.Index(blocks, noBlock)
				if foundM < 0 {
					foundM = len(blocks)
				}
				if slices.ContainsFunc(blocks[foundM:], func(b int32) bool { return b != noBlock }) {
					t.Fatalf("step %d: the model caches a block past the first missing one: %v", step, blocks)
				}
				if hit != hitM || found != foundM {
					t.Fatalf("step %d: match %d hit, %d found; the model %d, %d", step, hit, found, hitM, foundM)
				}
				ok := !running || len(r.Seq)-found <= total-rc.used+rc.idle
				if okM := bm.admits(r.Seq, total, running); ok != okM {
					t.Fatalf("step %d: admits %v, the model %v", step, ok, okM)
				}
				if !ok {
					continue
				}
				r.HitBlocks = hit
				var evicted []protocol.SequenceHash
				evicted, r.cachedBlocks = rc.take(r, found, total, nil)
				evictedM := bm.take(r, total)
				if !slices.Equal(evicted, evictedM) {
					t.Fatalf("step %d: evicted %v, the model %v", step, evicted, evictedM)
				}
				admitted = append(admitted, r)
			case 1:
				if len(admitted) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(admitted)-1).Draw(t, "store")
				r := admitted[i]
				admitted = slices.Delete(admitted, i, i+1)
				if r.cachedBlocks > r.HitBlocks {
					rc.store(r, r.HitBlocks)
				}
				if end := bm.store(r, r.HitBlocks); end != r.cachedBlocks {
					t.Fatalf("step %d: stored up to %d, the model %d", step, r.cachedBlocks, end)
				}
				stored = append(stored, r)
			case 2:
				if len(stored) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(stored)-1).Draw(t, "release")
				r := stored[i]
				stored = slices.Delete(stored, i, i+1)
				rc.release(r)
				bm.release(r)
			}
			if rc.used != bm.c.used || rc.idle != bm.c.idle {
				t.Fatalf("step %d: %d blocks, %d idle; the model %d, %d", step, rc.used, rc.idle, bm.c.used, bm.c.idle)
			}
			blocks, lru := rc.snapshot()
			blocksM, lruM := bm.snapshot()
			if !slices.Equal(lru, lruM) {
				t.Fatalf("step %d: idle order %v, the model %v", step, lru, lruM)
			}
			if len(blocks) != len(blocksM) {
				t.Fatalf("step %d: %d blocks, the model %d", step, len(blocks), len(blocksM))
			}
			for h, b := range blocksM {
				if blocks[h] != b {
					t.Fatalf("step %d: block %d is %+v, the model %+v", step, h, blocks[h], b)
				}
			}
		}
	})
}

// snapshot is every cached block's references and computed flag, and the
// idle blocks in eviction order.
func (c *runCache) snapshot() (map[protocol.SequenceHash]refBlock, []protocol.SequenceHash) {
	blocks := map[protocol.SequenceHash]refBlock{}
	for _, x := range c.runs {
		for _, h := range x.seq {
			blocks[h] = refBlock{refs: int(x.refs), stored: x.stored}
		}
	}
	var lru []protocol.SequenceHash
	for ri := c.head; ri != noRun; ri = c.runs[ri].next {
		seq := c.runs[ri].seq
		for i := len(seq) - 1; i >= 0; i-- {
			lru = append(lru, seq[i])
		}
	}
	return blocks, lru
}

func (m *blockModel) snapshot() (map[protocol.SequenceHash]refBlock, []protocol.SequenceHash) {
	blocks := map[protocol.SequenceHash]refBlock{}
	for h, i := range m.c.index {
		b := m.c.blocks[i]
		blocks[h] = refBlock{refs: int(b.refs), stored: b.stored}
	}
	var lru []protocol.SequenceHash
	for b := m.c.head; b != noBlock; b = m.c.blocks[b].next {
		lru = append(lru, m.c.blocks[b].hash)
	}
	return blocks, lru
}

// TestRunCacheCopiesAFewBlocks: a run made of fewer than half of a
// request's hashes is a copy, which outlives them (the host drops them
// when the request ends; here they are overwritten), so that no short run
// keeps a long request's hashes alive. It catches a run that is always a
// window on the request's hashes.
func TestRunCacheCopiesAFewBlocks(t *testing.T) {
	c := newRunCache()
	ids := make([]protocol.LocalBlockHash, 10)
	for i := range ids {
		ids[i] = protocol.LocalBlockHash(i + 1)
	}
	serve := func(r *Request) {
		_, found := c.match(r.Seq)
		_, r.cachedBlocks = c.take(r, found, 100, nil)
		c.store(r, found)
		c.release(r)
	}
	serve(&Request{Local: ids[:8], Seq: kvindex.SequenceHashes(ids[:8])})
	b := &Request{Local: ids, Seq: kvindex.SequenceHashes(ids)}
	want := slices.Clone(b.Seq)
	serve(b) // its last 2 blocks are a run of their own
	clear(b.Seq)
	if hit, found := c.match(want); hit != 10 || found != 10 {
		t.Fatalf("after the request's hashes were overwritten: %d blocks hit, %d found, want 10", hit, found)
	}
}
