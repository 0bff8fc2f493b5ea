package replay

import (
	"bytes"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// TestApproximateModeSendsNoEvents: with kv_events off the host has no
// event stream: no observe is sent, the router applies no event, and
// still learns where prefixes went from its own placements.
func TestApproximateModeSendsNoEvents(t *testing.T) {
	cfg := routerConfig(protocol.PolicyKV)
	cfg.KVEvents = false
	var cmds bytes.Buffer
	res, err := Run(Builtin(1, 60, 0, 512), Options{Cluster: cluster.Default(4), Router: cfg, Commands: &cmds})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	if strings.Contains(cmds.String(), `"op":"observe"`) || m.EventsApplied != 0 || m.Mode != "approximate" {
		t.Fatalf("approximate mode: events_applied %d, mode %s, observe sent: %v", m.EventsApplied, m.Mode,
			strings.Contains(cmds.String(), `"op":"observe"`))
	}
	if m.Completed != m.Requests || m.RouterOverlapRate == 0 {
		t.Fatalf("completed %d of %d, router overlap rate %v", m.Completed, m.Requests, m.RouterOverlapRate)
	}
	events, err := Run(Builtin(1, 60, 0, 512), Options{Cluster: cluster.Default(4), Router: routerConfig(protocol.PolicyKV)})
	if err != nil {
		t.Fatal(err)
	}
	if events.Metrics.EventsApplied == 0 || events.Metrics.Mode != "kv_events" {
		t.Fatalf("with events: applied %d, mode %s", events.Metrics.EventsApplied, events.Metrics.Mode)
	}
}

// TestBusyRequestsAreRejectedNotFatal: a busy threshold without a queue
// turns requests away, as Dynamo answers HTTP 529; the replay counts them
// by reason and goes on. With a queue and a timeout they wait, and those
// that wait too long are rejected as queue_timeout.
func TestBusyRequestsAreRejectedNotFatal(t *testing.T) {
	cfg := routerConfig(protocol.PolicyKV)
	cfg.ActivePrefillTokensThreshold = ptr(100.0)
	res, err := Run(Builtin(2, 60, 0, 512), Options{Cluster: cluster.Default(2), Router: cfg})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	if m.Rejected == 0 || m.RejectedByReason["all_workers_busy"] != m.Rejected || m.Completed+m.Rejected != m.Requests {
		t.Fatalf("rejected %d %v, completed %d of %d", m.Rejected, m.RejectedByReason, m.Completed, m.Requests)
	}
	cfg.QueueThreshold, cfg.QueueTimeoutMS = ptr(0.0), ptr(50.0)
	cfg.ActivePrefillTokensThreshold = nil
	res, err = Run(Builtin(2, 60, 0, 512), Options{Cluster: cluster.Default(2), Router: cfg})
	if err != nil {
		t.Fatal(err)
	}
	m = res.Metrics
	if m.RejectedByReason["queue_timeout"] == 0 || m.Completed+m.Rejected != m.Requests {
		t.Fatalf("rejected %v, completed %d of %d", m.RejectedByReason, m.Completed, m.Requests)
	}
}

// TestClosedLoop: one session in flight at a time, so no two requests'
// lives overlap, sessions run in trace order, and each TTFT counts from
// when the request was sent (here: nothing queues, so TTFT is prefill).
func TestClosedLoop(t *testing.T) {
	trace := Builtin(4, 12, 0, 512)
	res, err := Run(trace, Options{Cluster: cluster.Default(4), Router: routerConfig(protocol.PolicyKV), Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics.Completed != len(trace) || res.Metrics.MeanQueueWaitMS != 0 {
		t.Fatalf("completed %d of %d, queue wait %v", res.Metrics.Completed, len(trace), res.Metrics.MeanQueueWaitMS)
	}
	for i := 1; i < len(res.ends); i++ {
		if res.ends[i].arrival < res.ends[i-1].done {
			t.Fatalf("request %d arrived at %v, before request %d ended at %v", i, res.ends[i].arrival, i-1, res.ends[i-1].done)
		}
	}
	two, err := Run(Builtin(4, 12, 0, 512), Options{Cluster: cluster.Default(4), Router: routerConfig(protocol.PolicyKV), Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if two.End() >= res.End() {
		t.Fatalf("two sessions in flight end at %v, not before one's %v", two.End(), res.End())
	}
}

// TestSpeedUp: arrivals count from the first and are divided by the
// ratio, and so are think times.
func TestSpeedUp(t *testing.T) {
	think := 300.0
	trace := []Request{{ID: "a", Arrival: 1000}, {ID: "b", Arrival: 1600}, {ID: "c", Session: "s", DelayMS: &think}}
	SpeedUp(trace, 2)
	if trace[0].Arrival != 0 || trace[1].Arrival != 300 || *trace[2].DelayMS != 150 || think != 300 {
		t.Fatalf("%+v %+v %v (the caller's delay: %v)", trace[0], trace[1], *trace[2].DelayMS, think)
	}
	// At ratio 1 too, a trace in epoch ms starts at 0 (times and figures
	// count from the first arrival).
	epoch := []Request{{ID: "a", Arrival: 1.7e12}, {ID: "b", Arrival: 1.7e12 + 5}}
	SpeedUp(epoch, 1)
	if epoch[0].Arrival != 0 || epoch[1].Arrival != 5 {
		t.Fatalf("%+v", epoch)
	}
}

// TestSyntheticPrefixGroups: with 2 groups and a half-shared prompt of 4
// blocks, every request's first 2 blocks are its group's, the rest its
// own; arrivals are one interval apart.
func TestSyntheticPrefixGroups(t *testing.T) {
	s := Synthetic{InputTokens: 2000, OutputTokens: 3, RequestCount: 20, ArrivalIntervalMS: 10, SharedPrefixRatio: 0.5, NumPrefixGroups: 2}
	reqs := s.Requests(1, 512)
	groups, own := map[[2]protocol.LocalBlockHash]int{}, map[protocol.LocalBlockHash]bool{}
	for i, r := range reqs {
		if len(r.HashIDs) != 4 || r.Arrival != float64(10*i) {
			t.Fatalf("request %d: %+v", i, r)
		}
		groups[[2]protocol.LocalBlockHash(r.HashIDs[:2])]++
		for _, h := range r.HashIDs[2:] {
			if own[h] {
				t.Fatalf("block %d is in two requests' own part", h)
			}
			own[h] = true
		}
	}
	if len(groups) != 2 {
		t.Fatalf("prefixes %v: want 2 groups", groups)
	}
	for _, r := range reqs {
		if own[r.HashIDs[0]] {
			t.Fatal("a shared block is also someone's own")
		}
	}
	flat := Synthetic{InputTokens: 2000, OutputTokens: 3, RequestCount: 3}
	if r := flat.Requests(1, 512); r[0].HashIDs[0] == r[1].HashIDs[0] {
		t.Fatal("no groups: nothing shared")
	}
}

// TestTraceFieldsReachTheRouter: parent_session_id, priority,
// strict_priority and role travel on the place command.
func TestTraceFieldsReachTheRouter(t *testing.T) {
	trace := `{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2], "session_id": "child", "parent_session_id": "root", "priority": 2.5, "strict_priority": 1, "role": "aggregated"}
`
	reqs, err := ReadMooncake(strings.NewReader(trace), 512)
	if err != nil {
		t.Fatal(err)
	}
	var cmds bytes.Buffer
	if _, err := Run(reqs, Options{Cluster: cluster.Default(1), Router: routerConfig(protocol.PolicyKV), Commands: &cmds}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"parent_session_id":"root"`, `"priority":2.5`, `"strict_priority":1`, `"role":"aggregated"`} {
		if !strings.Contains(cmds.String(), want) {
			t.Errorf("the place command lacks %s", want)
		}
	}
}

// TestRejectedTurnsKeepTheirTime: a turn the router turns away ends when it
// arrived (a refused command leaves the router's clock behind), so every
// later turn of the built-in workload still comes at least its 500 ms
// think time after the one before it.
func TestRejectedTurnsKeepTheirTime(t *testing.T) {
	cfg := routerConfig(protocol.PolicyKV)
	cfg.ActiveDecodeBlocksThreshold = ptr(0.001)
	trace := Builtin(5, 80, 0, 512)
	res, err := Run(trace, Options{Cluster: cluster.Default(2), Router: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics.Rejected == 0 {
		t.Fatal("nothing was rejected: the test proves nothing")
	}
	for i := 1; i < len(trace); i++ {
		if a, b := &trace[i-1], &trace[i]; a.Session == b.Session && b.Arrival-a.Arrival < 500 {
			t.Fatalf("%s arrived at %v, %v ms after %s", b.ID, b.Arrival, b.Arrival-a.Arrival, a.ID)
		}
	}
}

// TestLaterTurnFollowsThePreviousTurn: a turn with a delay follows the turn
// just before it in its session, not whichever of the session's turns ends
// first.
func TestLaterTurnFollowsThePreviousTurn(t *testing.T) {
	delay := 10.0
	trace := []Request{
		{ID: "a", Session: "s", Arrival: 0, InputTokens: 100, OutputTokens: 2},
		{ID: "b", Session: "s", Arrival: 5000, InputTokens: 100, OutputTokens: 2},
		{ID: "c", Session: "s", DelayMS: &delay, InputTokens: 100, OutputTokens: 2},
	}
	if _, err := Run(trace, Options{Cluster: cluster.Default(1), Router: routerConfig(protocol.PolicyKV)}); err != nil {
		t.Fatal(err)
	}
	if trace[2].Arrival < 5000 {
		t.Fatalf("the third turn arrived at %v, before the second (5000)", trace[2].Arrival)
	}
}

// TestRequestsWithNowhereToGoAreRefused: with a queue, a request of a role
// no worker has is refused at once as no_eligible_worker (Dynamo's
// NoEndpoints: the busy test finds no busy rank, so it is not queued), not
// left waiting, and its session goes on. (Catches: the request queued, to
// be cancelled at the end as waiting_at_end, as before this release.)
func TestRequestsWithNowhereToGoAreRefused(t *testing.T) {
	cfg := routerConfig(protocol.PolicyKV)
	cfg.QueueThreshold = ptr(1.0)
	delay := 10.0
	trace := []Request{
		{ID: "a", Session: "s", InputTokens: 100, OutputTokens: 2, Role: protocol.RolePrefill},
		{ID: "b", Session: "s", DelayMS: &delay, InputTokens: 100, OutputTokens: 2},
	}
	res, err := Run(trace, Options{Cluster: cluster.Default(1), Router: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Metrics; m.RejectedByReason["no_eligible_worker"] != 1 || m.RejectedByReason["waiting_at_end"] != 0 || m.Completed != 1 {
		t.Fatalf("rejected %v, completed %d", m.RejectedByReason, m.Completed)
	}
}

// TestDPRanksHaveTheirOwnCaches: with two DP ranks on one worker, round
// robin puts the same prompt twice on different ranks, whose caches are
// apart (no hit), where one rank hits the second time; each rank's events
// name it.
func TestDPRanksHaveTheirOwnCaches(t *testing.T) {
	trace := func() []Request {
		return []Request{
			{ID: "a", InputTokens: 1600, OutputTokens: 2, HashIDs: []protocol.LocalBlockHash{1, 2, 3, 4}},
			{ID: "b", Arrival: 10000, InputTokens: 1600, OutputTokens: 2, HashIDs: []protocol.LocalBlockHash{1, 2, 3, 4}},
		}
	}
	hitRate := func(dp int) (float64, string) {
		cc := cluster.Default(1)
		cc.DPSize = dp
		var cmds bytes.Buffer
		res, err := Run(trace(), Options{Cluster: cc, Router: routerConfig(protocol.PolicyRoundRobin), Commands: &cmds})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Metrics.WorkerRequests) != dp {
			t.Fatalf("dp %d: %d ranks in the report", dp, len(res.Metrics.WorkerRequests))
		}
		return res.Metrics.PrefixHitRate, cmds.String()
	}
	one, _ := hitRate(1)
	two, stream := hitRate(2)
	if one == 0 || two != 0 {
		t.Fatalf("hit rate %v with one rank (want > 0), %v with two (want 0)", one, two)
	}
	if !strings.Contains(stream, `"dp_size":2`) || !strings.Contains(stream, `"dp_rank":1`) {
		t.Fatal("the stream announces no second rank, or no event names it")
	}
}
