package replay

// HardwareMetrics are one hardware pool's figures (a cluster file's pool),
// so that a team sees how a mixed fleet shares the load: the requests its
// workers served and how they fared, and how busy and full it ran.
type HardwareMetrics struct {
	Pool          string  `json:"pool"`
	Profile       string  `json:"profile"`
	Workers       int     `json:"workers"`
	RelativeSpeed float64 `json:"relative_speed"`
	// Completed are the requests it served to their end, RequestShare
	// their share of all completed; PrefixHitRate their input tokens found
	// in its GPU caches over their input tokens.
	Completed     int     `json:"completed"`
	RequestShare  float64 `json:"request_share"`
	PrefixHitRate float64 `json:"prefix_hit_rate"`
	MeanTTFTMS    float64 `json:"mean_ttft_ms"`
	P99TTFTMS     float64 `json:"p99_ttft_ms"`
	MeanE2ELMS    float64 `json:"mean_e2el_ms"`
	// MeanBusyShare and MeanKVCacheUsage are its ranks' means, as the
	// cluster's.
	MeanBusyShare    float64 `json:"mean_busy_share"`
	MeanKVCacheUsage float64 `json:"mean_kv_cache_usage"`
}

// hardwareTallies gather each hardware pool's figures as the metrics'
// pass goes over the requests' records (classTallies' way): nil without
// hardware pools.
type hardwareTallies struct {
	out              []HardwareMetrics
	ttft             [][]sample
	input, hit, e2el []float64
	completed        int
}

func (h *host) newHardwareTallies() *hardwareTallies {
	n := len(h.opt.Cluster.Hardware)
	if n == 0 {
		return nil
	}
	return &hardwareTallies{out: make([]HardwareMetrics, n), ttft: make([][]sample, n),
		input: make([]float64, n), hit: make([]float64, n), e2el: make([]float64, n)}
}

// add counts a completed request on the pool of the worker that served it.
func (t *hardwareTallies) add(r *simRequest, rec *Record) {
	if t == nil || rec.Rejected != "" || r.worker == nil {
		return
	}
	k := r.worker.hardware
	t.completed++
	t.out[k].Completed++
	t.input[k] += float64(rec.InputTokens)
	t.hit[k] += float64(rec.CachedTokens)
	t.e2el[k] += rec.E2ELMS
	t.ttft[k] = append(t.ttft[k], sample{rec.TTFTMS, 1})
}

// metrics are each hardware pool's figures, with its ranks' utilisation;
// nil without hardware pools.
func (t *hardwareTallies) metrics(h *host, ranks []rankUtil) []HardwareMetrics {
	if t == nil {
		return nil
	}
	util := make([][]rankUtil, len(t.out))
	for _, w := range h.order {
		util[w.hardware] = append(util[w.hardware], ranks[w.idx])
	}
	for k, hw := range h.opt.Cluster.Hardware {
		m := &t.out[k]
		m.Pool, m.Profile, m.Workers, m.RelativeSpeed = hw.Name, hw.Profile.Name, hw.Workers, hw.RelativeSpeed
		if t.completed > 0 {
			m.RequestShare = float64(m.Completed) / float64(t.completed)
		}
		if t.input[k] > 0 {
			m.PrefixHitRate = t.hit[k] / t.input[k]
		}
		if m.Completed > 0 {
			st := summarize(t.ttft[k])
			m.MeanTTFTMS, m.P99TTFTMS, m.MeanE2ELMS = st.mean, st.p99, t.e2el[k]/float64(m.Completed)
		}
		f := utilFiguresOf(util[k])
		m.MeanBusyShare, m.MeanKVCacheUsage = f.meanBusy, f.meanMeanKV
	}
	return t.out
}
