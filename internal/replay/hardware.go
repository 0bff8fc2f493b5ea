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

// hardwareMetrics are each hardware pool's figures, from the requests'
// records and the ranks' utilisation; nil without hardware pools.
func (h *host) hardwareMetrics(trace []Request, ranks []rankUtil) []HardwareMetrics {
	c := &h.opt.Cluster
	if len(c.Hardware) == 0 {
		return nil
	}
	out := make([]HardwareMetrics, len(c.Hardware))
	ttft := make([][]sample, len(out))
	input, hit, e2el := make([]float64, len(out)), make([]float64, len(out)), make([]float64, len(out))
	completed := 0
	for i := range trace {
		r := h.byID[trace[i].ID]
		rec := h.record(r)
		if rec.Rejected != "" || r.worker == nil {
			continue
		}
		k := r.worker.hardware
		completed++
		out[k].Completed++
		input[k] += float64(rec.InputTokens)
		hit[k] += float64(rec.CachedTokens)
		e2el[k] += rec.E2ELMS
		ttft[k] = append(ttft[k], sample{rec.TTFTMS, 1})
	}
	util := make([][]rankUtil, len(out))
	for _, w := range h.order {
		util[w.hardware] = append(util[w.hardware], ranks[w.idx])
	}
	for k, hw := range c.Hardware {
		m := &out[k]
		m.Pool, m.Profile, m.Workers, m.RelativeSpeed = hw.Name, hw.Profile.Name, hw.Workers, hw.RelativeSpeed
		if completed > 0 {
			m.RequestShare = float64(m.Completed) / float64(completed)
		}
		if input[k] > 0 {
			m.PrefixHitRate = hit[k] / input[k]
		}
		if m.Completed > 0 {
			st := summarize(ttft[k])
			m.MeanTTFTMS, m.P99TTFTMS, m.MeanE2ELMS = st.mean, st.p99, e2el[k]/float64(m.Completed)
		}
		f := utilFiguresOf(util[k])
		m.MeanBusyShare, m.MeanKVCacheUsage = f.meanBusy, f.meanMeanKV
	}
	return out
}
