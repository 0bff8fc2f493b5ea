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
	ProtocolVersion int           `json:"protocol_version"`
	Trace           TraceInfo     `json:"trace"`
	Workload        Workload      `json:"workload"`
	Cluster         ClusterConfig `json:"cluster"`
	Replicas        Replicas      `json:"router_replicas"`
	// Router is the router's config in full; each entry of Policies ran it
	// with its own policy.
	Router   protocol.Config `json:"router"`
	Seed     uint64          `json:"seed"`
	Goodput  SLO             `json:"goodput"`
	Policies []Metrics       `json:"policies"`
}

// TraceInfo identifies the requests replayed.
type TraceInfo struct {
	// Source is file (a trace given), builtin (the multi-turn chat
	// workload) or synthetic (--input-tokens and friends).
	Source string `json:"source"`
	// SHA256 is the hex digest of the trace file's bytes; "" for a
	// generated workload, which Workload's parameters identify.
	SHA256   string `json:"sha256"`
	Requests int    `json:"requests"`
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

// WriteTable prints the policies side by side, one column each.
func WriteTable(w io.Writer, rep *Report) error {
	ms, costs := rep.Deterministic.Policies, rep.Run.Policies
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, cell func(i int) string) {
		cells := []string{name}
		for i := range ms {
			cells = append(cells, cell(i))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	num := func(format string, f func(m *Metrics) float64) func(i int) string {
		return func(i int) string { return fmt.Sprintf(format, f(&ms[i])) }
	}
	row("policy", func(i int) string { return ms[i].Policy })
	row("mode", func(i int) string { return ms[i].Mode })
	row("completed", num("%.0f", func(m *Metrics) float64 { return float64(m.Completed) }))
	row("rejected", func(i int) string { return rejections(&ms[i]) })
	row("prefix hit rate", num("%.3f", func(m *Metrics) float64 { return m.PrefixHitRate }))
	row("router overlap rate", num("%.3f", func(m *Metrics) float64 { return m.RouterOverlapRate }))
	row("mean overlap regret (blocks)", num("%.2f", func(m *Metrics) float64 { return m.MeanOverlapRegretBlocks }))
	row("mean TTFT (ms)", num("%.1f", func(m *Metrics) float64 { return m.MeanTTFTMS }))
	row("median TTFT (ms)", num("%.1f", func(m *Metrics) float64 { return m.MedianTTFTMS }))
	row("P99 TTFT (ms)", num("%.1f", func(m *Metrics) float64 { return m.P99TTFTMS }))
	row("mean TPOT (ms)", num("%.1f", func(m *Metrics) float64 { return m.MeanTPOTMS }))
	row("mean E2EL (ms)", num("%.1f", func(m *Metrics) float64 { return m.MeanE2ELMS }))
	row("P99 E2EL (ms)", num("%.1f", func(m *Metrics) float64 { return m.P99E2ELMS }))
	row("median queue wait (ms)", num("%.1f", func(m *Metrics) float64 { return m.MedianQueueWaitMS }))
	row("P99 queue wait (ms)", num("%.1f", func(m *Metrics) float64 { return m.P99QueueWaitMS }))
	row("request throughput (req/s)", num("%.2f", func(m *Metrics) float64 { return m.RequestThroughput }))
	row("output throughput (tok/s)", num("%.1f", func(m *Metrics) float64 { return m.OutputThroughput }))
	if rep.Deterministic.Goodput.Set() {
		row("request goodput (req/s)", num("%.2f", func(m *Metrics) float64 { return *m.RequestGoodput }))
	}
	if ms[0].OneRouter != nil {
		row("one router: prefix hit rate", num("%.3f", func(m *Metrics) float64 { return m.OneRouter.PrefixHitRate }))
		row("one router: median TTFT (ms)", num("%.1f", func(m *Metrics) float64 { return m.OneRouter.MedianTTFTMS }))
		row("one router: P99 TTFT (ms)", num("%.1f", func(m *Metrics) float64 { return m.OneRouter.P99TTFTMS }))
	}
	row("worker share CV", num("%.3f", func(m *Metrics) float64 { return m.WorkerShareCV }))
	row("preemptions", num("%.0f", func(m *Metrics) float64 { return float64(m.NumPreemptions) }))
	row("evicted blocks", num("%.0f", func(m *Metrics) float64 { return float64(m.EvictedBlocks) }))
	for k := range ms[0].Pools { // the same pools for every policy
		writePoolRows(row, ms, k)
	}
	row("simulated time (s)", num("%.1f", func(m *Metrics) float64 { return m.Duration }))
	row("router commands/s (wall)", func(i int) string { return fmt.Sprintf("%.0f", costs[i].RouterCommandsPerS) })
	return tw.Flush()
}

// writePoolRows writes the rows of pool k of a disaggregated cluster,
// each named by the pool's role.
func writePoolRows(row func(string, func(int) string), ms []Metrics, k int) {
	role := ms[0].Pools[k].Role
	num := func(name, format string, f func(p *PoolMetrics) float64) {
		row(role+": "+name, func(i int) string { return fmt.Sprintf(format, f(&ms[i].Pools[k])) })
	}
	num("completed", "%.0f", func(p *PoolMetrics) float64 { return float64(p.Completed) })
	row(role+": rejected", func(i int) string {
		p := &ms[i].Pools[k]
		return rejections(&Metrics{Rejected: p.Rejected, RejectedByReason: p.RejectedByReason})
	})
	if role == PoolPrefill {
		num("prefix hit rate", "%.3f", func(p *PoolMetrics) float64 { return *p.PrefixHitRate })
		num("mean TTFT (ms)", "%.1f", func(p *PoolMetrics) float64 { return p.MeanTTFTMS })
		num("P99 TTFT (ms)", "%.1f", func(p *PoolMetrics) float64 { return p.P99TTFTMS })
	} else {
		num("mean KV transfer (ms)", "%.1f", func(p *PoolMetrics) float64 { return p.MeanTransferMS })
		num("mean ITL (ms)", "%.1f", func(p *PoolMetrics) float64 { return p.MeanITLMS })
		num("P99 ITL (ms)", "%.1f", func(p *PoolMetrics) float64 { return p.P99ITLMS })
	}
	num("median queue wait (ms)", "%.1f", func(p *PoolMetrics) float64 { return p.MedianQueueWaitMS })
	num("P99 queue wait (ms)", "%.1f", func(p *PoolMetrics) float64 { return p.P99QueueWaitMS })
	num("router overlap rate", "%.3f", func(p *PoolMetrics) float64 { return p.RouterOverlapRate })
	num("worker share CV", "%.3f", func(p *PoolMetrics) float64 { return p.WorkerShareCV })
	num("preemptions", "%.0f", func(p *PoolMetrics) float64 { return float64(p.NumPreemptions) })
	num("evicted blocks", "%.0f", func(p *PoolMetrics) float64 { return float64(p.EvictedBlocks) })
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
	setup.Trace, setup.Policies = TraceInfo{}, nil
	setup.Cluster.Pools = nil // stated from the cluster's fields: a setup's digest stays what it was
	setup.Router.Policy = ""  // a report of many policies ran each
	data, err := json.Marshal(&setup)
	if err != nil {
		panic(err) // plain data
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
