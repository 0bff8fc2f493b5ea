package replay

import (
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// TestReplicasShareBookingsThroughTheSyncChannel: two router replicas, a
// request to each a millisecond apart, on two workers. When the first's
// booking reaches the second replica before the second request, that
// replica sees the first worker loaded and always picks the other; when
// the channel drops it, the second replica places blind, and breaks the tie
// onto the same worker for some seeds.
func TestReplicasShareBookingsThroughTheSyncChannel(t *testing.T) {
	workers := func(rate float64, seed uint64) [2]int {
		trace := []Request{
			{ID: "a", InputTokens: 4000, OutputTokens: 50},
			{ID: "b", Arrival: 1, InputTokens: 4000, OutputTokens: 50},
		}
		cfg := routerConfig(protocol.PolicyLeastLoaded)
		cfg.Seed = seed
		res, err := Run(trace, Options{Cluster: cluster.Default(2), Router: cfg,
			Replicas: Replicas{Count: 2, Assign: AssignRoundRobin, DelayMS: 0.5, Rate: rate}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.ends) != 2 {
			t.Fatalf("%d of 2 requests completed", len(res.ends))
		}
		return [2]int{res.ends[0].worker, res.ends[1].worker}
	}
	collided := false
	for seed := range uint64(16) {
		if w := workers(1, seed); w[0] == w[1] {
			t.Fatalf("seed %d: synced replicas put a and b both on worker %d", seed, w[0])
		}
		if w := workers(0, seed); w[0] == w[1] {
			collided = true
		}
	}
	if !collided {
		t.Fatal("blind replicas never put a and b on the same worker: the sync channel proves nothing")
	}
}

// TestLossySyncLeavesNoBooking: with half the bookings lost on the way, a
// replica that learned of one follows it to its end: when the replay ends,
// no replica books anything (Run checks it), and the hit rate is not below
// that of replicas that learn of nothing.
func TestLossySyncLeavesNoBooking(t *testing.T) {
	hit := func(rate float64) float64 {
		res, err := Run(Builtin(3, 120, 0, 512), Options{Cluster: cluster.Default(4), Router: routerConfig(protocol.PolicyKV),
			Replicas: Replicas{Count: 3, Assign: AssignRoundRobin, DelayMS: 5, Rate: rate}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Metrics.PrefixHitRate
	}
	if lossy, blind := hit(0.5), hit(0); lossy < blind-0.05 {
		t.Fatalf("hit rate %v with half the bookings synced, %v with none", lossy, blind)
	}
}
