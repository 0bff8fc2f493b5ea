package replay

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
)

// Estimate is a metric's mean across repeats and its 95% Student-t
// interval (none with one repeat).
type Estimate struct {
	Mean float64     `json:"mean"`
	CI95 *[2]float64 `json:"ci95" jsonschema:"nullable"`
}

// Versus is a contender against the baseline on one metric: the ratio of
// its value to the baseline's, on the requests of every repeat pooled, and
// the 95% interval of that ratio from a paired bootstrap over sessions.
type Versus struct {
	Metric string     `json:"metric"` // a metric's JSON key
	Ratio  float64    `json:"ratio"`
	CI95   [2]float64 `json:"ci95"`
	// Better is the metric's good direction (lower or higher); Verdict is
	// better, worse or tie (the interval holds 1).
	Better  string `json:"better"`
	Verdict string `json:"verdict"`
}

// ContenderReport is one contender of a comparison: what it ran and, beside
// the baseline, by how much it differs.
type ContenderReport struct {
	Name      string   `json:"name"`
	Policy    string   `json:"policy"`
	Overrides []string `json:"overrides"` // config keys it sets over the router's, KEY=VALUE as given
	// Repeats are each repeat's metrics, repeat 0 (the report's policies
	// entry) first, when there are several; Summary their mean and
	// interval, by metric.
	Repeats []Metrics           `json:"repeats,omitempty"`
	Summary map[string]Estimate `json:"summary,omitempty"`
	// PoolSummary is the same of each pool's figures, by role, when
	// prefill and decode are disaggregated.
	PoolSummary map[string]map[string]Estimate `json:"pool_summary,omitempty"`
	// ClassSummary is the same of each policy class's figures, by class,
	// when the router's config has policy classes.
	ClassSummary map[string]map[string]Estimate `json:"class_summary,omitempty"`
	// HardwareSummary is the same of each hardware pool's figures, by
	// pool, with a cluster file.
	HardwareSummary map[string]map[string]Estimate `json:"hardware_summary,omitempty"`
	// TierSummary is the same of each lower tier's figures, by tier (with
	// hardware pools, "pool tier"), when the cluster has any.
	TierSummary map[string]map[string]Estimate `json:"tier_summary,omitempty"`
	// AgenticSummary is the same of an agent trace's figures, KindSummary
	// of each request kind's, by kind.
	AgenticSummary map[string]Estimate            `json:"agentic_summary,omitempty"`
	KindSummary    map[string]map[string]Estimate `json:"kind_summary,omitempty"`
	// Versus is against the baseline, on the verdict's metrics; none for
	// the baseline itself or when there is none.
	Versus []Versus `json:"versus_baseline,omitempty"`
}

// Verdict metrics: the ones a verdict line is given for, and whether less
// is better.
type verdictMetric struct {
	key, label string
	lower      bool
}

var verdictMetrics = []verdictMetric{
	{"mean_ttft_ms", "mean TTFT", true},
	{"p99_ttft_ms", "p99 TTFT", true},
	{"request_goodput", "goodput", false},
	{"prefix_hit_rate", "prefix hit rate", false},
}

// metricLabel is a verdict metric's name in words.
func metricLabel(key string) string {
	return verdictMetrics[slices.IndexFunc(verdictMetrics, func(m verdictMetric) bool { return m.key == key })].label
}

// tQuantile975 is Student's t distribution's 0.975 quantile by degrees of
// freedom from 1 (a table: math's Exp, Log and Pow are not the same on
// every platform, and no output may depend on them).
var tQuantile975 = []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

// tBeyond30 are the 0.975 quantiles past the table, by degrees of
// freedom: the entry at or below df is taken (a wider interval, never a
// narrower one: at most 0.4% wider).
var tBeyond30 = []struct {
	df int
	t  float64
}{{30, 2.042}, {35, 2.030}, {40, 2.021}, {45, 2.014}, {50, 2.009}, {60, 2.000}, {70, 1.994}, {80, 1.990},
	{100, 1.984}, {120, 1.980}, {150, 1.976}, {200, 1.972}, {300, 1.968}, {500, 1.965}, {1000, 1.962}}

// tCritical is the 0.975 quantile for df degrees of freedom.
func tCritical(df int) float64 {
	if df <= len(tQuantile975) {
		return tQuantile975[df-1]
	}
	t := tBeyond30[0].t
	for _, e := range tBeyond30 {
		if e.df <= df {
			t = e.t
		}
	}
	return t
}

// MeanInterval is the mean of xs and, with two or more, its 95% Student-t
// interval.
func MeanInterval(xs []float64) Estimate {
	n := float64(len(xs))
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	e := Estimate{Mean: sum / n}
	if len(xs) < 2 {
		return e
	}
	ss := 0.0
	for _, x := range xs {
		d := x - e.Mean
		ss += float64(d * d) // rounded alone: no fused multiply-add
	}
	half := float64(tCritical(len(xs)-1) * math.Sqrt(ss/(n-1)/n))
	e.CI95 = &[2]float64{e.Mean - half, e.Mean + half}
	return e
}

// summarizeRepeats is each numeric metric's estimate across the repeats,
// by JSON key.
func summarizeRepeats(repeats []Metrics) map[string]Estimate {
	values := make([]reflect.Value, len(repeats))
	for r := range repeats {
		values[r] = reflect.ValueOf(&repeats[r]).Elem()
	}
	return summarizeFields(values)
}

// summarizeParts is the summary across the repeats of each of their
// parts (pools, classes, hardware pools), by name: every repeat ran one
// config, so has the same parts, in the same order; nil when there are
// none.
func summarizeParts[T any](repeats []Metrics, parts func(*Metrics) []T, name func(*T) string) map[string]map[string]Estimate {
	first := parts(&repeats[0])
	if len(first) == 0 {
		return nil
	}
	out := map[string]map[string]Estimate{}
	for k := range first {
		values := make([]reflect.Value, len(repeats))
		for r := range repeats {
			values[r] = reflect.ValueOf(&parts(&repeats[r])[k]).Elem()
		}
		out[name(&first[k])] = summarizeFields(values)
	}
	return out
}

// summarizeFields is, for each numeric field of the structs (one a
// repeat) that every repeat has, its estimate, by JSON key.
func summarizeFields(values []reflect.Value) map[string]Estimate {
	out := map[string]Estimate{}
	t := values[0].Type()
	for i := range t.NumField() {
		key, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		xs := make([]float64, 0, len(values))
		for _, s := range values {
			v := s.Field(i)
			if v.Kind() == reflect.Pointer && !v.IsNil() {
				v = v.Elem()
			}
			switch v.Kind() {
			case reflect.Float64:
				xs = append(xs, v.Float())
			case reflect.Int, reflect.Uint64:
				xs = append(xs, float64(v.Convert(reflect.TypeFor[float64]()).Float()))
			}
		}
		if len(xs) == len(values) {
			out[key] = MeanInterval(xs)
		}
	}
	return out
}

// verdictLine says what one comparison found, in words: "kv beats
// round_robin on p99 TTFT by 23% [19, 27]", or a tie with the signed
// change when the interval holds no difference.
func verdictLine(name, baseline, label string, v Versus) string {
	// To the 0.1% printed, and +0.0 for what rounds to no change (not
	// -0.0).
	pct := func(x float64) float64 { return math.Round(float64(1000*(x-1)))/10 + 0 }
	change, lo, hi := pct(v.Ratio), pct(v.CI95[0]), pct(v.CI95[1])
	switch {
	case v.Verdict == "tie":
		return fmt.Sprintf("%s and %s tie on %s (%+.1f%% [%+.1f, %+.1f])", name, baseline, label, change, lo, hi)
	case v.Better == "lower":
		change, lo, hi = -change, -hi, -lo
	}
	if v.Verdict == "better" {
		return fmt.Sprintf("%s beats %s on %s by %.1f%% [%.1f, %.1f]", name, baseline, label, change, lo, hi)
	}
	return fmt.Sprintf("%s loses to %s on %s by %.1f%% [%.1f, %.1f]", name, baseline, label, -change, -hi, -lo)
}

// judge sets v's verdict from its interval and direction. The interval
// is read as its line prints it, to 0.1%: a bound that rounds to no change
// (the ratio of two equal p99s, a mass of resamples at exactly 1) holds
// none, so a verdict never claims what its own numbers do not show.
func judge(v *Versus, lower bool) {
	v.Better = "higher"
	if lower {
		v.Better = "lower"
	}
	lo, hi := math.Round(float64(1000*v.CI95[0])), math.Round(float64(1000*v.CI95[1]))
	switch {
	case lo <= 1000 && hi >= 1000, math.IsNaN(v.Ratio):
		v.Verdict = "tie"
	case (hi < 1000) == lower:
		v.Verdict = "better"
	default:
		v.Verdict = "worse"
	}
}

// compare fills the report's contenders (each repeat's metrics and their
// intervals) and, with a baseline, each contender's ratios to it and the
// verdicts.
func (e *Experiment) compare(rep *Report, runs []run) {
	d := &rep.Deterministic
	byContender := byContenderOf(e, runs)
	for c, ct := range e.Contenders {
		cr := ContenderReport{Name: ct.Name, Policy: string(ct.Router.Policy), Overrides: ct.Overrides}
		if cr.Overrides == nil {
			cr.Overrides = []string{}
		}
		if len(byContender[c]) > 1 {
			for _, res := range byContender[c] {
				cr.Repeats = append(cr.Repeats, res.Metrics)
			}
			cr.Summary = summarizeRepeats(cr.Repeats)
			cr.PoolSummary = summarizeParts(cr.Repeats, func(m *Metrics) []PoolMetrics { return m.Pools }, func(p *PoolMetrics) string { return p.Role })
			cr.ClassSummary = summarizeParts(cr.Repeats, func(m *Metrics) []ClassMetrics { return m.Classes }, func(c *ClassMetrics) string { return c.Class })
			cr.HardwareSummary = summarizeParts(cr.Repeats, func(m *Metrics) []HardwareMetrics { return m.Hardware },
				func(h *HardwareMetrics) string { return h.Pool })
			cr.TierSummary = summarizeParts(cr.Repeats, func(m *Metrics) []TierMetrics { return m.Tiers }, (*TierMetrics).label)
			if cr.Repeats[0].Agentic != nil { // one trace: every repeat has them
				values := make([]reflect.Value, len(cr.Repeats))
				for r := range cr.Repeats {
					values[r] = reflect.ValueOf(cr.Repeats[r].Agentic).Elem()
				}
				cr.AgenticSummary = summarizeFields(values)
				cr.KindSummary = summarizeParts(cr.Repeats, func(m *Metrics) []KindMetrics { return m.Agentic.Kinds }, func(k *KindMetrics) string { return k.Kind })
			}
		}
		d.Contenders = append(d.Contenders, cr)
	}
	e.versus(d, byContender)
}

// byContenderOf is each contender's results, repeats in order.
func byContenderOf(e *Experiment, runs []run) [][]*Result {
	out := make([][]*Result, len(e.Contenders))
	for _, r := range runs {
		out[r.contender] = append(out[r.contender], r.result)
	}
	return out
}
