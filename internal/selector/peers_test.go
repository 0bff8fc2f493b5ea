package selector

import (
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
)

// TestSGLangBoundaries: the match must be strictly above cache_threshold,
// and imbalance needs both thresholds crossed (strictly).
func TestSGLangBoundaries(t *testing.T) {
	c := protocol.SGLangConfig{CacheThreshold: 0.5, BalanceAbsThreshold: 2, BalanceRelThreshold: 2}
	cases := []struct {
		name   string
		blocks uint64
		cands  []Candidate
		want   int
	}{
		{"half is not above half: the smallest tree", 4, []Candidate{{ActiveRequests: 1, TreeBlocks: 9}, {Routed: 2, ActiveRequests: 2, TreeBlocks: 8}}, 1},
		{"a miss: the smallest tree, not the least loaded", 4, []Candidate{{ActiveRequests: 2, TreeBlocks: 5}, {ActiveRequests: 3, TreeBlocks: 2}}, 1},
		{"equal trees: the less loaded", 4, []Candidate{{ActiveRequests: 2, TreeBlocks: 5}, {ActiveRequests: 1, TreeBlocks: 5}}, 1},
		{"above half: the match", 4, []Candidate{{ActiveRequests: 1}, {Routed: 3, ActiveRequests: 2}}, 1},
		{"spread 3 > 2 but 6 is not above 3 × 2: balanced", 4, []Candidate{{ActiveRequests: 3}, {Routed: 4, ActiveRequests: 6}}, 1},
		{"spread 3 > 2 and 4 > 1 × 2: imbalanced, the least loaded", 4, []Candidate{{ActiveRequests: 1, TreeBlocks: 9}, {Routed: 4, ActiveRequests: 4}}, 0},
		{"spread 2 is not above 2: balanced", 4, []Candidate{{ActiveRequests: 0}, {Routed: 4, ActiveRequests: 2}}, 1},
		{"equal matches: the less loaded", 4, []Candidate{{Routed: 3, ActiveRequests: 2}, {Routed: 3, ActiveRequests: 1}}, 1},
		{"equal loads: the first", 4, []Candidate{{ActiveRequests: 1}, {ActiveRequests: 1}}, 0},
		{"no blocks: the smallest tree", 0, []Candidate{{ActiveRequests: 1, TreeBlocks: 1}, {ActiveRequests: 0, TreeBlocks: 2}}, 0},
	}
	for _, tc := range cases {
		scores := make([]Score, len(tc.cands))
		if got := pickSGLang(&c, Request{Blocks: tc.blocks}, scores, tc.cands); got != tc.want || scores[got].Prob != 1 {
			t.Errorf("%s: picked %d (prob %v), want %d", tc.name, got, scores[got].Prob, tc.want)
		}
	}
}

// TestLLMDScorers checks each scorer's normalisation on its own, with the
// other weights at 0, and the draw among equal totals.
func TestLLMDScorers(t *testing.T) {
	only := func(prefix, queue, kv float64) protocol.LLMDConfig {
		return protocol.LLMDConfig{PrefixCacheScorerWeight: prefix, QueueScorerWeight: queue, KVCacheUtilizationScorerWeight: kv}
	}
	cases := []struct {
		name  string
		w     protocol.LLMDConfig
		cands []Candidate
		want  int
		ties  int
	}{
		// Matched 2 and 6: normalised 0 and 1; the unmatched one 0 too.
		{"prefix: the longest", only(1, 0, 0), []Candidate{{Overlap: 2}, {Overlap: 0}, {Overlap: 6}}, 2, 1},
		// Every matching rank matches alike: 1 each; the unmatched 0.
		{"prefix: alike matches tie", only(1, 0, 0), []Candidate{{Overlap: 3}, {Overlap: 0}, {Overlap: 3}}, 0, 2},
		{"prefix: no match ties all", only(1, 0, 0), []Candidate{{}, {}, {}}, 0, 3},
		{"queue: the shortest", only(0, 1, 0), []Candidate{{Waiting: 3}, {Waiting: 1}, {Waiting: 2}}, 1, 1},
		{"kv: the emptiest", only(0, 0, 1), []Candidate{{KVUsage: 0.5}, {KVUsage: 0.2}, {KVUsage: 1.7}}, 1, 1},
		// Booked past its size (the router's count can be) is full, no
		// worse than full: they tie.
		{"kv: past full is full", only(0, 0, 1), []Candidate{{KVUsage: 1.7}, {KVUsage: 1}}, 0, 2},
		// Prefix 3 + queue 0 + kv 2 × 0.5 = 4 against 0 + 2 + 2 × 0.9 = 3.8,
		// and with the prefix weighed 2, 3 against 3.8.
		{"weighted sum", only(3, 2, 2), []Candidate{{Overlap: 4, Waiting: 1, KVUsage: 0.5}, {Overlap: 1, KVUsage: 0.1}}, 0, 1},
		{"weighted sum, prefix lighter", only(2, 2, 2), []Candidate{{Overlap: 4, Waiting: 1, KVUsage: 0.5}, {Overlap: 1, KVUsage: 0.1}}, 1, 1},
	}
	for _, tc := range cases {
		scores := make([]Score, len(tc.cands))
		d := &countingDraws{}
		got := pickLLMD(&tc.w, scores, tc.cands, d)
		ties := 0
		for _, s := range scores {
			if s.Prob > 0 {
				ties++
			}
		}
		if got != tc.want || ties != tc.ties || scores[got].Prob != 1/float64(tc.ties) || d.index != min(tc.ties-1, 1) {
			t.Errorf("%s: picked %d with %d ties and %d draws; want %d with %d", tc.name, got, ties, d.index, tc.want, tc.ties)
		}
	}
}
