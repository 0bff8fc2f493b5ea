package cluster

import (
	"testing"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// TestReleaseDropsOnlyWhatTheRequestHolds: a request whose prompt did not
// fit the cache whole releases only the blocks it holds. A later request
// with the same prompt cached the rest; those are its own, and its stored
// event carries them. (The model once released by hash, dropping them
// before they were computed.)
func TestReleaseDropsOnlyWhatTheRequestHolds(t *testing.T) {
	cfg := &Config{BlockSize: 16, TotalKVBlocks: 6, MaxNumSeqs: 8, MaxNumBatchedTokens: 1 << 20}
	w := newSimpleWorker(cfg, publisher{id: 1})
	request := func(local ...protocol.LocalBlockHash) *Request {
		return &Request{InputTokens: 16 * uint64(len(local)), Local: local, Seq: kvindex.SequenceHashes(local)}
	}
	admit := func(r *Request) {
		t.Helper()
		if _, ok := w.admit(r); !ok {
			t.Fatal("not admitted")
		}
	}
	// Two blocks of the prompt cached and idle, two others held.
	warm, busy := request(1, 2), request(7, 8)
	admit(warm)
	w.store(warm)
	w.release(warm)
	admit(busy)
	// The prompt finds 2 blocks, adds 2 and fills the cache: 2 do not fit.
	a := request(1, 2, 3, 4, 5, 6)
	admit(a)
	if n := cachedBlocks(a); n != 4 {
		t.Fatalf("the first request holds %d blocks, want 4", n)
	}
	w.store(busy)
	w.release(busy) // its 2 blocks idle: room for the rest of the prompt
	b := request(1, 2, 3, 4, 5, 6)
	admit(b)
	if n := cachedBlocks(b); n != 6 {
		t.Fatalf("the second request holds %d blocks, want 6", n)
	}
	w.release(a)
	blocks, _ := w.cache.snapshot()
	for i, h := range b.Seq {
		if blk, ok := blocks[h]; !ok || blk.refs != 1 {
			t.Fatalf("after the first request ended, block %d of the second is gone or not held once", i)
		}
	}
	if !w.store(b) || len(w.events[0].Data.(protocol.Stored).Blocks) != 4 {
		t.Fatalf("the second request stored %v, want its 4 blocks after the cached 2", w.events[0])
	}
}

// cachedBlocks is how many of r's positions hold a block.
func cachedBlocks(r *Request) int { return r.cachedBlocks }
