package engine

import (
	"math"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Lower tiers (Dynamo's LowerTierIndexers): a worker's host, disk and
// external caches, each indexed apart from the device index as
// continuation edges (kvindex.Tier). A placement's match walks them after
// the device: a rank that matched d device blocks continues from its last
// device block into its host tier, then from where that stopped into its
// disk tier, then external; a rank with no device match starts at the
// prompt's root in a tier where it holds the first block as a root. So
// every tier's hits extend the prefix before them, and a host block the
// device prefix already covers is never counted. The selector credits
// host hits at host_cache_hit_weight and disk and external hits at
// disk_cache_hit_weight.
type lowerTiers struct {
	idx     [len(protocol.LowerTiers)]*kvindex.Tier // nil until the tier's first event, as Dynamo allocates one lazily
	hits    [len(protocol.LowerTiers)][]uint32      // by rank slot: the last walk's blocks in each tier
	hit     []kvindex.RankID                        // the ranks the last walk gave a lower-tier hit
	matched []kvindex.RankID                        // those and the device's matched ranks, each once
	conts   []kvindex.Continuation
	has     []bool // by rank slot: has a continuation in conts (cleared after each walk)
	path    []protocol.SequenceHash
}

// tierIndex is a lower tier's place in protocol.LowerTiers.
func tierIndex(tier string) int {
	for i, t := range protocol.LowerTiers {
		if t == tier {
			return i
		}
	}
	panic("engine: not a lower tier: " + tier)
}

// of is the tier's index, made on first use.
func (t *lowerTiers) of(tier string) *kvindex.Tier {
	i := tierIndex(tier)
	if t.idx[i] == nil {
		t.idx[i] = kvindex.NewTier()
	}
	return t.idx[i]
}

// inUse reports whether any lower tier holds a block: until one does, a
// placement walks the device index alone and may take the cheap paths.
func (t *lowerTiers) inUse() bool {
	for _, x := range t.idx {
		if x != nil && x.Blocks() > 0 {
			return true
		}
	}
	return false
}

// clear drops every lower-tier block of id, and returns how many.
func (t *lowerTiers) clear(id kvindex.RankID) int {
	n := 0
	for _, x := range t.idx {
		if x != nil {
			n += x.Clear(id)
		}
	}
	return n
}

// blocks is what id holds in each lower tier, or nil when none.
func (t *lowerTiers) blocks(id kvindex.RankID) *protocol.TierBlocks {
	var n [len(protocol.LowerTiers)]int
	for i, x := range t.idx {
		if x != nil {
			n[i] = x.RankBlocks(id)
		}
	}
	if n == [len(protocol.LowerTiers)]int{} {
		return nil
	}
	return &protocol.TierBlocks{HostPinned: n[0], Disk: n[1], External: n[2]}
}

// extend walks the lower tiers past each rank's device match (overlap, by
// slot, for the ranks in matched) and returns the ranks either gave a
// match. seq, when the host gave it, anchors a rank whose device match
// came from the predicted index beyond the main index's path.
func (t *lowerTiers) extend(index *kvindex.Index, local []protocol.LocalBlockHash, seq []protocol.SequenceHash,
	overlap []uint32, matched []kvindex.RankID) []kvindex.RankID {
	for i := range t.hits {
		for _, r := range t.hit {
			t.hits[i][r] = 0
		}
		if n := len(overlap); len(t.hits[i]) < n {
			t.hits[i] = append(t.hits[i], make([]uint32, n-len(t.hits[i]))...)
		}
	}
	if n := len(overlap); len(t.has) < n {
		t.has = append(t.has, make([]bool, n-len(t.has))...)
	}
	t.hit = t.hit[:0]
	if !t.inUse() || len(local) == 0 {
		return matched
	}
	depth := uint32(0)
	for _, r := range matched {
		depth = max(depth, overlap[r])
	}
	t.path = index.PathHashes(local, int(depth), t.path[:0])
	t.conts = t.conts[:0]
	for _, r := range matched {
		d := overlap[r]
		switch {
		case d == 0:
			continue
		case int(d) <= len(t.path):
			t.conts = append(t.conts, kvindex.Continuation{Rank: r, Pos: int(d), Hash: t.path[d-1]})
		case int(d) <= len(seq):
			t.conts = append(t.conts, kvindex.Continuation{Rank: r, Pos: int(d), Hash: seq[d-1]})
		default:
			continue
		}
		t.has[r] = true
	}
	for i, x := range t.idx {
		if x == nil || x.Blocks() == 0 {
			continue
		}
		for _, r := range x.RootOwners(local[0]) {
			if !t.has[r] {
				t.has[r] = true
				t.conts = append(t.conts, kvindex.Continuation{Rank: r, Rooted: true})
			}
		}
		for j := range t.conts {
			c := &t.conts[j]
			if n := x.Extend(local, c); n > 0 {
				if t.hits[0][c.Rank]+t.hits[1][c.Rank]+t.hits[2][c.Rank] == 0 {
					t.hit = append(t.hit, c.Rank)
				}
				t.hits[i][c.Rank] = uint32(n)
			}
		}
	}
	for _, c := range t.conts {
		t.has[c.Rank] = false
	}
	t.matched = append(t.matched[:0], matched...)
	for _, r := range t.hit {
		if overlap[r] == 0 {
			t.matched = append(t.matched, r)
		}
	}
	return t.matched
}

// host and disk are the last walk's lower-tier blocks of the rank at slot
// s: its host extension, and its disk and external ones together (Dynamo
// credits both at the disk weight).
func (t *lowerTiers) host(s uint32) uint64 { return uint64(t.hits[0][s]) }
func (t *lowerTiers) disk(s uint32) uint64 { return uint64(t.hits[1][s]) + uint64(t.hits[2][s]) }

// cachedTokens is the prompt tokens a rank's caches save, as Dynamo
// estimates them: its device blocks whole, its host blocks at
// host_cache_hit_weight, its disk ones at disk_cache_hit_weight, in
// blocks, times the block size, rounded; at most the prompt.
func cachedTokens(cfg *protocol.Config, device, host, disk, isl uint64) uint64 {
	if host == 0 && disk == 0 {
		return min(device*cfg.BlockSize, isl)
	}
	blocks := float64(device) + float64(cfg.HostCacheHitWeight*float64(host)) + float64(cfg.DiskCacheHitWeight*float64(disk))
	return min(uint64(math.Round(float64(blocks*float64(cfg.BlockSize)))), isl)
}
