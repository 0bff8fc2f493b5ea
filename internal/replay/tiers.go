package replay

import (
	"slices"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// TierMetrics are one lower tier's figures over a run: what the workers
// restored from it and what that cost, what the router credited it, and
// the credit it earned, so that a team sees whether Dynamo's default
// credits (host 0.75, disk 0.25) suit its hardware.
type TierMetrics struct {
	Tier string `json:"tier"`           // Dynamo's StorageTier name: host_pinned or disk
	Pool string `json:"pool,omitempty"` // its hardware pool's name, or its role disaggregated
	// HitBlocks are the requests' prompt blocks found in the tier past
	// those found above it, on the worker that first admitted them, and
	// RestoredTokens their tokens; HitRate is RestoredTokens over the
	// input tokens of the completed requests its workers admitted first
	// (the cluster's, or its pool's).
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

// tierGroup is workers whose tiers the report gives together: the whole
// cluster, a hardware pool, or, disaggregated, a role's pool.
type tierGroup struct {
	name string
	cfg  *cluster.Config
}

// tierGroups are the cluster's groups, and the group of each worker.
func (h *host) tierGroups() ([]tierGroup, func(w *simWorker) int) {
	switch {
	case len(h.opt.Cluster.Hardware) > 0:
		groups := make([]tierGroup, len(h.hardware))
		for k, wp := range h.hardware {
			groups[k] = tierGroup{wp.Name, wp.Config}
		}
		return groups, func(w *simWorker) int { return w.hardware }
	case h.opt.Cluster.Disaggregated():
		groups := make([]tierGroup, len(h.pools))
		for i, p := range h.pools {
			groups[i] = tierGroup{string(p.role), &h.opt.Cluster}
		}
		return groups, func(w *simWorker) int { return slices.Index(h.pools, w.pool) }
	}
	return []tierGroup{{"", &h.opt.Cluster}}, func(*simWorker) int { return 0 }
}

// tierMetrics are the cluster's lower tiers' figures: each tier's, or each
// group's tiers' (hardware pools, or a disaggregated cluster's roles), a
// tier's hit rate over the input tokens of the completed requests its
// group admitted first.
func (h *host) tierMetrics(trace []Request) []TierMetrics {
	groups, groupOf := h.tierGroups()
	var out []TierMetrics
	first := make([]int, len(groups)+1) // group k's tiers are out[first[k]:first[k+1]]
	for k, g := range groups {
		first[k] = len(out)
		c := g.cfg
		if len(c.Tiers()) == 0 {
			continue // and no profile to read, under the simple engine
		}
		prefill := float64(float64(c.BlockSize) * c.Profile.Step.PerPrefillTokenMS)
		blockBytes := float64(c.Profile.Model.KVBytesPerToken() * c.BlockSize)
		for _, t := range c.Tiers() {
			m := TierMetrics{Tier: t.Name, Pool: g.name, RouterCredit: h.opt.Router.DiskCacheHitWeight}
			if t.Name == protocol.TierHostPinned {
				m.RouterCredit = h.opt.Router.HostCacheHitWeight
			}
			if prefill > 0 {
				m.EarnedCredit = 1 - blockBytes/float64(t.ReadGBps*1e6)/prefill
			}
			out = append(out, m)
		}
	}
	first[len(groups)] = len(out)
	if len(out) == 0 {
		return nil
	}
	for _, w := range h.order {
		for i, n := range w.Counts().Tiers {
			m := &out[first[groupOf(w)]+i]
			m.RestoreMS += n.RestoreMS
			m.WriteStallMS += n.StallMS
			m.OffloadedBlocks += n.Offloaded
			m.EvictedBlocks += n.Evicted
		}
	}
	input := make([]uint64, len(groups))
	for i := range trace {
		r := h.byID[trace[i].ID]
		for _, p := range h.pools { // each of its placements once: its worker's group has it
			ph := r.phase(p)
			if ph.worker == nil {
				continue
			}
			k := groupOf(ph.worker)
			tiers := out[first[k]:first[k+1]]
			for j := range tiers {
				if tiers[j].Tier == protocol.TierHostPinned {
					tiers[j].RouterOverlapBlocks += ph.host
				} else {
					tiers[j].RouterOverlapBlocks += ph.disk
				}
			}
			if ph != &r.placement || r.rejected != "" {
				continue // a request's restores are its first worker's
			}
			input[k] += r.InputTokens
			for j := range tiers {
				tiers[j].HitBlocks += r.work.LowerHits[j]
			}
		}
	}
	for k := range groups {
		for i := first[k]; i < first[k+1]; i++ {
			t := &out[i]
			t.RestoredTokens = uint64(t.HitBlocks) * h.opt.Cluster.BlockSize
			if input[k] > 0 {
				t.HitRate = float64(t.RestoredTokens) / float64(input[k])
			}
		}
	}
	return out
}
