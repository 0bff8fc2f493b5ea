package replay

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// experiment is a comparison on the built-in workload: each policy a
// contender, the first ones' names as given.
func experiment(sessions, repeats int, baseline string, contenders ...Contender) *Experiment {
	cfg := protocol.DefaultConfig()
	cfg.BlockSize = 512
	e := &Experiment{Workload: Workload{BuiltinSessions: sessions, ArrivalSpeedupRatio: 1}, Cluster: cluster.Default(4),
		Router: cfg, Goodput: SLO{TTFTMS: 60}, Repeats: repeats, Baseline: baseline, Jobs: 2}
	for _, c := range contenders {
		r := cfg
		r.Policy = c.Router.Policy
		e.Contenders = append(e.Contenders, Contender{Name: c.Name, Router: r})
	}
	return e
}

func policy(name string, p protocol.Policy) Contender {
	return Contender{Name: name, Router: protocol.Config{Policy: p}}
}

func runExperiment(t *testing.T, e *Experiment) *Report {
	t.Helper()
	trace, info, err := e.Load()
	if err != nil {
		t.Fatal(err)
	}
	rep, _, err := e.Run(context.Background(), trace, info)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestVersusAtFullSampleIsTheReport: a ratio's point value is the report's
// own metrics' ratio, to the bit (one repeat), so the bootstrap reads the
// same requests as the metrics. Catches rows that count rejected or
// unfinished requests, or a percentile other than the report's.
func TestVersusAtFullSampleIsTheReport(t *testing.T) {
	rep := runExperiment(t, experiment(40, 1, "round_robin", policy("kv", protocol.PolicyKV), policy("round_robin", protocol.PolicyRoundRobin)))
	d := &rep.Deterministic
	kv, rr := &d.Policies[0], &d.Policies[1]
	want := map[string]float64{"mean_ttft_ms": kv.MeanTTFTMS / rr.MeanTTFTMS, "p99_ttft_ms": kv.P99TTFTMS / rr.P99TTFTMS,
		"request_goodput": *kv.RequestGoodput / *rr.RequestGoodput, "prefix_hit_rate": kv.PrefixHitRate / rr.PrefixHitRate}
	if len(d.Contenders[0].Versus) != len(want) || d.Contenders[1].Versus != nil {
		t.Fatalf("versus: %+v and %+v", d.Contenders[0].Versus, d.Contenders[1].Versus)
	}
	for _, v := range d.Contenders[0].Versus {
		if v.Ratio != want[v.Metric] {
			t.Errorf("%s: ratio %v, the report's %v", v.Metric, v.Ratio, want[v.Metric])
		}
		if !(v.CI95[0] <= v.Ratio && v.Ratio <= v.CI95[1]) {
			t.Errorf("%s: ratio %v outside its interval %v", v.Metric, v.Ratio, v.CI95)
		}
	}
	if len(d.Verdicts) != 4 || !strings.HasPrefix(d.Verdicts[0], "kv ") {
		t.Errorf("verdicts %q", d.Verdicts)
	}
}

// TestVersusOfItselfTies: a contender that runs the baseline's config
// under another name has ratio 1 and interval [1, 1] on every metric, a
// tie: both are weighed by the same resample. Catches resamples drawn
// apart for the two (the interval would open), and a verdict that is not
// a tie at 1.
func TestVersusOfItselfTies(t *testing.T) {
	rep := runExperiment(t, experiment(30, 2, "round_robin", policy("round_robin", protocol.PolicyRoundRobin), policy("again", protocol.PolicyRoundRobin)))
	for _, v := range rep.Deterministic.Contenders[1].Versus {
		if v.Ratio != 1 || v.CI95 != [2]float64{1, 1} || v.Verdict != "tie" {
			t.Errorf("%s: %+v, want a tie at 1 [1, 1]", v.Metric, v)
		}
	}
	if got := rep.Deterministic.Verdicts[0]; got != "again and round_robin tie on mean TTFT (+0.0% [+0.0, +0.0])" {
		t.Errorf("verdict %q", got)
	}
}

// TestRepeatsAreSeedPlusK: repeat k is the run of seed + k, for the
// router and the built-in workload alike, and the report is the same for
// any number of jobs. Catches another seed rule, a workload not made
// again at each repeat, and an order that depends on which run ends first.
func TestRepeatsAreSeedPlusK(t *testing.T) {
	e := experiment(20, 3, "round_robin", policy("kv", protocol.PolicyKV), policy("round_robin", protocol.PolicyRoundRobin))
	e.Router.Seed = 5
	rep := runExperiment(t, e)
	d := &rep.Deterministic
	if d.Repeats != 3 || len(d.Seeds) != 3 || d.Seeds[2] != 7 {
		t.Fatalf("repeats %d, seeds %v", d.Repeats, d.Seeds)
	}
	one := experiment(20, 1, "", policy("kv", protocol.PolicyKV))
	one.Router.Seed = 7
	alone := runExperiment(t, one).Deterministic.Policies[0]
	if got := d.Contenders[0].Repeats[2]; got.MeanTTFTMS != alone.MeanTTFTMS || got.Requests != alone.Requests {
		t.Errorf("repeat 2 of seed 5: %v ms over %d requests; the run of seed 7: %v over %d", got.MeanTTFTMS, got.Requests, alone.MeanTTFTMS, alone.Requests)
	}
	if d.Contenders[0].Repeats[0].MeanTTFTMS != d.Policies[0].MeanTTFTMS {
		t.Error("repeat 0 is not the report's policies entry")
	}
	for _, jobs := range []int{1, 5} {
		e.Jobs = jobs
		again := runExperiment(t, e)
		a, _ := (&Report{Deterministic: rep.Deterministic}).Encode()
		b, _ := (&Report{Deterministic: again.Deterministic}).Encode()
		if !bytes.Equal(a, b) {
			t.Errorf("jobs %d: the report's deterministic part differs from jobs 2's", jobs)
		}
	}
}

// TestMeanInterval is Student's t by hand: 1, 2, 3 has mean 2, standard
// deviation 1, half-width 4.303 / sqrt(3). Catches the population's
// deviation (n, not n - 1), a normal quantile, the wrong degrees of freedom.
func TestMeanInterval(t *testing.T) {
	e := MeanInterval([]float64{1, 2, 3})
	half := 4.303 / math.Sqrt(3)
	if e.Mean != 2 || e.CI95 == nil || math.Abs(e.CI95[0]-(2-half)) > 1e-12 || math.Abs(e.CI95[1]-(2+half)) > 1e-12 {
		t.Errorf("MeanInterval(1, 2, 3) = %v %v, want 2 ± %v", e.Mean, e.CI95, half)
	}
	if e := MeanInterval([]float64{4}); e.Mean != 4 || e.CI95 != nil {
		t.Errorf("one value: %+v, want no interval", e)
	}
	if tCritical(31) != 2.042 || tCritical(44) != 2.021 || tCritical(5000) != 1.962 {
		t.Error("the table past 30 degrees of freedom takes the entry at or below")
	}
}

// TestWeightedPercentileIsNumpys: the bootstrap's percentile of rows
// counted by weight is numpy's percentile of the rows repeated that many
// times. Catches an off-by-one rank, a zero weight counted, the
// interpolation taken within one row.
func TestWeightedPercentileIsNumpys(t *testing.T) {
	rng := splitmix64(1)
	for trial := range 300 {
		n := 1 + int(rng.below(12))
		rows := make([]bootRow, n)
		w := make([]uint32, n)
		var expanded []float64
		for i := range rows {
			rows[i] = bootRow{cluster: int32(i), completed: true, ttft: float64(rng.below(20))}
			w[i] = uint32(rng.below(4))
			for range w[i] {
				expanded = append(expanded, rows[i].ttft)
			}
		}
		if len(expanded) == 0 {
			continue
		}
		s := newBootSet(rows, 1, n)
		sorted := slices.Sorted(slices.Values(expanded))
		for _, p := range []float64{0, 2.5, 50, 90, 99, 100} {
			got := s.percentile(w, float64(len(expanded)), p)
			if want := numpyPercentile(sorted, p); got != want {
				t.Fatalf("trial %d, p%v of %v weighed %v: %v, numpy gives %v", trial, p, rows, w, got, want)
			}
		}
	}
}

// TestVerdictLine words each case as the issue gives them.
func TestVerdictLine(t *testing.T) {
	for _, c := range []struct {
		v    Versus
		want string
	}{
		{Versus{Ratio: 0.77, CI95: [2]float64{0.73, 0.81}, Better: "lower", Verdict: "better"}, "kv beats round_robin on p99 TTFT by 23.0% [19.0, 27.0]"},
		{Versus{Ratio: 0.992, CI95: [2]float64{0.976, 1.009}, Better: "lower", Verdict: "tie"}, "kv and round_robin tie on p99 TTFT (-0.8% [-2.4, +0.9])"},
		{Versus{Ratio: 1.1, CI95: [2]float64{1.05, 1.2}, Better: "lower", Verdict: "worse"}, "kv loses to round_robin on p99 TTFT by 10.0% [5.0, 20.0]"},
		{Versus{Ratio: 0.9, CI95: [2]float64{0.8, 0.95}, Better: "higher", Verdict: "worse"}, "kv loses to round_robin on p99 TTFT by 10.0% [5.0, 20.0]"},
		// An upper bound a hair below 1 prints as 0.0: no difference shown, a tie.
		{Versus{Ratio: 0.993, CI95: [2]float64{0.926, 0.99996}, Better: "lower", Verdict: "tie"}, "kv and round_robin tie on p99 TTFT (-0.7% [-7.4, +0.0])"},
	} {
		if got := verdictLine("kv", "round_robin", "p99 TTFT", c.v); got != c.want {
			t.Errorf("%+v: %q, want %q", c.v, got, c.want)
		}
		v := c.v
		judge(&v, v.Better == "lower")
		if v.Verdict != c.v.Verdict {
			t.Errorf("%+v judged %s", c.v, v.Verdict)
		}
	}
}

// TestPoolSummary: disaggregated, each pool's figures get the repeats' mean
// and interval too. Catches a pool summary left out, taken from one
// repeat, or keyed by another role.
func TestPoolSummary(t *testing.T) {
	e := experiment(20, 2, "", policy("kv", protocol.PolicyKV))
	e.Cluster.Workers, e.Cluster.PrefillWorkers, e.Cluster.DecodeWorkers, e.Cluster.KVTransferGBps = 2, 2, 2, 50
	c := runExperiment(t, e).Deterministic.Contenders[0]
	if len(c.Repeats) != 2 || len(c.Repeats[0].Pools) != 2 {
		t.Fatalf("%d repeats, %d pools", len(c.Repeats), len(c.Repeats[0].Pools))
	}
	for k, role := range []string{"prefill", "decode"} {
		want := float64(c.Repeats[0].Pools[k].Completed+c.Repeats[1].Pools[k].Completed) / 2
		if got := c.PoolSummary[role]["completed"]; got.Mean != want || got.CI95 == nil {
			t.Errorf("%s: completed %+v, want the mean %v with an interval", role, got, want)
		}
	}
}
