package replay

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// tinyCluster is one worker of one rank holding blocks blocks of 4 tokens.
func tinyCluster(blocks int) cluster.Config {
	c := cluster.Simple(1)
	c.BlockSize, c.TotalKVBlocks = 4, blocks
	return c
}

func hreq(id string, at float64, input uint64, ids ...protocol.LocalBlockHash) Request {
	return Request{ID: id, Arrival: at, InputTokens: input, OutputTokens: 1, HashIDs: ids}
}

// TestHeadroomOfAHandMadeTrace: 40 input tokens in blocks of 4, the block
// after 1, 2 partial (2 tokens) in b and full in d. Every block hits but
// once, charged at its fewest tokens: 40 - (4 + 4 + 2 + 2 + 4) = 24, in
// either order of b and d (with d first, arrival order alone would give
// 22, yet a worker may start b first). An LRU cache as large as every
// block hits as much; one of 2 blocks keeps only a's prefix: b hits 8,
// c and d 4 each. It catches a first block counted as a hit, a partial
// block charged as a full one or at its first occurrence, hit tokens not
// capped at the input, and the LRU's eviction or match gone wrong.
func TestHeadroomOfAHandMadeTrace(t *testing.T) {
	trace := []Request{hreq("a", 0, 8, 1, 2), hreq("b", 1, 10, 1, 2, 3), hreq("c", 2, 6, 1, 5), hreq("d", 3, 16, 1, 2, 3, 4)}
	swapped := slices.Clone(trace)
	swapped[1], swapped[3] = swapped[3], swapped[1]
	swapped[1].Arrival, swapped[3].Arrival = 1, 3
	for _, c := range []struct {
		name     string
		trace    []Request
		blocks   int
		inf, lru float64
	}{
		{"b before d, large", trace, 100, 0.6, 0.6},
		{"d before b, large", swapped, 100, 0.6, 22.0 / 40},
		{"b before d, 2 blocks", trace, 2, 0.6, 16.0 / 40},
	} {
		cl := tinyCluster(c.blocks)
		hr := headroomOf(c.trace, &cl, false)
		if hr.InfiniteCacheHitRate != c.inf || hr.ClusterLRUHitRate != c.lru || hr.LRUCapacityBlocks != uint64(c.blocks) || hr.LRUOrder != "arrival" {
			t.Errorf("%s: %+v, want infinite %v, LRU %v of %d blocks in arrival order", c.name, *hr, c.inf, c.lru, c.blocks)
		}
	}
}

// TestClusterLRUEvictsTheLeastRecentlyUsed: in a cache of 2 blocks, x is
// used again before z comes, so z evicts y and x hits twice; a FIFO cache
// (a hit not refreshing its block) would evict x and hit once.
func TestClusterLRUEvictsTheLeastRecentlyUsed(t *testing.T) {
	trace := []Request{hreq("x1", 0, 4, 1), hreq("y", 1, 4, 7), hreq("x2", 2, 4, 1), hreq("z", 3, 4, 9), hreq("x3", 4, 4, 1)}
	cl := tinyCluster(2)
	if got := headroomOf(trace, &cl, false).ClusterLRUHitRate; got != 8.0/20 {
		t.Fatalf("LRU hit rate %v, want 0.4", got)
	}
}

// TestClusterLRUTakesRequestsInArrivalOrder: in a cache of one block, r3
// comes right after r1 and hits its block, though the trace lists r2
// between them: by time (r1 at 0, r2 at 5, r3 at 1), or as a later turn
// (r2 at 5, r1 at 10, r3 its turn 1 ms after, at 11; counted from 0 it
// would come first and r2 evict its block before r1 came). In trace
// order, as a closed loop must take them, r2 evicts it first. It catches
// the order left as the trace's, a later turn's delay not counted from
// its previous turn, and a closed loop sorted by times it ignores.
func TestClusterLRUTakesRequestsInArrivalOrder(t *testing.T) {
	delay := 1.0
	turn := hreq("r3", 0, 4, 1)
	turn.Session, turn.DelayMS = "s", &delay
	first := hreq("r1", 10, 4, 1)
	first.Session = "s"
	for _, c := range []struct {
		name   string
		trace  []Request
		closed bool
		want   float64
		order  string
	}{
		{"by time", []Request{hreq("r1", 0, 4, 1), hreq("r2", 5, 4, 2), hreq("r3", 1, 4, 1)}, false, 4.0 / 12, "arrival"},
		{"a later turn", []Request{first, hreq("r2", 5, 4, 2), turn}, false, 4.0 / 12, "arrival"},
		{"closed loop", []Request{hreq("r1", 0, 4, 1), hreq("r2", 5, 4, 2), hreq("r3", 1, 4, 1)}, true, 0, "trace"},
	} {
		cl := tinyCluster(1)
		hr := headroomOf(c.trace, &cl, c.closed)
		if hr.ClusterLRUHitRate != c.want || hr.LRUOrder != c.order || hr.InfiniteCacheHitRate != 4.0/12 {
			t.Errorf("%s: %+v, want LRU %v in %s order, infinite 1/3", c.name, *hr, c.want, c.order)
		}
	}
}

// TestLRUCapacityIsThePrefillPools: every rank of every worker that
// prefills, and not the decode pool's. It catches the decode pool
// counted, DP ranks left out, and the larger pool's size taken.
func TestLRUCapacityIsThePrefillPools(t *testing.T) {
	pd := cluster.Default(1)
	pd.PrefillWorkers, pd.DecodeWorkers, pd.Workers, pd.DPSize, pd.TotalKVBlocks = 2, 3, 3, 2, 10
	agg := cluster.Default(3)
	agg.DPSize, agg.TotalKVBlocks = 2, 10
	for _, c := range []struct {
		cluster cluster.Config
		want    uint64
	}{{pd, 40}, {agg, 60}} {
		if got := headroomOf(nil, &c.cluster, false).LRUCapacityBlocks; got != c.want {
			t.Errorf("%+v: capacity %d, want %d", c.cluster.PoolSizes(), got, c.want)
		}
	}
}

// TestNoRouterBeatsTheInfiniteCache: on the built-in workload (several
// caches, DP ranks, both engines, disaggregated) and the shared trace
// (both engines), every policy's prefix hit rate is at most the bound,
// and the LRU reference too; runs that reject requests keep their cached
// tokens over all input tokens under it. It catches a bound that falls
// below what was reached: a block's miss charged at its most tokens puts
// the LRU above it on the built-in workload (finer slips, as a partial
// block's tokens left out, move it too little: the hand-made trace pins
// those).
func TestNoRouterBeatsTheInfiniteCache(t *testing.T) {
	small := cluster.Default(4)
	small.TotalKVBlocks, small.DPSize = 60, 2
	simple := cluster.Simple(4)
	simple.TotalKVBlocks = 100
	pd := cluster.Default(1)
	pd.PrefillWorkers, pd.DecodeWorkers, pd.KVTransferGBps, pd.TotalKVBlocks = 2, 2, 50, 40
	type setting struct {
		name    string
		trace   []Request
		cluster cluster.Config
		busy    bool // a threshold that turns requests away
	}
	builtin := Builtin(5, 150, 0, 512)
	SpeedUp(builtin, 4)
	settings := []setting{
		{"builtin, default", builtin, cluster.Default(8), false},
		{"builtin, small caches, dp 2", builtin, small, false},
		{"builtin, simple", builtin, simple, false},
		{"builtin, disaggregated", builtin, pd, false},
		{"builtin, busy", builtin, cluster.Default(2), true},
		// replay's own built-in workload: sglang_cache_aware comes within
		// 0.0003 of the bound
		{"builtin as replay runs it, simple", Builtin(0, 300, 0, 512), cluster.Simple(8), false},
	}
	if f, err := os.Open(sharedTrace); err == nil {
		shared, err := ReadMooncake(f, 512)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		settings = append(settings, setting{"shared", shared, cluster.Default(8), false},
			setting{"shared, simple", shared, cluster.Simple(8), false})
	} else {
		t.Log("../shared/traces is absent: the built-in workload only")
	}
	rejected := false
	for _, s := range settings {
		hr := headroomOf(s.trace, &s.cluster, false)
		if hr.ClusterLRUHitRate > hr.InfiniteCacheHitRate {
			t.Errorf("%s: LRU %.4f above the infinite cache's %.4f", s.name, hr.ClusterLRUHitRate, hr.InfiniteCacheHitRate)
		}
		for _, policy := range protocol.Policies {
			if policy == protocol.PolicyDirect {
				continue // a trace names no worker; replay refuses it before running
			}
			cfg := routerConfig(policy)
			if s.busy {
				cfg.ActivePrefillTokensThreshold = ptr(100.0)
			}
			res, err := Run(slices.Clone(s.trace), Options{Cluster: s.cluster, Router: cfg, Records: true})
			if err != nil {
				t.Fatal(err)
			}
			m := &res.Metrics
			var cached, input uint64
			for _, r := range res.Records() {
				cached, input = cached+r.CachedTokens, input+r.InputTokens
			}
			offered := float64(cached) / float64(input)
			if offered > hr.InfiniteCacheHitRate || (m.Rejected == 0 && m.PrefixHitRate > hr.InfiniteCacheHitRate) {
				t.Errorf("%s, %s: prefix hit rate %.4f (cached over all input %.4f) above the bound %.4f", s.name, policy, m.PrefixHitRate, offered, hr.InfiniteCacheHitRate)
			}
			rejected = rejected || m.Rejected > 0
		}
	}
	if !rejected {
		t.Error("no run rejected a request: the bound over all input tokens is not tried")
	}
}

// TestReportHasTheHeadroomOnce: Experiment.Run states the headroom of
// repeat 0's requests, the same for any policy run, and the setup digest
// does not move with it (a sweep resumes by it). It catches the headroom
// left out of the report, computed on a later repeat's requests, or in the
// digest.
func TestReportHasTheHeadroomOnce(t *testing.T) {
	e := &Experiment{Workload: Workload{ArrivalSpeedupRatio: 1, BuiltinSessions: 30}, Cluster: cluster.Default(4),
		Router: routerConfig(protocol.PolicyKV), Repeats: 2,
		Contenders: []Contender{{Name: "kv", Router: routerConfig(protocol.PolicyKV)}, {Name: "round_robin", Router: routerConfig(protocol.PolicyRoundRobin)}}}
	trace, _, err := e.Load()
	if err != nil {
		t.Fatal(err)
	}
	rep := runExperiment(t, e)
	want := headroomOf(trace, &e.Cluster, false)
	if rep.Deterministic.Headroom == nil || *rep.Deterministic.Headroom != *want {
		t.Fatalf("headroom %+v, want %+v", rep.Deterministic.Headroom, want)
	}
	if want.InfiniteCacheHitRate <= 0 || want.ClusterLRUHitRate <= 0 {
		t.Fatalf("the built-in workload shares prompts: %+v", want)
	}
	without := rep.Deterministic
	without.Headroom = nil
	if rep.Deterministic.SetupDigest() != without.SetupDigest() {
		t.Error("the headroom changes the setup digest")
	}
}

// blockHeadroomRates is the headroom a block at a time, as the reference
// defines it, for TestHeadroomMatchesBlockModel: every block occurrence
// looked up in a Go map of the blocks seen, with its fewest tokens, and
// touched, deepest first, in an LRU cache kept as each block's time of
// last use (evicting the oldest by a scan: a model, not a cache).
func blockHeadroomRates(trace []Request, order []int, bs, capacity uint64) (infinite, lru float64) {
	cheapest := map[protocol.SequenceHash]uint64{}
	lastUse := map[protocol.SequenceHash]int{}
	clock := 0
	var input, tokens, lruHits uint64
	for _, i := range order {
		r := &trace[i]
		input += r.InputTokens
		seq := kvindex.SequenceHashes(r.HashIDs)
		hit := 0
		for hit < len(seq) && lastUse[seq[hit]] > 0 {
			hit++
		}
		lruHits += min(uint64(hit)*bs, r.InputTokens)
		for k := len(seq) - 1; k >= 0; k-- {
			w := blockWeight(k, bs, r.InputTokens)
			tokens += w
			if v, ok := cheapest[seq[k]]; !ok || w < v {
				cheapest[seq[k]] = w
			}
			if capacity == 0 {
				continue
			}
			if lastUse[seq[k]] == 0 && uint64(len(lastUse)) == capacity {
				oldest := protocol.SequenceHash(0)
				for h, t := range lastUse {
					if oldest == 0 || t < lastUse[oldest] {
						oldest = h
					}
				}
				delete(lastUse, oldest)
			}
			clock++
			lastUse[seq[k]] = clock
		}
	}
	if input == 0 {
		return 0, 0
	}
	hits := tokens
	for _, w := range cheapest {
		hits -= w
	}
	return float64(hits) / float64(input), float64(lruHits) / float64(input)
}

// TestHeadroomMatchesBlockModel: the run caches' headroom against the
// block-at-a-time model, on prompts sharing prefixes of every length, with
// partial last blocks and blocks past the input, in LRU caches from none
// to larger than the trace. It catches a run cache that leaves a request's
// prefix out of the recency order, evicts the wrong end of a run, or
// charges a partial block's miss at block_size.
func TestHeadroomMatchesBlockModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const bs = 4
		var trace []Request
		next := protocol.LocalBlockHash(1)
		for i := range rapid.IntRange(0, 30).Draw(t, "requests") {
			var ids []protocol.LocalBlockHash
			if len(trace) > 0 && rapid.Bool().Draw(t, "shares") {
				from := trace[rapid.IntRange(0, len(trace)-1).Draw(t, "from")].HashIDs
				ids = slices.Clone(from[:rapid.IntRange(0, len(from)).Draw(t, "prefix")])
			}
			for range rapid.IntRange(0, 8).Draw(t, "extend") {
				ids = append(ids, next)
				next++
			}
			input := uint64(rapid.IntRange(0, (len(ids)+1)*bs).Draw(t, "input"))
			trace = append(trace, hreq(fmt.Sprint(i), float64(i), input, ids...))
		}
		order := rapid.Permutation(indices(len(trace))).Draw(t, "order")
		capacity := uint64(rapid.IntRange(0, 60).Draw(t, "capacity"))
		inf, lru := headroomRates(trace, order, bs, capacity)
		wantInf, wantLRU := blockHeadroomRates(trace, order, bs, capacity)
		if inf != wantInf || lru != wantLRU {
			t.Fatalf("infinite %v, LRU %v; the block model gives %v, %v", inf, lru, wantInf, wantLRU)
		}
	})
}

func indices(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
