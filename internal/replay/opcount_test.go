package replay

import (
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
)

// TestReplayOperationCounts replays one small trace of shared prefixes
// (the built-in sessions) at 512-token blocks and split to 16-token ones,
// each worker's cache 32 times the blocks, and counts the work: the simple
// model's cache runs operations a run, so its run operations stay about
// what they are at 512 tokens while its block operations (and the blocks
// the KV events name) grow with the blocks. A change that does per-block
// work where a run's would do (a table probe, a reference or release, an
// eviction a block) fails here, not only in a benchmark; so does a router
// index that keeps a table entry a block (a rank that needed its table).
func TestReplayOperationCounts(t *testing.T) {
	trace := Builtin(3, 60, 0, 512)
	split, err := SplitBlocks(trace, 512, 32)
	if err != nil {
		t.Fatal(err)
	}
	count := func(trace []Request, blockSize uint64, iteration bool) replayOps {
		cc := cluster.Simple(4)
		if iteration {
			cc = cluster.Default(4)
		}
		cc.BlockSize = blockSize
		cc.TotalKVBlocks = 40 * 512 / int(blockSize) // small: requests evict
		router := routerConfig("kv")
		router.BlockSize = blockSize
		var ops replayOps
		if _, err := Run(append([]Request(nil), trace...), Options{Cluster: cc, Router: router, ops: &ops}); err != nil {
			t.Fatal(err)
		}
		return ops
	}
	at512, at16 := count(trace, 512, false), count(split, 16, false)
	t.Logf("%d requests; 512-token blocks: %+v; 16-token blocks: %+v", len(trace), at512, at16)
	if at16.cacheBlocks < 16*at512.cacheBlocks || at16.eventBlocks < 16*at512.eventBlocks {
		t.Fatalf("the split trace's block operations (cache %d, events %d) are not about 32 times the 512-token trace's (%d, %d): the counts miss blocks",
			at16.cacheBlocks, at16.eventBlocks, at512.cacheBlocks, at512.eventBlocks)
	}
	if at16.cacheRuns > at512.cacheRuns*3/2 {
		t.Errorf("the cache's run operations grow with the blocks: %d at 16-token blocks, %d at 512", at16.cacheRuns, at512.cacheRuns)
	}
	if at16.events > at512.events*3/2 {
		t.Errorf("the KV events grow with the blocks: %d at 16-token blocks, %d at 512", at16.events, at512.events)
	}
	iter512, iter16 := count(trace, 512, true), count(split, 16, true)
	if n := at512.indexTables + at16.indexTables + iter512.indexTables + iter16.indexTables; n > 0 {
		t.Errorf("router index ranks keeping a table of block hashes: %d, simple engine at 512-token blocks %+v, at 16 %+v, iteration engine %+v, %+v", n, at512, at16, iter512, iter16)
	}
	if perRequest := at16.cacheRuns / len(trace); perRequest > 40 {
		t.Errorf("%d run operations a request: more than a few a run", perRequest)
	}
}
