package replay

import "github.com/offline-router/offline-router/internal/protocol"

// TierMetrics are one lower tier's figures over a run: what the workers
// restored from it and what that cost, what the router credited it, and
// the credit it earned, so that a team sees whether Dynamo's default
// credits (host 0.75, disk 0.25) suit its hardware.
type TierMetrics struct {
	Tier string `json:"tier"`           // Dynamo's StorageTier name: host_pinned or disk
	Pool string `json:"pool,omitempty"` // its hardware pool's name, with hardware pools
	// HitBlocks are the requests' prompt blocks found in the tier past
	// those found above it, on the worker that first admitted them, and
	// RestoredTokens their tokens; HitRate is RestoredTokens over the
	// input tokens prefix_hit_rate counts.
	HitBlocks      int     `json:"hit_blocks"`
	RestoredTokens uint64  `json:"restored_tokens"`
	HitRate        float64 `json:"hit_rate"`
	// RestoreMS is the step time the workers waited for loads from the
	// tier (every load, a preempted request's again too), and
	// WriteStallMS the time steps waited past their compute for writes
	// into it (write on evict, its link behind the evictions).
	RestoreMS    float64 `json:"restore_ms"`
	WriteStallMS float64 `json:"write_stall_ms"`
	// OffloadedBlocks were written into the tier, EvictedBlocks dropped
	// from it for room (to the tier below, if any).
	OffloadedBlocks int `json:"offloaded_blocks"`
	EvictedBlocks   int `json:"evicted_blocks"`
	// RouterOverlapBlocks are the tier's blocks past the device prefix the
	// router found on the ranks it chose, summed over its placements;
	// RouterCredit the weight it credited each at (host_cache_hit_weight,
	// or disk_cache_hit_weight).
	RouterOverlapBlocks uint64  `json:"router_overlap_blocks"`
	RouterCredit        float64 `json:"router_credit"`
	// EarnedCredit is the share of a block's prefill a restore saves: 1 −
	// (a block's load) / (its tokens' prefill by the engine profile). A
	// credit above it overrates the tier; below 0, loading costs more than
	// computing.
	EarnedCredit float64 `json:"earned_credit"`
}

// label names the tier in the table and the summaries: its tier, after
// its pool's name with hardware pools.
func (m *TierMetrics) label() string {
	if m.Pool == "" {
		return m.Tier
	}
	return m.Pool + " " + m.Tier
}

// tierMetrics are the cluster's lower tiers' figures: each tier's, or,
// with hardware pools, each pool's tiers'.
func (h *host) tierMetrics(trace []Request) []TierMetrics {
	var out []TierMetrics
	first := make([]int, len(h.hardware)) // each pool's first tier in out
	for k, wp := range h.hardware {
		c := wp.Config
		first[k] = len(out)
		if len(c.Tiers()) == 0 {
			continue // and no profile to read, under the simple engine
		}
		prefill := float64(float64(c.BlockSize) * c.Profile.Step.PerPrefillTokenMS)
		blockBytes := float64(c.Profile.Model.KVBytesPerToken() * c.BlockSize)
		for _, t := range c.Tiers() {
			m := TierMetrics{Tier: t.Name, Pool: wp.Name, RouterCredit: h.opt.Router.DiskCacheHitWeight}
			if t.Name == protocol.TierHostPinned {
				m.RouterCredit = h.opt.Router.HostCacheHitWeight
			}
			if prefill > 0 {
				m.EarnedCredit = 1 - blockBytes/float64(t.ReadGBps*1e6)/prefill
			}
			out = append(out, m)
		}
	}
	for _, w := range h.order {
		for i, n := range w.Counts().Tiers {
			m := &out[first[w.hardware]+i]
			m.RestoreMS += n.RestoreMS
			m.WriteStallMS += n.StallMS
			m.OffloadedBlocks += n.Offloaded
			m.EvictedBlocks += n.Evicted
		}
	}
	for i := range trace {
		r := h.byID[trace[i].ID]
		if r.worker == nil {
			continue
		}
		k := r.worker.hardware
		tiers := out[first[k]:]
		if k+1 < len(first) {
			tiers = out[first[k]:first[k+1]]
		}
		for j := range tiers {
			tiers[j].HitBlocks += r.work.LowerHits[j]
			if tiers[j].Tier == protocol.TierHostPinned {
				tiers[j].RouterOverlapBlocks += r.host
			} else {
				tiers[j].RouterOverlapBlocks += r.disk
			}
		}
	}
	for i := range out {
		out[i].RestoredTokens = uint64(out[i].HitBlocks) * h.opt.Cluster.BlockSize
	}
	return out
}
