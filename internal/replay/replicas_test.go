package replay

import (
	"testing"

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
		res, err := Run(trace, Options{Cluster: DefaultCluster(2), Router: cfg,
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
