package replay

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// mixedCluster is 2 H100 and 2 A100 workers serving Llama-3.1-8B, each
// pool's cache from its profile's memory, the A100s' set smaller.
func mixedCluster(t *testing.T) cluster.Config {
	t.Helper()
	c := cluster.Default(0)
	for _, p := range []struct {
		name, profile string
		kv            uint64
	}{{"h100", "llama-3.1-8b-instruct-h100-tp1-vllm-0.8.4", 0}, {"a100", "llama-3.1-8b-instruct-a100-80-tp1-vllm-0.8.4", 100 * 512}} {
		prof, ok := cluster.ShippedProfile(p.profile)
		if !ok {
			t.Fatal(p.profile)
		}
		h := cluster.Hardware{Name: p.name, Workers: 2, Profile: &prof, KVSizing: cluster.KVSizingProfile, GPUMemoryUtilization: 0.9,
			MaxNumSeqs: 64, MaxNumBatchedTokens: 8192}
		if p.kv > 0 {
			h.KVSizing, h.KVTokens = cluster.KVSizingTokens, p.kv
		}
		c.Hardware = append(c.Hardware, h)
	}
	if err := c.SizeKV(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHardwarePoolsReportEach: a cluster of two hardware pools announces
// each worker with its own pool's cache, runs each pool's steps by its own
// profile, and reports each pool: under round_robin the pools share the
// load evenly, and the A100s, 2.8 times slower a step, take longer to the
// first token; their shares and counts add up to the cluster's.
func TestHardwarePoolsReportEach(t *testing.T) {
	c := mixedCluster(t)
	if c.Workers != 4 || c.Hardware[1].TotalKVBlocks != 100 || !(c.Hardware[1].RelativeSpeed < 0.4) {
		t.Fatalf("cluster %d workers, pools %+v", c.Workers, c.Hardware)
	}
	var cmds bytes.Buffer
	res, err := Run(Builtin(5, 60, 0, 512), Options{Cluster: c, Router: routerConfig(protocol.PolicyRoundRobin), Commands: &cmds})
	if err != nil {
		t.Fatal(err)
	}
	for id, blocks := range []int{c.Hardware[0].TotalKVBlocks, c.Hardware[0].TotalKVBlocks, 100, 100} {
		ready := fmt.Sprintf(`"op":"worker_ready","now_ms":0,"worker_id":%d,"total_kv_blocks":%d,`, id+1, blocks)
		if !strings.Contains(cmds.String(), ready) {
			t.Errorf("no %s", ready)
		}
	}
	m := res.Metrics
	hw := m.Hardware
	if len(hw) != 2 || hw[0].Pool != "h100" || hw[1].Profile != "llama-3.1-8b-instruct-a100-80-tp1-vllm-0.8.4" {
		t.Fatalf("hardware %+v", hw)
	}
	if hw[0].Completed+hw[1].Completed != m.Completed || math.Abs(hw[0].RequestShare+hw[1].RequestShare-1) > 1e-12 ||
		math.Abs(hw[0].RequestShare-0.5) > 0.05 {
		t.Errorf("completed %d + %d of %d, shares %v, %v", hw[0].Completed, hw[1].Completed, m.Completed, hw[0].RequestShare, hw[1].RequestShare)
	}
	if !(hw[1].MeanTTFTMS > 1.5*hw[0].MeanTTFTMS) || !(hw[1].MeanBusyShare > hw[0].MeanBusyShare) {
		t.Errorf("A100 TTFT %.1f ms, busy %.3f; H100 %.1f ms, %.3f", hw[1].MeanTTFTMS, hw[1].MeanBusyShare, hw[0].MeanTTFTMS, hw[0].MeanBusyShare)
	}
	// A homogeneous cluster reports no hardware pools.
	plain, err := Run(Builtin(5, 60, 0, 512), Options{Cluster: cluster.Default(4), Router: routerConfig(protocol.PolicyRoundRobin)})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Metrics.Hardware != nil || slices.ContainsFunc(c.WorkerPools(), func(p cluster.WorkerPool) bool { return p.Config.Hardware != nil }) {
		t.Error("hardware figures without hardware pools, or a pool's config with pools of its own")
	}
}

// TestHardwarePoolsTiersCountEachRequestOnce: with a host tier on each of
// two hardware pools, each pool's tier counts its own requests' restored
// blocks once: every one of them was loaded (512 tokens of 128 KiB at 14
// GB/s), a preempted request's perhaps again, so the restore time is at
// least the blocks' loads.
func TestHardwarePoolsTiersCountEachRequestOnce(t *testing.T) {
	c := mixedCluster(t)
	for i := range c.Hardware {
		c.Hardware[i].KVSizing, c.Hardware[i].KVTokens = cluster.KVSizingTokens, 40*512
		c.Hardware[i].HostTier = &cluster.TierConfig{KVTokens: 400 * 512, ReadGBps: cluster.DefaultHostGBps, WriteGBps: cluster.DefaultHostGBps}
	}
	if err := c.SizeKV(); err != nil {
		t.Fatal(err)
	}
	res, err := Run(Builtin(3, 120, 0, 512), Options{Cluster: c, Router: routerConfig(protocol.PolicyKV)})
	if err != nil {
		t.Fatal(err)
	}
	tiers := res.Metrics.Tiers
	if len(tiers) != 2 || tiers[0].Pool != "h100" || tiers[1].Pool != "a100" {
		t.Fatalf("tiers %+v", tiers)
	}
	for _, tier := range tiers {
		if tier.HitBlocks == 0 || tier.RestoreMS < float64(tier.HitBlocks)*512*131072/14e6-1e-6 {
			t.Errorf("%s: %d blocks restored in %v ms", tier.Pool, tier.HitBlocks, tier.RestoreMS)
		}
	}
}
