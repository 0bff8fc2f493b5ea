package replay

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a replay measured.
type Report struct {
	Policy                  string      `json:"policy"`
	Workers                 int         `json:"workers"`
	Requests                int         `json:"requests"`
	Completed               int         `json:"completed"`
	Rejected                int         `json:"rejected"`
	SimDurationMS           float64     `json:"sim_duration_ms"`
	WallMS                  float64     `json:"wall_ms"`
	RouterMS                float64     `json:"router_ms"`
	RouterCommands          int         `json:"router_commands"`
	RouterCommandsPerS      float64     `json:"router_commands_per_s"`
	PrefixHitRate           float64     `json:"prefix_hit_rate"`
	RouterOverlapRate       float64     `json:"router_overlap_rate"`
	MeanOverlapRegretBlocks float64     `json:"mean_overlap_regret_blocks"`
	TTFTMS                  Percentiles `json:"ttft_ms"`
	QueueWaitMS             Percentiles `json:"queue_wait_ms"`
	WorkerRequests          []int       `json:"worker_requests"`
	WorkerShare             []float64   `json:"worker_share"`
	WorkerShareCV           float64     `json:"worker_share_cv"`
}

// Percentiles are nearest-rank percentiles.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
}

func percentiles(v []float64) Percentiles {
	if len(v) == 0 {
		return Percentiles{}
	}
	slices.Sort(v)
	at := func(p float64) float64 { return v[max(int(math.Ceil(p*float64(len(v))))-1, 0)] }
	return Percentiles{P50: at(0.5), P90: at(0.9), P99: at(0.99)}
}

func (h *host) report(trace []Request, wall time.Duration) *Report {
	rep := &Report{Policy: string(h.opt.Router.Policy), Workers: len(h.workers), Requests: len(trace),
		WallMS: ms(wall), RouterMS: ms(h.router.busy), RouterCommands: h.router.commands}
	if h.router.busy > 0 {
		rep.RouterCommandsPerS = float64(h.router.commands) / h.router.busy.Seconds()
	}
	index := map[uint64]int{}
	for i, id := range h.workerIDs() {
		index[id] = i
	}
	rep.WorkerRequests = make([]int, len(index))
	var hitTokens, inputTokens, overlap, islBlocks, regret float64
	var ttft, wait []float64
	for i := range trace {
		r := h.byID[trace[i].ID]
		rep.SimDurationMS = math.Max(rep.SimDurationMS, r.doneAt)
		if r.rejected {
			rep.Rejected++
			continue
		}
		if r.worker == nil {
			continue
		}
		rep.Completed++
		rep.WorkerRequests[index[r.worker.id]]++
		hitTokens += float64(min(uint64(r.hitBlocks)*h.opt.Cluster.BlockSize, r.InputTokens))
		inputTokens += float64(r.InputTokens)
		overlap += float64(r.overlap)
		islBlocks += float64(r.islBlocks)
		regret += float64(r.best - r.overlap)
		ttft = append(ttft, r.firstToken-r.Arrival)
		wait = append(wait, r.prefillStart-r.Arrival)
	}
	if inputTokens > 0 {
		rep.PrefixHitRate = hitTokens / inputTokens
	}
	if islBlocks > 0 {
		rep.RouterOverlapRate = overlap / islBlocks
	}
	if rep.Completed > 0 {
		rep.MeanOverlapRegretBlocks = regret / float64(rep.Completed)
	}
	rep.TTFTMS, rep.QueueWaitMS = percentiles(ttft), percentiles(wait)
	rep.WorkerShare, rep.WorkerShareCV = shares(rep.WorkerRequests)
	return rep
}

// shares returns each worker's share of the requests and the coefficient
// of variation of the counts (0 = perfectly even).
func shares(counts []int) ([]float64, float64) {
	total := 0
	for _, c := range counts {
		total += c
	}
	out := make([]float64, len(counts))
	if total == 0 {
		return out, 0
	}
	mean := float64(total) / float64(len(counts))
	var ss float64
	for i, c := range counts {
		out[i] = float64(c) / float64(total)
		ss += float64((float64(c) - mean) * (float64(c) - mean)) // rounded alone: the same on every platform
	}
	return out, math.Sqrt(ss/float64(len(counts))) / mean
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// WriteTable prints reports side by side, one column per policy.
func WriteTable(w io.Writer, reports []*Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, f func(r *Report) string) {
		cells := []string{name}
		for _, r := range reports {
			cells = append(cells, f(r))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	num := func(format string, f func(r *Report) float64) func(r *Report) string {
		return func(r *Report) string { return fmt.Sprintf(format, f(r)) }
	}
	row("policy", func(r *Report) string { return r.Policy })
	row("requests", num("%.0f", func(r *Report) float64 { return float64(r.Requests) }))
	row("rejected", num("%.0f", func(r *Report) float64 { return float64(r.Rejected) }))
	row("prefix hit rate", num("%.3f", func(r *Report) float64 { return r.PrefixHitRate }))
	row("router overlap rate", num("%.3f", func(r *Report) float64 { return r.RouterOverlapRate }))
	row("mean overlap regret (blocks)", num("%.2f", func(r *Report) float64 { return r.MeanOverlapRegretBlocks }))
	row("TTFT p50 (ms)", num("%.1f", func(r *Report) float64 { return r.TTFTMS.P50 }))
	row("TTFT p90 (ms)", num("%.1f", func(r *Report) float64 { return r.TTFTMS.P90 }))
	row("TTFT p99 (ms)", num("%.1f", func(r *Report) float64 { return r.TTFTMS.P99 }))
	row("queue wait p50 (ms)", num("%.1f", func(r *Report) float64 { return r.QueueWaitMS.P50 }))
	row("queue wait p90 (ms)", num("%.1f", func(r *Report) float64 { return r.QueueWaitMS.P90 }))
	row("queue wait p99 (ms)", num("%.1f", func(r *Report) float64 { return r.QueueWaitMS.P99 }))
	row("worker share CV", num("%.3f", func(r *Report) float64 { return r.WorkerShareCV }))
	row("simulated time (s)", num("%.1f", func(r *Report) float64 { return r.SimDurationMS / 1000 }))
	row("router commands", num("%.0f", func(r *Report) float64 { return float64(r.RouterCommands) }))
	row("router commands/s", num("%.0f", func(r *Report) float64 { return r.RouterCommandsPerS }))
	row("wall time (ms)", num("%.0f", func(r *Report) float64 { return r.WallMS }))
	return tw.Flush()
}
