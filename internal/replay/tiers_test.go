package replay

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// tieredCluster is 4 workers with GPU caches small enough for the built-in
// workload to evict from, and a host tier of 400 blocks each.
func tieredCluster() cluster.Config {
	c := cluster.Default(4)
	c.KVTokens = 40 * 512
	c.HostTier = &cluster.TierConfig{KVTokens: 400 * 512, ReadGBps: cluster.DefaultHostGBps, WriteGBps: cluster.DefaultHostGBps}
	if err := c.SizeKV(); err != nil {
		panic(err)
	}
	return c
}

// TestHostTierRaisesTheHitRateAcrossTiers: on the built-in workload, a
// host tier under small GPU caches restores what they evicted: the hit
// rate counted across tiers rises above the GPU's alone, the restores cost
// step time, and the router, crediting host blocks, finds them on the
// ranks it chooses; with the credit off it places differently. The
// commands a tiered replay sent replay alone through serve to the same
// responses, tier events and all.
func TestHostTierRaisesTheHitRateAcrossTiers(t *testing.T) {
	trace := Builtin(3, 120, 0, 512)
	plain := tieredCluster()
	plain.HostTier = nil
	base, err := Run(slices.Clone(trace), Options{Cluster: plain, Router: routerConfig(protocol.PolicyKV)})
	if err != nil {
		t.Fatal(err)
	}
	if base.Metrics.Tiers != nil || base.Metrics.PrefixHitRateAcrossTiers != nil {
		t.Fatal("a cluster without tiers reports tier figures")
	}
	var cmds, resps bytes.Buffer
	res, err := Run(slices.Clone(trace), Options{Cluster: tieredCluster(), Router: routerConfig(protocol.PolicyKV), Commands: &cmds, Responses: &resps})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	if len(m.Tiers) != 1 {
		t.Fatalf("tiers %+v", m.Tiers)
	}
	host := m.Tiers[0]
	if across := *m.PrefixHitRateAcrossTiers; !(across > m.PrefixHitRate+0.05) || !(across > base.Metrics.PrefixHitRate+0.05) {
		t.Errorf("hit rate across tiers %.3f, GPU alone %.3f, without the tier %.3f", across, m.PrefixHitRate, base.Metrics.PrefixHitRate)
	}
	if math.Abs(*m.PrefixHitRateAcrossTiers-m.PrefixHitRate-host.HitRate) > 1e-12 {
		t.Errorf("across tiers %v is not the GPU's %v and the host's %v", *m.PrefixHitRateAcrossTiers, m.PrefixHitRate, host.HitRate)
	}
	if host.Tier != protocol.TierHostPinned || host.HitBlocks == 0 || host.RestoredTokens != uint64(host.HitBlocks)*512 ||
		!(host.RestoreMS > 0) || host.OffloadedBlocks == 0 || host.RouterOverlapBlocks == 0 || host.RouterCredit != 0.75 {
		t.Errorf("host tier %+v", host)
	}
	// 512 tokens of Llama-3.1-8B's 131,072 bytes each at 14 GB/s load in
	// 4.79 ms; their prefill takes 512 × 0.017251 ms.
	if want := 1 - 512*131072/14e6/(512*0.017251); math.Abs(host.EarnedCredit-want) > 1e-9 {
		t.Errorf("earned credit %v, want %v", host.EarnedCredit, want)
	}
	if !strings.Contains(cmds.String(), `"storage_tier":"host_pinned"`) {
		t.Fatal("no host tier event reached the router")
	}
	replaysAlone(t, cmds.String(), resps.String())
	off := routerConfig(protocol.PolicyKV)
	off.HostCacheHitWeight = 0
	blind, err := Run(slices.Clone(trace), Options{Cluster: tieredCluster(), Router: off})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(blind.Metrics.WorkerRequests, m.WorkerRequests) && blind.Metrics.Tiers[0].RouterOverlapBlocks == host.RouterOverlapBlocks {
		t.Error("the host credit off placed as it on did")
	}
	if blind.Metrics.Tiers[0].RouterCredit != 0 {
		t.Errorf("credit off reports %v", blind.Metrics.Tiers[0].RouterCredit)
	}
}
