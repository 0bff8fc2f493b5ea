package replay

// workerUtil is what a rank's utilisation figures are made from, kept as
// the run goes: a few float operations at each step or admission, so the
// report needs no second pass over the run.
type workerUtil struct {
	kv kvGauge
	// busyMS is the simulated time a step ran (iteration engine); under
	// the simple engine, spans holds it.
	busyMS float64
	spans  busySpans
}

// kvGauge integrates a rank's KV blocks in use over simulated time: the
// count is piecewise constant, changing only where set is called.
type kvGauge struct {
	inUse, peak int
	at          float64 // when inUse last changed
	area        float64 // blocks × ms up to at
}

// set records that inUse blocks are in use from t on (t never earlier
// than the last call's).
func (g *kvGauge) set(t float64, inUse int) {
	g.area += float64(float64(g.inUse) * (t - g.at)) // rounded alone: no fused multiply-add
	g.at, g.inUse = t, inUse
	g.peak = max(g.peak, inUse)
}

// busySpans is the length of a union of intervals given in order of their
// starts: the simple engine's requests, each busy on its worker from the
// start of its prefill to its last token (its prefill server's time, then
// its decode's), start in the order the FIFO prefill server takes them.
type busySpans struct {
	from, to, closed float64 // the span open [from, to]; closed: the total of the spans before it
	open             bool
}

func (b *busySpans) add(from, to float64) {
	switch {
	case !b.open:
		b.from, b.to, b.open = from, to, true
	case from > b.to:
		b.closed += b.to - b.from
		b.from, b.to = from, to
	default:
		b.to = max(b.to, to)
	}
}

// total is the union's length.
func (b *busySpans) total() float64 {
	if !b.open {
		return b.closed
	}
	return b.closed + (b.to - b.from)
}

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
	capacity := float64(h.opt.Cluster.TotalKVBlocks)
	for i, w := range h.order {
		busy := w.util.busyMS
		if w.iter == nil {
			busy = w.util.spans.total()
		}
		// Every request gave its blocks back by the last end: the gauge's
		// area is whole.
		out[i] = rankUtil{busy: busy / span, meanKV: w.util.kv.area / float64(capacity*span),
			peakKV: float64(w.util.kv.peak) / capacity}
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
