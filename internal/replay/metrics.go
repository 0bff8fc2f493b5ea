package replay

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Metrics are what one policy did to the trace: deterministic, the same
// bytes for the same trace and config on any machine. The serving metrics
// carry the names and definitions of vLLM's benchmark_serving
// (benchmarks/benchmark_serving.py, calculate_metrics), so that the two can
// be set side by side; the router's own follow.
type Metrics struct {
	Policy string `json:"policy"`
	// Contender names what ran: the policy's name, or a --contender's.
	Contender string `json:"contender"`
	// Mode is kv_events (the router's index fed by the workers' KV events)
	// or approximate (no events: the router learns from its placements).
	Mode string `json:"mode"`

	// Requests is the trace's; Completed ran to their end; Rejected were
	// turned away by the router (by error code in RejectedByReason:
	// all_workers_busy is Dynamo's HTTP 529, queue_timeout a queue's).
	Requests         int            `json:"requests"`
	Completed        int            `json:"completed"`
	Rejected         int            `json:"rejected"`
	RejectedByReason map[string]int `json:"rejected_by_reason"`

	// Duration is simulated seconds from the first arrival to the last
	// request's end; the throughputs are per simulated second.
	Duration             float64 `json:"duration"`
	TotalInputTokens     uint64  `json:"total_input_tokens"`
	TotalOutputTokens    uint64  `json:"total_output_tokens"`
	RequestThroughput    float64 `json:"request_throughput"`
	OutputThroughput     float64 `json:"output_throughput"`
	TotalTokenThroughput float64 `json:"total_token_throughput"`
	// OfferedRequestRate is the trace's requests over the span of their
	// arrivals as replayed (first to last), per second: the load offered,
	// beside request_throughput, the load served. Under
	// --replay-concurrency the closed loop makes the arrivals (a session
	// starts when one ends), so there it is the rate the loop drew, not a
	// load set beforehand. 0 when every request arrives at once.
	OfferedRequestRate float64 `json:"offered_request_rate"`
	// RequestGoodput is completed requests meeting every --goodput level,
	// per second; null when no level was given (as vLLM writes it).
	RequestGoodput *float64 `json:"request_goodput" jsonschema:"nullable"`

	// TTFT: arrival to first token. TPOT: (e2el - ttft) / (output - 1),
	// for requests of more than one output token. ITL: every gap between
	// two output tokens, pooled (under the simple worker model, which
	// spreads decode evenly, each of a request's gaps is its TPOT). E2EL: arrival to
	// the last token. Percentiles interpolate linearly between ranks
	// (numpy's default); std is the population's (numpy's np.std).
	MeanTTFTMS   float64 `json:"mean_ttft_ms"`
	MedianTTFTMS float64 `json:"median_ttft_ms"`
	StdTTFTMS    float64 `json:"std_ttft_ms"`
	P90TTFTMS    float64 `json:"p90_ttft_ms"`
	P99TTFTMS    float64 `json:"p99_ttft_ms"`
	MeanTPOTMS   float64 `json:"mean_tpot_ms"`
	MedianTPOTMS float64 `json:"median_tpot_ms"`
	StdTPOTMS    float64 `json:"std_tpot_ms"`
	P90TPOTMS    float64 `json:"p90_tpot_ms"`
	P99TPOTMS    float64 `json:"p99_tpot_ms"`
	MeanITLMS    float64 `json:"mean_itl_ms"`
	MedianITLMS  float64 `json:"median_itl_ms"`
	StdITLMS     float64 `json:"std_itl_ms"`
	P90ITLMS     float64 `json:"p90_itl_ms"`
	P99ITLMS     float64 `json:"p99_itl_ms"`
	MeanE2ELMS   float64 `json:"mean_e2el_ms"`
	MedianE2ELMS float64 `json:"median_e2el_ms"`
	StdE2ELMS    float64 `json:"std_e2el_ms"`
	P90E2ELMS    float64 `json:"p90_e2el_ms"`
	P99E2ELMS    float64 `json:"p99_e2el_ms"`

	// PrefixHitRate: input tokens found in the chosen worker's cache when
	// the request started, over all input tokens. RouterOverlapRate: the
	// router's predicted overlap over input blocks. MeanOverlapRegretBlocks:
	// blocks of overlap the best available worker had beyond the chosen one.
	// The same in tokens, comparable across block sizes: a request's
	// overlap is min(blocks × block size, its input tokens), its regret
	// the best available worker's such overlap less the chosen one's.
	PrefixHitRate           float64 `json:"prefix_hit_rate"`
	RouterOverlapRate       float64 `json:"router_overlap_rate"`
	MeanOverlapRegretBlocks float64 `json:"mean_overlap_regret_blocks"`
	MeanRouterOverlapTokens float64 `json:"mean_router_overlap_tokens"`
	MeanOverlapRegretTokens float64 `json:"mean_overlap_regret_tokens"`
	// Queue wait: arrival to the start of prefill (router queue and the
	// worker's own), with the same statistics as the latencies.
	MeanQueueWaitMS   float64 `json:"mean_queue_wait_ms"`
	MedianQueueWaitMS float64 `json:"median_queue_wait_ms"`
	StdQueueWaitMS    float64 `json:"std_queue_wait_ms"`
	P90QueueWaitMS    float64 `json:"p90_queue_wait_ms"`
	P99QueueWaitMS    float64 `json:"p99_queue_wait_ms"`
	// Per worker rank, in (worker id, DP rank) order (one rank a worker
	// unless --dp-size says more): completed requests and their share; the
	// coefficient of variation of the counts (0 = perfectly even).
	WorkerRequests []int     `json:"worker_requests"`
	WorkerShare    []float64 `json:"worker_share"`
	WorkerShareCV  float64   `json:"worker_share_cv"`
	// RouterCommands is every command the host sent; EventsApplied the KV
	// events the router applied (0 in approximate mode, where none are sent).
	RouterCommands int `json:"router_commands"`
	EventsApplied  int `json:"events_applied"`
	// NumPreemptions are the times a worker took a running request's KV
	// blocks back to compute it again (vLLM's num_preemptions), over every
	// request; EvictedBlocks the cached blocks workers evicted to make room.
	NumPreemptions int `json:"num_preemptions"`
	EvictedBlocks  int `json:"evicted_blocks"`
	// Utilisation over the run's duration (the first arrival to the last
	// end), per rank in (worker id, DP rank) order and over the ranks (of
	// both pools, prefill's first, when disaggregated).
	// WorkerBusyShare is each rank's share of the duration busy: under the
	// iteration engine, a step running; under the simple engine, its
	// prefill server busy or a decode running. MeanBusyShare is their mean.
	WorkerBusyShare []float64 `json:"worker_busy_share"`
	MeanBusyShare   float64   `json:"mean_busy_share"`
	// KV cache usage is a rank's blocks in use over its capacity
	// (worker_kv_blocks), as vLLM's kv_cache_usage_perc gauge (a fraction
	// from 0 to 1): blocks requests hold, cached blocks no request holds
	// counting as free, as in vLLM's free queue. Under the simple engine a
	// request holds only its prompt's blocks (it keeps none for output
	// tokens), so its usage reads lower than the iteration engine's.
	// WorkerKVCacheUsage is each rank's time-weighted mean over the
	// duration, WorkerPeakKVCacheUsage its highest; MeanKVCacheUsage is
	// the mean of the ranks' means, PeakKVCacheUsage the highest any rank
	// reached.
	WorkerKVCacheUsage     []float64 `json:"worker_kv_cache_usage"`
	WorkerPeakKVCacheUsage []float64 `json:"worker_peak_kv_cache_usage"`
	MeanKVCacheUsage       float64   `json:"mean_kv_cache_usage"`
	PeakKVCacheUsage       float64   `json:"peak_kv_cache_usage"`
	// Pools are each pool's own figures when prefill and decode are
	// disaggregated (prefill, then decode); the figures above are end to
	// end, worker_requests over the ranks of both pools, prefill's first.
	Pools []PoolMetrics `json:"pools,omitempty"`
	// Tiers are the lower tiers' figures (tiers.go), when the cluster has
	// any, and PrefixHitRateAcrossTiers the input tokens found cached on
	// the GPU or restored from a lower tier, over all input tokens.
	Tiers []TierMetrics `json:"tiers,omitempty"`
	// With an imperfect event channel (the report's event_channel):
	// EventsLost and EventsDuplicated are what the channel did to the KV
	// events, EventIDGaps and EventIDRepeats the event ids the routers saw
	// not follow the one before on their rank (their evidence: a gap for a
	// lost event, a repeat for a duplicate, a late one, or a restart's
	// renumbering), summed over the routers.
	EventsLost       *int `json:"events_lost,omitempty"`
	EventsDuplicated *int `json:"events_duplicated,omitempty"`
	EventIDGaps      *int `json:"event_id_gaps,omitempty"`
	EventIDRepeats   *int `json:"event_id_repeats,omitempty"`
	// With DP attention (cluster dp_attention): LockstepWaitMS is the step
	// time the ranks spent waiting on their slowest sibling, summed over
	// them, and WorkerLockstepWaitMS each rank's, in (worker, rank) order:
	// the load imbalance's cost.
	LockstepWaitMS       *float64  `json:"lockstep_wait_ms,omitempty"`
	WorkerLockstepWaitMS []float64 `json:"worker_lockstep_wait_ms,omitempty"`
	// Hardware are the hardware pools' figures (hardware.go), with a
	// cluster file.
	Hardware                 []HardwareMetrics `json:"hardware,omitempty"`
	PrefixHitRateAcrossTiers *float64          `json:"prefix_hit_rate_across_tiers,omitempty"`
	// Classes are each policy class's own figures, in the config's order,
	// when the router's config has policy classes (absent without).
	Classes []ClassMetrics `json:"classes,omitempty"`
	// Agentic are an agent trace's figures: plays, kinds, subagents.
	Agentic *AgenticMetrics `json:"agentic,omitempty"`
	// OneRouter, with several router replicas, is the same replay with one
	// router: what the replicas cost.
	OneRouter *OneRouter `json:"one_router,omitempty"`
}

// OneRouter are the figures of a replay with one router, beside those of
// several replicas.
type OneRouter struct {
	PrefixHitRate float64 `json:"prefix_hit_rate"`
	MeanTTFTMS    float64 `json:"mean_ttft_ms"`
	MedianTTFTMS  float64 `json:"median_ttft_ms"`
	P99TTFTMS     float64 `json:"p99_ttft_ms"`
}

// OneRouterOf takes one router's figures from its metrics.
func OneRouterOf(m *Metrics) *OneRouter {
	return &OneRouter{PrefixHitRate: m.PrefixHitRate, MeanTTFTMS: m.MeanTTFTMS, MedianTTFTMS: m.MedianTTFTMS, P99TTFTMS: m.P99TTFTMS}
}

// PoolMetrics are one pool's figures: its router's placements, its queue
// (prefill: arrival to the start of prefill; decode: the KV's arrival to
// the request joining a decode batch) and its spread.
type PoolMetrics struct {
	Role string `json:"role"`
	// Requests were sent to the pool's router; Completed ran their part
	// there to its end (prefill: the first token); Rejected were turned
	// away in the pool, by its router or its workers (by error code in
	// RejectedByReason). Requests = Completed + Rejected.
	Requests         int            `json:"requests"`
	Completed        int            `json:"completed"`
	Rejected         int            `json:"rejected"`
	RejectedByReason map[string]int `json:"rejected_by_reason"`
	// PrefixHitRate (prefill): input tokens found in the cache over all
	// input tokens, of the requests it prefilled (the end-to-end rate
	// counts completed requests only).
	PrefixHitRate *float64 `json:"prefix_hit_rate,omitempty"`
	// Prefill: arrival to the first token, made there. Decode: the first
	// token to the prompt's KV on the decode pool (the transfer), and the
	// gaps between the tokens made there.
	MeanTTFTMS              float64   `json:"mean_ttft_ms,omitempty"`
	MedianTTFTMS            float64   `json:"median_ttft_ms,omitempty"`
	P99TTFTMS               float64   `json:"p99_ttft_ms,omitempty"`
	MeanTransferMS          float64   `json:"mean_transfer_ms,omitempty"`
	P99TransferMS           float64   `json:"p99_transfer_ms,omitempty"`
	MeanITLMS               float64   `json:"mean_itl_ms,omitempty"`
	P99ITLMS                float64   `json:"p99_itl_ms,omitempty"`
	RouterOverlapRate       float64   `json:"router_overlap_rate"`
	MeanOverlapRegretBlocks float64   `json:"mean_overlap_regret_blocks"`
	MeanRouterOverlapTokens float64   `json:"mean_router_overlap_tokens"`
	MeanOverlapRegretTokens float64   `json:"mean_overlap_regret_tokens"`
	MeanQueueWaitMS         float64   `json:"mean_queue_wait_ms"`
	MedianQueueWaitMS       float64   `json:"median_queue_wait_ms"`
	P99QueueWaitMS          float64   `json:"p99_queue_wait_ms"`
	WorkerRequests          []int     `json:"worker_requests"`
	WorkerShare             []float64 `json:"worker_share"`
	WorkerShareCV           float64   `json:"worker_share_cv"`
	RouterCommands          int       `json:"router_commands"`
	EventsApplied           int       `json:"events_applied"`
	// NumPreemptions and EvictedBlocks are the pool's workers'.
	NumPreemptions int `json:"num_preemptions"`
	EvictedBlocks  int `json:"evicted_blocks"`
	// Utilisation: as the end-to-end figures, over the pool's ranks (and
	// the same duration).
	WorkerBusyShare        []float64 `json:"worker_busy_share"`
	MeanBusyShare          float64   `json:"mean_busy_share"`
	WorkerKVCacheUsage     []float64 `json:"worker_kv_cache_usage"`
	WorkerPeakKVCacheUsage []float64 `json:"worker_peak_kv_cache_usage"`
	MeanKVCacheUsage       float64   `json:"mean_kv_cache_usage"`
	PeakKVCacheUsage       float64   `json:"peak_kv_cache_usage"`
}

// Cost is what computing one policy's replay took on this machine: not
// deterministic, kept apart from Metrics.
type Cost struct {
	Policy             string  `json:"policy"`
	WallMS             float64 `json:"wall_ms"`
	RouterMS           float64 `json:"router_ms"`
	RouterCommandsPerS float64 `json:"router_commands_per_s"`
}

// SLO is a service level per request, in ms, as vLLM's --goodput takes it
// (ttft:MS tpot:MS e2el:MS); a zero level is not set.
type SLO struct {
	TTFTMS float64 `json:"ttft_ms,omitempty"`
	TPOTMS float64 `json:"tpot_ms,omitempty"`
	E2ELMS float64 `json:"e2el_ms,omitempty"`
}

// Set reports whether any level is given.
func (s SLO) Set() bool { return s.TTFTMS > 0 || s.TPOTMS > 0 || s.E2ELMS > 0 }

// ParseSLO reads vLLM's --goodput form: KEY:MS pairs with keys ttft, tpot
// and e2el, each at most once.
func ParseSLO(pairs []string) (SLO, error) {
	var s SLO
	for _, p := range pairs {
		key, value, ok := strings.Cut(p, ":")
		ms, err := strconv.ParseFloat(value, 64)
		if !ok || err != nil || !(ms > 0) || math.IsInf(ms, 0) {
			return s, fmt.Errorf("--goodput %q: expected KEY:MS with KEY ttft, tpot or e2el and MS > 0 (as vLLM's benchmark takes it)", p)
		}
		var at *float64
		switch key {
		case "ttft":
			at = &s.TTFTMS
		case "tpot":
			at = &s.TPOTMS
		case "e2el":
			at = &s.E2ELMS
		default:
			return s, fmt.Errorf("--goodput %q: %q is not ttft, tpot or e2el", p, key)
		}
		if *at != 0 {
			return s, fmt.Errorf("--goodput: %s is given twice", key)
		}
		*at = ms
	}
	return s, nil
}

// sample is n equal observations of v: a request's ITL gaps, all equal
// under the simple worker model, are one sample instead of n.
type sample struct {
	v float64
	n uint64
}

// stats are the five figures reported for each latency.
type stats struct{ mean, median, std, p90, p99 float64 }

// appendGaps appends a request's gaps between output tokens to samples.
func appendGaps(samples []sample, gaps []cluster.Gap) []sample {
	for _, g := range gaps {
		samples = append(samples, sample{g.MS, g.N})
	}
	return samples
}

// summarize computes the statistics over the samples (sorting them). The
// percentiles are numpy's default: the value at rank p/100 * (N - 1) of the
// N sorted observations, interpolated linearly between its neighbours.
func summarize(xs []sample) stats {
	var n uint64
	var sum float64
	for _, x := range xs {
		n += x.n
		sum += float64(x.v * float64(x.n)) // rounded alone: the same on every platform
	}
	if n == 0 {
		return stats{}
	}
	slices.SortFunc(xs, func(a, b sample) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	mean := sum / float64(n)
	var ss float64
	for _, x := range xs {
		d := x.v - mean
		ss += float64(float64(d*d) * float64(x.n))
	}
	// at is the observation of rank k (from 0) in sorted order. It walks on
	// from the last rank asked for, back to the start only when asked for
	// one below it: the ranks come nearly in order.
	i, below := 0, uint64(0) // xs[i] holds ranks below .. below+xs[i].n-1
	at := func(k uint64) float64 {
		if k < below {
			i, below = 0, 0
		}
		for k >= below+xs[i].n {
			below += xs[i].n
			i++
		}
		return xs[i].v
	}
	pct := func(p float64) float64 {
		pos := float64(p / 100 * float64(n-1)) // rounded alone: no fused multiply-add on any platform
		lo := math.Floor(pos)
		a := at(uint64(lo))
		if lo == pos {
			return a
		}
		b := at(uint64(lo) + 1)
		return a + float64((b-a)*(pos-lo))
	}
	return stats{mean: mean, median: pct(50), p90: pct(90), p99: pct(99), std: math.Sqrt(ss / float64(n))}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// metrics computes the policy's metrics from the replayed requests: the
// per-request figures from their Records (kept, and returned, when
// Options.Records asks), so that the rows and the report cannot disagree;
// the router's own (overlap, regret, spread) and the pooled ITL gaps from
// the host's state.
func (h *host) metrics(trace []Request) (Metrics, []Record) {
	m := Metrics{Policy: string(h.opt.Router.Policy), Mode: "kv_events", Requests: len(trace), RejectedByReason: map[string]int{}}
	gaps, repeats := 0, 0
	for _, p := range h.pools {
		commands, applied := p.counts()
		m.RouterCommands += commands
		m.EventsApplied += applied
		for _, rp := range p.replicas {
			gaps, repeats = gaps+rp.eventIDGaps, repeats+rp.eventIDRepeats
		}
	}
	if !h.opt.Signals.Perfect() { // a perfect channel's gaps (a skipped event's id leaves one) are not the channel's doing
		m.EventsLost, m.EventsDuplicated, m.EventIDGaps, m.EventIDRepeats = ptr(h.channel.lost), ptr(h.channel.dup), ptr(gaps), ptr(repeats)
	}
	for _, w := range h.order {
		m.EvictedBlocks += w.Counts().Evicted
	}
	if !h.opt.Router.KVEvents {
		m.Mode = "approximate"
	}
	m.WorkerRequests = make([]int, len(h.order))
	var recs []Record
	agentic := len(trace) > 0 && trace[0].Agent != nil // its figures need every record
	keep := h.opt.Records || agentic
	if keep {
		recs = make([]Record, 0, len(trace))
	}
	var hitTokens, overlap, islBlocks, regret, overlapTokens, regretTokens float64
	var ttft, tpot, itl, e2el, wait []sample
	first, last, lastArrival := math.Inf(1), 0.0, 0.0
	good := 0
	classes := newClassTallies(&h.opt.Router)
	hardware := h.newHardwareTallies()
	for i := range trace {
		r := h.byID[trace[i].ID]
		first, last = math.Min(first, r.Arrival), math.Max(last, r.doneAt)
		lastArrival = math.Max(lastArrival, r.Arrival)
		rec := h.record(r)
		if keep {
			recs = append(recs, rec)
		}
		meets := h.opt.Goodput.Meets(&rec) // never a rejected one
		classes.add(r, &rec, meets)
		hardware.add(r, &rec)
		m.NumPreemptions += rec.Preemptions
		if rec.Rejected != "" {
			m.Rejected++
			m.RejectedByReason[rec.Rejected]++
			continue
		}
		m.Completed++
		m.WorkerRequests[r.worker.idx]++
		if r.dec.worker != nil {
			m.WorkerRequests[r.dec.worker.idx]++
		}
		m.TotalInputTokens += rec.InputTokens
		m.TotalOutputTokens += rec.OutputTokens
		hitTokens += float64(rec.CachedTokens)
		overlap += float64(r.overlap)
		islBlocks += float64(r.islBlocks)
		regret += float64(r.best - r.overlap)
		chosen, best := h.overlapTokens(r, r.overlap), h.overlapTokens(r, r.best)
		overlapTokens += float64(chosen)
		regretTokens += float64(best - chosen)
		if rec.OutputTokens > 1 {
			tpot = append(tpot, sample{rec.TPOTMS, 1})
			if len(r.work.Gaps) > 0 {
				itl = appendGaps(itl, r.work.Gaps)
			} else { // the simple engine: every gap is the same
				itl = append(itl, sample{rec.TPOTMS, rec.OutputTokens - 1})
			}
		}
		ttft = append(ttft, sample{rec.TTFTMS, 1})
		e2el = append(e2el, sample{rec.E2ELMS, 1})
		wait = append(wait, sample{rec.QueueWaitMS, 1})
		if meets {
			good++
		}
	}
	if last > first {
		m.Duration = (last - first) / 1000
		m.RequestThroughput = float64(m.Completed) / m.Duration
		m.OutputThroughput = float64(m.TotalOutputTokens) / m.Duration
		m.TotalTokenThroughput = float64(m.TotalInputTokens+m.TotalOutputTokens) / m.Duration
		if h.opt.Goodput.Set() {
			m.RequestGoodput = ptr(float64(good) / m.Duration)
		}
	} else if h.opt.Goodput.Set() {
		m.RequestGoodput = ptr(0.0)
	}
	if m.TotalInputTokens > 0 {
		m.PrefixHitRate = hitTokens / float64(m.TotalInputTokens)
	}
	if islBlocks > 0 {
		m.RouterOverlapRate = overlap / islBlocks
	}
	if m.Completed > 0 {
		m.MeanOverlapRegretBlocks = regret / float64(m.Completed)
		m.MeanRouterOverlapTokens = overlapTokens / float64(m.Completed)
		m.MeanOverlapRegretTokens = regretTokens / float64(m.Completed)
	}
	s := summarize(ttft)
	m.MeanTTFTMS, m.MedianTTFTMS, m.StdTTFTMS, m.P90TTFTMS, m.P99TTFTMS = s.mean, s.median, s.std, s.p90, s.p99
	s = summarize(tpot)
	m.MeanTPOTMS, m.MedianTPOTMS, m.StdTPOTMS, m.P90TPOTMS, m.P99TPOTMS = s.mean, s.median, s.std, s.p90, s.p99
	s = summarize(itl)
	m.MeanITLMS, m.MedianITLMS, m.StdITLMS, m.P90ITLMS, m.P99ITLMS = s.mean, s.median, s.std, s.p90, s.p99
	s = summarize(e2el)
	m.MeanE2ELMS, m.MedianE2ELMS, m.StdE2ELMS, m.P90E2ELMS, m.P99E2ELMS = s.mean, s.median, s.std, s.p90, s.p99
	s = summarize(wait)
	m.MeanQueueWaitMS, m.MedianQueueWaitMS, m.StdQueueWaitMS, m.P90QueueWaitMS, m.P99QueueWaitMS = s.mean, s.median, s.std, s.p90, s.p99
	m.WorkerShare, m.WorkerShareCV = shares(m.WorkerRequests)
	m.OfferedRequestRate = offeredRate(len(trace), first, lastArrival)
	m.Classes = classes.metrics(m.Duration, h.opt.Goodput.Set())
	ranks := h.utilisation(first, last)
	f := utilFiguresOf(ranks)
	m.WorkerBusyShare, m.MeanBusyShare, m.WorkerKVCacheUsage = f.busy, f.meanBusy, f.meanKV
	m.WorkerPeakKVCacheUsage, m.MeanKVCacheUsage, m.PeakKVCacheUsage = f.peakKV, f.meanMeanKV, f.peak
	m.Hardware = hardware.metrics(h, ranks)
	if h.opt.Cluster.DPAttention {
		m.WorkerLockstepWaitMS = make([]float64, len(h.order))
		total := 0.0
		for i, w := range h.order {
			m.WorkerLockstepWaitMS[i] = w.Counts().LockstepWaitMS
			total += m.WorkerLockstepWaitMS[i]
		}
		m.LockstepWaitMS = &total
	}
	if h.opt.Cluster.Disaggregated() {
		for _, p := range h.pools {
			pm := h.poolMetrics(p, trace)
			own := make([]rankUtil, 0, len(p.order))
			for _, w := range p.order {
				own = append(own, ranks[w.idx])
			}
			f := utilFiguresOf(own)
			pm.WorkerBusyShare, pm.MeanBusyShare, pm.WorkerKVCacheUsage = f.busy, f.meanBusy, f.meanKV
			pm.WorkerPeakKVCacheUsage, pm.MeanKVCacheUsage, pm.PeakKVCacheUsage = f.peakKV, f.meanMeanKV, f.peak
			m.Pools = append(m.Pools, pm)
		}
	}
	if m.Tiers = h.tierMetrics(trace); len(m.Tiers) > 0 {
		rate := 0.0
		if m.TotalInputTokens > 0 {
			restored := 0.0
			for _, t := range m.Tiers {
				restored += float64(t.RestoredTokens)
			}
			rate = (hitTokens + restored) / float64(m.TotalInputTokens)
		}
		m.PrefixHitRateAcrossTiers = &rate
	}
	if agentic {
		m.Agentic = h.agenticMetrics(trace, recs)
	}
	if !h.opt.Records {
		recs = nil
	}
	return m, recs
}

// poolMetrics computes one pool's figures.
func (h *host) poolMetrics(p *pool, trace []Request) PoolMetrics {
	pm := PoolMetrics{Role: string(p.role), WorkerRequests: make([]int, len(p.order)), RejectedByReason: map[string]int{}}
	pm.RouterCommands, pm.EventsApplied = p.counts()
	for _, w := range p.order {
		n := w.Counts()
		pm.NumPreemptions += n.Preemptions
		pm.EvictedBlocks += n.Evicted
	}
	decode := p.role == protocol.RoleDecode
	var overlap, islBlocks, regret, overlapTokens, regretTokens, hit, input float64
	var wait, first, transfer, itl []sample
	for i := range trace {
		r := h.byID[trace[i].ID]
		ph := r.phase(p)
		if !ph.sent {
			continue
		}
		pm.Requests++
		switch {
		case r.rejected != "" && r.dec.sent == decode: // it ended here
			pm.Rejected++
			pm.RejectedByReason[string(r.rejected)]++
		default:
			pm.Completed++
			if !decode {
				hit += float64(min(uint64(r.work.HitBlocks)*h.opt.Cluster.BlockSize, r.InputTokens))
				input += float64(r.InputTokens)
			}
		}
		if ph.worker == nil || (r.rejected != "" && decode) {
			continue
		}
		pm.WorkerRequests[ph.worker.idx-p.order[0].idx]++
		overlap += float64(ph.overlap)
		islBlocks += float64(r.islBlocks)
		regret += float64(ph.best - ph.overlap)
		chosen, best := h.overlapTokens(r, ph.overlap), h.overlapTokens(r, ph.best)
		overlapTokens += float64(chosen)
		regretTokens += float64(best - chosen)
		if p.role == protocol.RoleDecode {
			wait = append(wait, sample{r.work.AdmittedAt - ph.sentAt, 1})
			transfer = append(transfer, sample{ph.sentAt - r.work.FirstToken, 1})
			itl = appendGaps(itl, r.work.Gaps)
		} else if r.work.PrefillStart > 0 || r.work.FirstToken > 0 {
			wait = append(wait, sample{r.work.PrefillStart - r.Arrival, 1})
			first = append(first, sample{r.work.FirstToken - r.Arrival, 1})
		}
	}
	if !decode {
		rate := 0.0
		if input > 0 {
			rate = hit / input
		}
		pm.PrefixHitRate = &rate
	}
	st := summarize(first)
	pm.MeanTTFTMS, pm.MedianTTFTMS, pm.P99TTFTMS = st.mean, st.median, st.p99
	st = summarize(transfer)
	pm.MeanTransferMS, pm.P99TransferMS = st.mean, st.p99
	st = summarize(itl)
	pm.MeanITLMS, pm.P99ITLMS = st.mean, st.p99
	if islBlocks > 0 {
		pm.RouterOverlapRate = overlap / islBlocks
	}
	if n := len(wait); n > 0 {
		pm.MeanOverlapRegretBlocks = regret / float64(n)
		pm.MeanRouterOverlapTokens = overlapTokens / float64(n)
		pm.MeanOverlapRegretTokens = regretTokens / float64(n)
	}
	st = summarize(wait)
	pm.MeanQueueWaitMS, pm.MedianQueueWaitMS, pm.P99QueueWaitMS = st.mean, st.median, st.p99
	pm.WorkerShare, pm.WorkerShareCV = shares(pm.WorkerRequests)
	return pm
}

// overlapTokens is an overlap of blocks in r's tokens: a partial last
// block counts only the tokens it holds.
func (h *host) overlapTokens(r *simRequest, blocks uint64) uint64 {
	return min(blocks*h.opt.Cluster.BlockSize, r.InputTokens)
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

// counts are the commands the pool's router replicas were sent and the KV
// events they applied, in all.
func (p *pool) counts() (commands, applied int) {
	for _, rp := range p.replicas {
		commands += rp.router.commands
		applied += rp.eventsApplied
	}
	return commands, applied
}
