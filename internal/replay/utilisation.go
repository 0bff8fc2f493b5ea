package replay

// rankUtil are one rank's figures over a run's window: the share of it
// busy, and its KV cache usage (blocks in use over capacity), the
// time-weighted mean and the peak.
type rankUtil struct{ busy, meanKV, peakKV float64 }

// utilisation is each rank's figures, in h.order, over the window from
// the first arrival to the last end (from, to in ms); all 0 for a window of
// no length.
func (h *host) utilisation(from, to float64) []rankUtil {
	out := make([]rankUtil, len(h.order))
	span := to - from
	if !(span > 0) {
		return out
	}
	for i, w := range h.order {
		capacity := float64(w.kvBlocks)
		// Every request gave its blocks back by the last end: the KV area
		// is whole.
		u := w.Usage()
		out[i] = rankUtil{busy: u.BusyMS / span, meanKV: u.KVArea / float64(capacity*span),
			peakKV: float64(u.KVPeak) / capacity}
	}
	return out
}

// utilFigures are the report's utilisation fields of a set of ranks: each
// rank's, their mean (busy share, mean usage) and the highest peak.
type utilFigures struct {
	busy, meanKV, peakKV []float64
	meanBusy, meanMeanKV float64
	peak                 float64
}

func utilFiguresOf(ranks []rankUtil) utilFigures {
	f := utilFigures{busy: make([]float64, len(ranks)), meanKV: make([]float64, len(ranks)), peakKV: make([]float64, len(ranks))}
	for i, r := range ranks { // in rank order: the sums are the same bytes every run
		f.busy[i], f.meanKV[i], f.peakKV[i] = r.busy, r.meanKV, r.peakKV
		f.meanBusy += r.busy
		f.meanMeanKV += r.meanKV
		f.peak = max(f.peak, r.peakKV)
	}
	if n := float64(len(ranks)); n > 0 {
		f.meanBusy /= n
		f.meanMeanKV /= n
	}
	return f
}

// offeredRate is n requests over the span of their arrivals (first to
// last, ms), per second; 0 when they all arrive at once.
func offeredRate(n int, first, last float64) float64 {
	if !(last > first) {
		return 0
	}
	return float64(n) / ((last - first) / 1000)
}
