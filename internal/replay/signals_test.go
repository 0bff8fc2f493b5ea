package replay

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/engine"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// runSignals replays the built-in workload on 4 small-cache workers
// through the event channel s, keeping the streams.
func runSignals(t *testing.T, s Signals) (*Result, string, string) {
	t.Helper()
	c := cluster.Default(4)
	c.TotalKVBlocks = 60
	var cmds, resps bytes.Buffer
	res, err := Run(Builtin(2, 150, 0, 512), Options{Cluster: c, Router: routerConfig(protocol.PolicyKV), Signals: s, Commands: &cmds, Responses: &resps})
	if err != nil {
		t.Fatal(err)
	}
	return res, cmds.String(), resps.String()
}

// TestEventChannelFaults: a channel that loses events shows it in the
// router's evidence (gaps in the event ids), and the hit rate falls as the
// router sends requests where their blocks are gone or away from where they
// are; duplicates show as repeats, a restart as one repeat (its cleared,
// numbered 1), and a zero channel is the perfect one byte for byte. Every
// faulty stream replays alone through serve to the same responses.
func TestEventChannelFaults(t *testing.T) {
	clean, cleanCmds, cleanResps := runSignals(t, Signals{})
	zero, zeroCmds, zeroResps := runSignals(t, Signals{LossRate: 0, DelayMS: 0})
	if zeroCmds != cleanCmds || zeroResps != cleanResps || deref(zero.Metrics.EventsLost) != 0 {
		t.Fatal("a channel of no faults is not the perfect one")
	}
	lossy, cmds, resps := runSignals(t, Signals{LossRate: 0.3})
	m := lossy.Metrics
	if deref(m.EventsLost) == 0 || deref(m.EventIDGaps) == 0 || !(m.PrefixHitRate < clean.Metrics.PrefixHitRate) {
		t.Errorf("lost %d events, %d gaps; hit rate %.3f against %.3f clean", deref(m.EventsLost), deref(m.EventIDGaps), m.PrefixHitRate, clean.Metrics.PrefixHitRate)
	}
	if m.EventsApplied >= clean.Metrics.EventsApplied {
		t.Errorf("%d events applied through a lossy channel, %d clean", m.EventsApplied, clean.Metrics.EventsApplied)
	}
	replaysAlone(t, cmds, resps)
	dup, cmds, resps := runSignals(t, Signals{DupRate: 0.2, ReorderWindowMS: 0})
	if deref(dup.Metrics.EventsDuplicated) == 0 || deref(dup.Metrics.EventIDRepeats) != deref(dup.Metrics.EventsDuplicated) || deref(dup.Metrics.EventIDGaps) != 0 {
		t.Errorf("%d duplicated, %d repeats, %d gaps", deref(dup.Metrics.EventsDuplicated), deref(dup.Metrics.EventIDRepeats), deref(dup.Metrics.EventIDGaps))
	}
	replaysAlone(t, cmds, resps)
	resent, _, _ := runSignals(t, Signals{DupRate: 0.3, DupLagMS: 5000})
	if !(resent.Metrics.PrefixHitRate < clean.Metrics.PrefixHitRate) || deref(resent.Metrics.EventIDRepeats) == 0 {
		t.Errorf("copies resent 5 s later: hit rate %.4f against %.4f clean, %d repeats", resent.Metrics.PrefixHitRate, clean.Metrics.PrefixHitRate, deref(resent.Metrics.EventIDRepeats))
	}
	late, cmds, _ := runSignals(t, Signals{DelayMS: 20, ReorderWindowMS: 40})
	if deref(late.Metrics.EventIDRepeats) == 0 || deref(late.Metrics.EventsLost) != 0 {
		t.Errorf("late and reordered: %d repeats, %d applied", deref(late.Metrics.EventIDRepeats), late.Metrics.EventsApplied)
	}
	if !strings.Contains(cmds, `"op":"observe","now_ms":20`) {
		t.Error("no event came late")
	}
	restart, cmds, resps := runSignals(t, Signals{Restarts: []Restart{{Worker: 2, AtMS: 20000}}})
	if deref(restart.Metrics.EventIDRepeats) != 1 || !strings.Contains(cmds, `"worker_id":2,"storage_tier":"device","event":{"event_id":1,"dp_rank":0,"data":"cleared"`) {
		t.Errorf("restart: %d repeats; a cleared numbered 1 from worker 2: %v", deref(restart.Metrics.EventIDRepeats), strings.Contains(cmds, `"cleared"`))
	}
	replaysAlone(t, cmds, resps)
	if _, err := Run(Builtin(2, 5, 0, 512), Options{Cluster: cluster.Default(2), Router: routerConfig(protocol.PolicyKV),
		Signals: Signals{Restarts: []Restart{{Worker: 3}}}}); err == nil || !strings.Contains(err.Error(), "worker 3") {
		t.Errorf("a restart of a worker the cluster has not: %v", err)
	}
}

// replaysAlone requires the command stream to replay through serve to the
// response stream.
func replaysAlone(t *testing.T, cmds, resps string) {
	t.Helper()
	eng, _ := engine.New(protocol.DefaultConfig())
	var served bytes.Buffer
	configure := wire.ConfigSource{}.Configure(func(c protocol.Config) (wire.Stepper, error) { return engine.New(c) })
	if _, err := wire.Serve(strings.NewReader(cmds), &served, eng, wire.ServeOptions{Configure: configure}); err != nil {
		t.Fatal(err)
	}
	if served.String() != resps {
		t.Fatal("the stream does not replay alone")
	}
}

// TestParseRestart: WORKER@MS, each part in range.
func TestParseRestart(t *testing.T) {
	if r, err := ParseRestart("3@1500.5"); err != nil || r != (Restart{Worker: 3, AtMS: 1500.5}) {
		t.Errorf("3@1500.5: %+v %v", r, err)
	}
	for _, bad := range []string{"3", "0@5", "x@5", "3@-1", "3@NaN", "3@1e300"} {
		if _, err := ParseRestart(bad); err == nil {
			t.Errorf("%q read", bad)
		}
	}
}

// TestRobustnessAgainstTheCleanRun: under a fault of no intensity every
// contender's change is none, exactly (the faulty run is the clean run
// byte for byte); under loss, kv's hit rate falls and the gaps show, while
// round_robin, which reads no events, is unchanged.
func TestRobustnessAgainstTheCleanRun(t *testing.T) {
	c := cluster.Default(4)
	c.TotalKVBlocks = 60
	e := &Experiment{Workload: Workload{BuiltinSessions: 150, ArrivalSpeedupRatio: 1}, Cluster: c, Router: routerConfig(protocol.PolicyKV), Repeats: 2, Jobs: 2,
		Contenders: []Contender{{Name: "kv", Router: routerConfig(protocol.PolicyKV)}, {Name: "round_robin", Router: routerConfig(protocol.PolicyRoundRobin)}}}
	trace, info, err := e.Load()
	if err != nil {
		t.Fatal(err)
	}
	clean, _, err := e.Run(context.Background(), trace, info)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Robustness(context.Background(), trace, info, clean, []Fault{{Name: "none"}, {Name: "lossy", Signals: Signals{LossRate: 0.3}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, fc := range r.Faults[0].Contenders {
		if fc.PrefixHitRate.Mean != 0 || fc.MeanTTFT.Mean != 1 || fc.P99TTFT.Mean != 1 || *fc.MeanTTFT.CI95 != [2]float64{1, 1} || fc.EventIDGaps != 0 {
			t.Errorf("no fault, %s: %+v", fc.Contender, fc)
		}
	}
	kv, rr := r.Faults[1].Contenders[0], r.Faults[1].Contenders[1]
	if !(kv.PrefixHitRate.Mean < 0) || kv.EventsLost == 0 || kv.EventIDGaps == 0 {
		t.Errorf("lossy kv: %+v", kv)
	}
	if rr.PrefixHitRate.Mean != 0 || rr.MeanTTFT.Mean != 1 {
		t.Errorf("lossy round_robin: %+v", rr)
	}
	var out strings.Builder
	if err := WriteRobustnessTable(&out, r, false); err != nil || !strings.Contains(out.String(), "lossy") {
		t.Errorf("table: %v\n%s", err, out.String())
	}
	f := RobustnessFaults(trace, 4, false)
	if len(f) != 5 || len(f[4].Signals.Restarts) != 4 || f[4].Signals.Restarts[3].Worker != 4 {
		t.Fatalf("faults %+v", f)
	}
	// The restarts spread over the arrivals as they will be, later turns
	// after their delays: the last after the last session's first turn.
	starts, at := 0.0, estimatedArrivals(trace)
	for i := range trace {
		if trace[i].DelayMS == nil {
			starts = max(starts, trace[i].Arrival)
		}
	}
	if last := f[4].Signals.Restarts[3].AtMS; !(last > starts && last < slices.Max(at)) || f[4].Signals.Restarts[0].AtMS < 0 {
		t.Errorf("restarts %+v, the last session starting at %v, the last arrival at %v", f[4].Signals.Restarts, starts, slices.Max(at))
	}
	if len(RobustnessFaults(trace, 4, true)) != 4 {
		t.Error("a closed loop has restarts placed")
	}
}
