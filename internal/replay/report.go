package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	gojson "github.com/goccy/go-json"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Report is replay's JSON report (--report), schema version
// protocol.ReportSchemaVersion, described field by field in
// docs/report.schema.json (generated from these types). It has the same
// shape for one policy or many. Deterministic holds everything that follows
// from the trace and the config, so that two runs of the same inputs, on
// any machine and from any folder, give the same bytes there; Run holds
// what depends on where and how it ran.
type Report struct {
	SchemaVersion int           `json:"schema_version"`
	Deterministic Deterministic `json:"deterministic"`
	Run           RunInfo       `json:"run"`
}

// Deterministic is the part of a report that two runs of the same trace and
// config agree on to the byte.
type Deterministic struct {
	ProtocolVersion int `json:"protocol_version"`
	// Follows names the Dynamo and AISimulate commits the router follows.
	Follows  protocol.Follows `json:"follows"`
	Trace    TraceInfo        `json:"trace"`
	Workload Workload         `json:"workload"`
	Cluster  cluster.Config   `json:"cluster"`
	Replicas Replicas         `json:"router_replicas"`
	// Signals is the KV event channel's faults, when it has any.
	Signals *Signals `json:"event_channel,omitempty"`
	// Headroom is how far any router could take the prefix hit rate on
	// repeat 0's requests and this cluster (absent from reports made
	// before it was).
	Headroom *Headroom `json:"headroom,omitempty"`
	// Router is the router's config in full; each entry of Policies ran it
	// with its own policy.
	Router  protocol.Config `json:"router"`
	Seed    uint64          `json:"seed"`
	Goodput SLO             `json:"goodput"`
	// Repeats is how many times each contender ran, repeat k at Seeds[k]
	// (seed + k); Policies holds repeat 0's metrics, Contenders every
	// repeat's with their intervals.
	Repeats  int       `json:"repeats"`
	Seeds    []uint64  `json:"seeds"`
	Policies []Metrics `json:"policies"`
	// Baseline is the contender the others are measured against ("": none).
	Baseline   string            `json:"baseline"`
	Contenders []ContenderReport `json:"contenders"`
	// Verdicts say, one line per contender and verdict metric, who wins
	// against the baseline, by how much and how sure: each interval is
	// 95% for its own comparison (no correction for the many).
	Verdicts []string `json:"verdicts"`
	// Capacity is each contender's capacity at SLO, with --capacity only.
	Capacity *CapacityReport `json:"capacity,omitempty"`
	// Robustness is each contender under each event channel fault against
	// its clean run, with --robustness.
	Robustness *RobustnessReport `json:"robustness,omitempty"`
}

// TraceInfo identifies the requests replayed.
type TraceInfo struct {
	// Source is file (a trace given), builtin (the multi-turn chat
	// workload) or synthetic (--input-tokens and friends).
	Source string `json:"source"`
	// SHA256 is the hex digest of the trace file's bytes; "" for a
	// generated workload, which Workload's parameters identify.
	SHA256 string `json:"sha256"`
	// Format is a trace file's format (--trace-format, or the one its
	// content showed): mooncake, mooncake-delta, weka, agentic_mooncake or
	// dynamo; absent for a generated workload.
	Format   string `json:"format,omitempty"`
	Requests int    `json:"requests"`
	// LoRARequests are the requests under a LoRA adapter (lora_name), and
	// LoRAAdapters the distinct adapters they name; absent when none is.
	LoRARequests int `json:"lora_requests,omitempty"`
	LoRAAdapters int `json:"lora_adapters,omitempty"`
}

// RunInfo is what a report owes to the machine and the invocation.
type RunInfo struct {
	ToolVersion string `json:"tool_version"`
	TracePath   string `json:"trace_path"` // as given; "" for a generated workload
	Host        Host   `json:"host"`
	Policies    []Cost `json:"policies"`
}

// Host is the machine a report was made on.
type Host struct {
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
}

// Encode is the report as --report writes it: indented JSON, a newline
// at its end.
func (r *Report) Encode() ([]byte, error) {
	data, err := gojson.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// WriteTable prints the contenders side by side, one column each: with
// several repeats, each figure's mean and the half-width of its 95%
// interval; then, with a baseline, each contender's ratios to it and the
// verdicts.
func WriteTable(w io.Writer, rep *Report) error {
	d := &rep.Deterministic
	ms, costs := d.Policies, rep.Run.Policies
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, cell func(i int) string) {
		cells := []string{name}
		for i := range ms {
			cells = append(cells, cell(i))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	// num is a figure's cell by its JSON key: repeat 0's value, or the
	// repeats' mean ± half its interval.
	num := func(format, key string, f func(m *Metrics) float64) func(i int) string {
		return func(i int) string {
			if i < len(d.Contenders) {
				if e, ok := d.Contenders[i].Summary[key]; ok && e.CI95 != nil {
					return meanCell(format, e)
				}
			}
			return fmt.Sprintf(format, f(&ms[i]))
		}
	}
	row("contender", func(i int) string { return ms[i].Contender })
	if slices.ContainsFunc(ms, func(m Metrics) bool { return m.Contender != m.Policy }) {
		row("policy", func(i int) string { return ms[i].Policy })
	}
	row("mode", func(i int) string { return ms[i].Mode })
	row("completed", num("%.0f", "completed", func(m *Metrics) float64 { return float64(m.Completed) }))
	rejected := num("%.0f", "rejected", func(m *Metrics) float64 { return float64(m.Rejected) })
	row("rejected", func(i int) string {
		if i < len(d.Contenders) && d.Contenders[i].Summary != nil {
			return rejected(i) // the repeats' mean; the reasons are in the report
		}
		return rejections(&ms[i])
	})
	row("prefix hit rate", num("%.3f", "prefix_hit_rate", func(m *Metrics) float64 { return m.PrefixHitRate }))
	if ms[0].PrefixHitRateAcrossTiers != nil { // the same tiers for every contender
		writeTierRows(row, d, ms)
	}
	row("router overlap rate", num("%.3f", "router_overlap_rate", func(m *Metrics) float64 { return m.RouterOverlapRate }))
	row("mean overlap regret (blocks)", num("%.2f", "mean_overlap_regret_blocks", func(m *Metrics) float64 { return m.MeanOverlapRegretBlocks }))
	row("mean router overlap (tokens)", num("%.1f", "mean_router_overlap_tokens", func(m *Metrics) float64 { return m.MeanRouterOverlapTokens }))
	row("mean overlap regret (tokens)", num("%.1f", "mean_overlap_regret_tokens", func(m *Metrics) float64 { return m.MeanOverlapRegretTokens }))
	row("mean TTFT (ms)", num("%.1f", "mean_ttft_ms", func(m *Metrics) float64 { return m.MeanTTFTMS }))
	row("median TTFT (ms)", num("%.1f", "median_ttft_ms", func(m *Metrics) float64 { return m.MedianTTFTMS }))
	row("P99 TTFT (ms)", num("%.1f", "p99_ttft_ms", func(m *Metrics) float64 { return m.P99TTFTMS }))
	row("mean TPOT (ms)", num("%.1f", "mean_tpot_ms", func(m *Metrics) float64 { return m.MeanTPOTMS }))
	row("mean E2EL (ms)", num("%.1f", "mean_e2el_ms", func(m *Metrics) float64 { return m.MeanE2ELMS }))
	row("P99 E2EL (ms)", num("%.1f", "p99_e2el_ms", func(m *Metrics) float64 { return m.P99E2ELMS }))
	row("median queue wait (ms)", num("%.1f", "median_queue_wait_ms", func(m *Metrics) float64 { return m.MedianQueueWaitMS }))
	row("P99 queue wait (ms)", num("%.1f", "p99_queue_wait_ms", func(m *Metrics) float64 { return m.P99QueueWaitMS }))
	row("offered request rate (req/s)", num("%.2f", "offered_request_rate", func(m *Metrics) float64 { return m.OfferedRequestRate }))
	row("request throughput (req/s)", num("%.2f", "request_throughput", func(m *Metrics) float64 { return m.RequestThroughput }))
	row("output throughput (tok/s)", num("%.1f", "output_throughput", func(m *Metrics) float64 { return m.OutputThroughput }))
	if d.Goodput.Set() {
		row("request goodput (req/s)", num("%.2f", "request_goodput", func(m *Metrics) float64 { return *m.RequestGoodput }))
	}
	if ms[0].OneRouter != nil {
		row("one router: prefix hit rate", num("%.3f", "", func(m *Metrics) float64 { return m.OneRouter.PrefixHitRate }))
		row("one router: median TTFT (ms)", num("%.1f", "", func(m *Metrics) float64 { return m.OneRouter.MedianTTFTMS }))
		row("one router: P99 TTFT (ms)", num("%.1f", "", func(m *Metrics) float64 { return m.OneRouter.P99TTFTMS }))
	}
	row("worker share CV", num("%.3f", "worker_share_cv", func(m *Metrics) float64 { return m.WorkerShareCV }))
	row("preemptions", num("%.0f", "num_preemptions", func(m *Metrics) float64 { return float64(m.NumPreemptions) }))
	row("evicted blocks", num("%.0f", "evicted_blocks", func(m *Metrics) float64 { return float64(m.EvictedBlocks) }))
	if ms[0].LockstepWaitMS != nil {
		row("DP lockstep wait (ms)", num("%.0f", "lockstep_wait_ms", func(m *Metrics) float64 { return *m.LockstepWaitMS }))
	}
	row("mean busy share", num("%.3f", "mean_busy_share", func(m *Metrics) float64 { return m.MeanBusyShare }))
	row("mean KV cache usage", num("%.3f", "mean_kv_cache_usage", func(m *Metrics) float64 { return m.MeanKVCacheUsage }))
	row("peak KV cache usage", num("%.3f", "peak_kv_cache_usage", func(m *Metrics) float64 { return m.PeakKVCacheUsage }))
	for k := range ms[0].Pools { // the same pools for every policy
		writePoolRows(row, d, ms, k)
	}
	for k := range ms[0].Hardware { // the same pools for every contender
		writeHardwareRows(row, d, ms, k)
	}
	for _, class := range classNames(ms) {
		writeClassRows(row, d, ms, class)
	}
	if ms[0].Agentic != nil { // one trace for every contender
		writeAgenticRows(row, d, ms)
	}
	row("simulated time (s)", num("%.1f", "duration", func(m *Metrics) float64 { return m.Duration }))
	row("router commands/s (wall)", func(i int) string { return fmt.Sprintf("%.0f", costs[i].RouterCommandsPerS) })
	noRatio := writeVersus(tw, d, ms, row)
	if err := tw.Flush(); err != nil {
		return err
	}
	if noRatio {
		fmt.Fprintln(w, "  -: no ratio, where the baseline's figure is 0 or no request completed")
	}
	writeHeadroom(w, d, ms)
	if err := writeVerdicts(w, d); err != nil {
		return err
	}
	for _, m := range ms {
		if m.Rejected > 0 && d.Baseline != "" {
			fmt.Fprintf(w, "note: %s turned %d of %d requests away (at seed %d): its latencies are those of the requests it served\n",
				m.Contender, m.Rejected, m.Requests, d.Seed)
		}
	}
	return nil
}

// meanCell is a figure over repeats as the table prints it: the mean ±
// half its 95% interval, both in format.
func meanCell(format string, e Estimate) string {
	return fmt.Sprintf(format+" ±"+format, e.Mean, float64(e.CI95[1]-e.Mean))
}

// writeVersus adds the rows of each contender's ratio to the baseline and
// its interval, under a line saying what they are.
func writeVersus(tw io.Writer, d *Deterministic, ms []Metrics, row func(string, func(int) string)) (noRatio bool) {
	if d.Baseline == "" {
		return false
	}
	fmt.Fprintln(tw, "\t")
	row(fmt.Sprintf("against %s: ratio [95%% interval]", d.Baseline), func(i int) string { return ms[i].Contender })
	for _, m := range verdictMetrics {
		if m.key == "request_goodput" && !d.Goodput.Set() {
			continue
		}
		row(m.label, func(i int) string {
			if i >= len(d.Contenders) {
				return ""
			}
			if d.Contenders[i].Name == d.Baseline {
				return "1 (baseline)"
			}
			for _, v := range d.Contenders[i].Versus {
				if v.Metric == m.key {
					return fmt.Sprintf("%.3f [%.3f, %.3f]", v.Ratio, v.CI95[0], v.CI95[1])
				}
			}
			noRatio = true
			return "-"
		})
	}
	return noRatio
}

// writeHeadroom says, under the table, how far any router could go.
func writeHeadroom(w io.Writer, d *Deterministic, ms []Metrics) {
	hr := d.Headroom
	if hr == nil {
		return
	}
	served := ""
	if slices.ContainsFunc(ms, func(m Metrics) bool { return m.Rejected > 0 }) {
		served = " (of all the requests' input tokens; a contender's rate above is of those it served)"
	}
	order := ""
	if hr.LRUOrder == lruOrderTrace {
		order = ", in trace order"
	}
	fmt.Fprintf(w, "headroom: any router's prefix hit rate is at most %.3f (an infinite cache)%s; one LRU cache of the cluster's %d blocks reaches %.3f%s\n",
		hr.InfiniteCacheHitRate, served, hr.LRUCapacityBlocks, hr.ClusterLRUHitRate, order)
}

// writeVerdicts prints the verdict lines, with what their intervals are.
func writeVerdicts(w io.Writer, d *Deterministic) error {
	if len(d.Verdicts) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nverdicts against %s (%s; each interval 95%% for its own comparison):\n", d.Baseline, intervalMethod(d))
	for _, v := range d.Verdicts {
		if _, err := fmt.Fprintf(w, "  %s\n", v); err != nil {
			return err
		}
	}
	return nil
}

// intervalMethod says how the verdicts' intervals were made.
func intervalMethod(d *Deterministic) string {
	unit := "sessions (requests where there are none)"
	if len(d.Policies) > 0 && d.Policies[0].Agentic != nil {
		unit = "agent plays"
	}
	repeats := ""
	if d.Repeats > 1 {
		repeats = fmt.Sprintf(", each with its requests in all %d repeats", d.Repeats)
		if d.Trace.Source != "file" {
			repeats = fmt.Sprintf(" of each of the %d repeats", d.Repeats)
		}
	}
	return fmt.Sprintf("paired bootstrap over %s%s, %d resamples", unit, repeats, bootstrapResamples)
}

// writePoolRows writes the rows of pool k of a disaggregated cluster,
// each named by the pool's role.
func writePoolRows(row func(string, func(int) string), d *Deterministic, ms []Metrics, k int) {
	role := ms[0].Pools[k].Role
	// A cell is repeat 0's figure, or the repeats' mean ± half its interval.
	num := func(name, format, key string, f func(p *PoolMetrics) float64) {
		row(role+": "+name, func(i int) string {
			if i < len(d.Contenders) {
				if e, ok := d.Contenders[i].PoolSummary[role][key]; ok && e.CI95 != nil {
					return meanCell(format, e)
				}
			}
			return fmt.Sprintf(format, f(&ms[i].Pools[k]))
		})
	}
	num("completed", "%.0f", "completed", func(p *PoolMetrics) float64 { return float64(p.Completed) })
	row(role+": rejected", func(i int) string {
		if i < len(d.Contenders) && d.Contenders[i].PoolSummary != nil {
			e := d.Contenders[i].PoolSummary[role]["rejected"]
			return meanCell("%.0f", e)
		}
		p := &ms[i].Pools[k]
		return rejections(&Metrics{Rejected: p.Rejected, RejectedByReason: p.RejectedByReason})
	})
	if role == PoolPrefill {
		num("prefix hit rate", "%.3f", "prefix_hit_rate", func(p *PoolMetrics) float64 { return *p.PrefixHitRate })
		num("mean TTFT (ms)", "%.1f", "mean_ttft_ms", func(p *PoolMetrics) float64 { return p.MeanTTFTMS })
		num("P99 TTFT (ms)", "%.1f", "p99_ttft_ms", func(p *PoolMetrics) float64 { return p.P99TTFTMS })
	} else {
		num("mean KV transfer (ms)", "%.1f", "mean_transfer_ms", func(p *PoolMetrics) float64 { return p.MeanTransferMS })
		num("mean ITL (ms)", "%.1f", "mean_itl_ms", func(p *PoolMetrics) float64 { return p.MeanITLMS })
		num("P99 ITL (ms)", "%.1f", "p99_itl_ms", func(p *PoolMetrics) float64 { return p.P99ITLMS })
	}
	num("median queue wait (ms)", "%.1f", "median_queue_wait_ms", func(p *PoolMetrics) float64 { return p.MedianQueueWaitMS })
	num("P99 queue wait (ms)", "%.1f", "p99_queue_wait_ms", func(p *PoolMetrics) float64 { return p.P99QueueWaitMS })
	num("router overlap rate", "%.3f", "router_overlap_rate", func(p *PoolMetrics) float64 { return p.RouterOverlapRate })
	num("worker share CV", "%.3f", "worker_share_cv", func(p *PoolMetrics) float64 { return p.WorkerShareCV })
	num("preemptions", "%.0f", "num_preemptions", func(p *PoolMetrics) float64 { return float64(p.NumPreemptions) })
	num("evicted blocks", "%.0f", "evicted_blocks", func(p *PoolMetrics) float64 { return float64(p.EvictedBlocks) })
	num("mean busy share", "%.3f", "mean_busy_share", func(p *PoolMetrics) float64 { return p.MeanBusyShare })
	num("mean KV cache usage", "%.3f", "mean_kv_cache_usage", func(p *PoolMetrics) float64 { return p.MeanKVCacheUsage })
	num("peak KV cache usage", "%.3f", "peak_kv_cache_usage", func(p *PoolMetrics) float64 { return p.PeakKVCacheUsage })
}

// classNames are the policy classes of the contenders' configs, each once,
// in the order the contenders and their configs give them: contenders may
// set classes of their own.
func classNames(ms []Metrics) []string {
	var names []string
	for i := range ms {
		for _, c := range ms[i].Classes {
			if !slices.Contains(names, c.Class) {
				names = append(names, c.Class)
			}
		}
	}
	return names
}

// writeClassRows writes the rows of one policy class, each named by it; a
// contender whose config has no such class has empty cells.
func writeClassRows(row func(string, func(int) string), d *Deterministic, ms []Metrics, class string) {
	of := func(i int) *ClassMetrics {
		k := slices.IndexFunc(ms[i].Classes, func(c ClassMetrics) bool { return c.Class == class })
		if k < 0 {
			return nil
		}
		return &ms[i].Classes[k]
	}
	// A cell is repeat 0's figure, or the repeats' mean ± half its interval.
	num := func(name, format, key string, f func(c *ClassMetrics) float64) {
		row("class "+class+": "+name, func(i int) string {
			c := of(i)
			switch {
			case c == nil:
				return ""
			case i < len(d.Contenders) && d.Contenders[i].ClassSummary != nil:
				return meanCell(format, d.Contenders[i].ClassSummary[class][key])
			}
			return fmt.Sprintf(format, f(c))
		})
	}
	num("requests", "%.0f", "requests", func(c *ClassMetrics) float64 { return float64(c.Requests) })
	num("placed", "%.0f", "placed", func(c *ClassMetrics) float64 { return float64(c.Placed) })
	row("class "+class+": rejected", func(i int) string {
		c := of(i)
		switch {
		case c == nil:
			return ""
		case i < len(d.Contenders) && d.Contenders[i].ClassSummary != nil:
			return meanCell("%.0f", d.Contenders[i].ClassSummary[class]["rejected"]) // the reasons are in the report
		}
		return rejections(&Metrics{Rejected: c.Rejected, RejectedByReason: c.RejectedByReason})
	})
	num("mean TTFT (ms)", "%.1f", "mean_ttft_ms", func(c *ClassMetrics) float64 { return c.MeanTTFTMS })
	num("P99 TTFT (ms)", "%.1f", "p99_ttft_ms", func(c *ClassMetrics) float64 { return c.P99TTFTMS })
	if d.Goodput.Set() {
		num("request goodput (req/s)", "%.2f", "request_goodput", func(c *ClassMetrics) float64 { return *c.RequestGoodput })
	}
}

// rejections is the rejected count, with its reasons when there are any.
func rejections(m *Metrics) string {
	if m.Rejected == 0 {
		return "0"
	}
	var why []string
	for _, code := range slices.Sorted(maps.Keys(m.RejectedByReason)) {
		why = append(why, fmt.Sprintf("%s %d", code, m.RejectedByReason[code]))
	}
	return fmt.Sprintf("%d (%s)", m.Rejected, strings.Join(why, ", "))
}

// SetupDigest is the SHA-256 of what a replay was set up to run: its
// workload, cluster, router replicas and router config, seed and goodput
// levels (not the trace, digested apart, nor what it measured). Two
// reports of one setup have the same; a sweep checks a point's report by
// it, so a report copied from another point is not taken for its own.
func (d *Deterministic) SetupDigest() string {
	setup := *d
	setup.Trace, setup.Policies, setup.Contenders, setup.Verdicts, setup.Capacity = TraceInfo{}, nil, nil, nil, nil
	setup.Headroom = nil      // measured on the trace, digested apart
	setup.Cluster.Pools = nil // stated from the cluster's fields
	setup.Router.Policy = ""  // a report of many policies ran each
	data, err := json.Marshal(&setup)
	if err != nil {
		panic(err) // plain data
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// writeTierRows are the lower tiers' rows: the hit rate counted across
// tiers, then each tier's hits, what restoring them and writing into it
// cost, and the credit the router gave its blocks against the one they
// earned (repeat 0's figures, or the repeats' mean ± half its interval).
func writeTierRows(row func(string, func(int) string), d *Deterministic, ms []Metrics) {
	row("prefix hit rate across tiers", func(i int) string {
		if i < len(d.Contenders) {
			if e, ok := d.Contenders[i].Summary["prefix_hit_rate_across_tiers"]; ok && e.CI95 != nil {
				return meanCell("%.3f", e)
			}
		}
		return fmt.Sprintf("%.3f", *ms[i].PrefixHitRateAcrossTiers)
	})
	for k := range ms[0].Tiers {
		name := ms[0].Tiers[k].label()
		num := func(what, format, key string, f func(t *TierMetrics) float64) {
			row(name+": "+what, func(i int) string {
				if i < len(d.Contenders) {
					if e, ok := d.Contenders[i].TierSummary[name][key]; ok && e.CI95 != nil {
						return meanCell(format, e)
					}
				}
				return fmt.Sprintf(format, f(&ms[i].Tiers[k]))
			})
		}
		num("hit rate", "%.3f", "hit_rate", func(t *TierMetrics) float64 { return t.HitRate })
		num("restore time (ms)", "%.0f", "restore_ms", func(t *TierMetrics) float64 { return t.RestoreMS })
		num("write stall (ms)", "%.0f", "write_stall_ms", func(t *TierMetrics) float64 { return t.WriteStallMS })
		num("router overlap (blocks)", "%.0f", "router_overlap_blocks", func(t *TierMetrics) float64 { return float64(t.RouterOverlapBlocks) })
		row(name+": credit given / earned", func(i int) string {
			return fmt.Sprintf("%.2f / %.2f", ms[i].Tiers[k].RouterCredit, ms[i].Tiers[k].EarnedCredit)
		})
	}
}

// writeHardwareRows are a hardware pool's rows: how much of the load it
// served and how those requests fared (repeat 0's figures, or the repeats'
// mean ± half its interval).
func writeHardwareRows(row func(string, func(int) string), d *Deterministic, ms []Metrics, k int) {
	hw := ms[0].Hardware[k]
	num := func(name, format, key string, f func(h *HardwareMetrics) float64) {
		row(name, func(i int) string {
			if i < len(d.Contenders) {
				if e, ok := d.Contenders[i].HardwareSummary[hw.Pool][key]; ok && e.CI95 != nil {
					return meanCell(format, e)
				}
			}
			return fmt.Sprintf(format, f(&ms[i].Hardware[k]))
		})
	}
	workers := fmt.Sprintf("%d workers", hw.Workers)
	if hw.Workers == 1 {
		workers = "1 worker"
	}
	num(fmt.Sprintf("%s (%s, speed %.2f): request share", hw.Pool, workers, hw.RelativeSpeed), "%.3f", "request_share",
		func(h *HardwareMetrics) float64 { return h.RequestShare })
	num(hw.Pool+": prefix hit rate", "%.3f", "prefix_hit_rate", func(h *HardwareMetrics) float64 { return h.PrefixHitRate })
	num(hw.Pool+": mean TTFT (ms)", "%.1f", "mean_ttft_ms", func(h *HardwareMetrics) float64 { return h.MeanTTFTMS })
	num(hw.Pool+": P99 TTFT (ms)", "%.1f", "p99_ttft_ms", func(h *HardwareMetrics) float64 { return h.P99TTFTMS })
	num(hw.Pool+": mean E2EL (ms)", "%.1f", "mean_e2el_ms", func(h *HardwareMetrics) float64 { return h.MeanE2ELMS })
	num(hw.Pool+": mean busy share", "%.3f", "mean_busy_share", func(h *HardwareMetrics) float64 { return h.MeanBusyShare })
}

// writeAgenticRows are an agent trace's rows: its plays' makespan and
// serving time, each request kind's TTFT and hit rate, and how often
// subagents ran where their group was bound. A cell is repeat 0's figure,
// or the repeats' mean ± half its interval.
func writeAgenticRows(row func(string, func(int) string), d *Deterministic, ms []Metrics) {
	num := func(name, format, key string, f func(a *AgenticMetrics) *float64) {
		row(name, func(i int) string {
			if i < len(d.Contenders) {
				if e, ok := d.Contenders[i].AgenticSummary[key]; ok && e.CI95 != nil {
					return meanCell(format, e)
				}
			}
			x := f(ms[i].Agentic)
			if x == nil {
				return ""
			}
			return fmt.Sprintf(format, *x)
		})
	}
	num("agent plays", "%.0f", "plays", func(a *AgenticMetrics) *float64 { return ptr(float64(a.Plays)) })
	num("mean play makespan (ms)", "%.1f", "mean_makespan_ms", func(a *AgenticMetrics) *float64 { return &a.MeanMakespanMS })
	num("P99 play makespan (ms)", "%.1f", "p99_makespan_ms", func(a *AgenticMetrics) *float64 { return &a.P99MakespanMS })
	num("mean play serving time (ms)", "%.1f", "mean_serving_ms", func(a *AgenticMetrics) *float64 { return &a.MeanServingMS })
	num("P99 play serving time (ms)", "%.1f", "p99_serving_ms", func(a *AgenticMetrics) *float64 { return &a.P99ServingMS })
	for k, kind := range ms[0].Agentic.Kinds { // the same kinds for every contender
		cell := func(format, key string, f func(k *KindMetrics) float64) func(i int) string {
			return func(i int) string {
				if i < len(d.Contenders) {
					if e, ok := d.Contenders[i].KindSummary[kind.Kind][key]; ok && e.CI95 != nil {
						return meanCell(format, e)
					}
				}
				return fmt.Sprintf(format, f(&ms[i].Agentic.Kinds[k]))
			}
		}
		row(kind.Kind+": requests", cell("%.0f", "requests", func(k *KindMetrics) float64 { return float64(k.Requests) }))
		row(kind.Kind+": mean TTFT (ms)", cell("%.1f", "mean_ttft_ms", func(k *KindMetrics) float64 { return k.MeanTTFTMS }))
		row(kind.Kind+": prefix hit rate", cell("%.3f", "prefix_hit_rate", func(k *KindMetrics) float64 { return k.PrefixHitRate }))
	}
	num("subagent colocation", "%.3f", "subagent_colocation", func(a *AgenticMetrics) *float64 { return a.SubagentColocation })
	num("subagent group hit rate", "%.3f", "subagent_group_hit_rate", func(a *AgenticMetrics) *float64 { return a.SubagentGroupHitRate })
}
