package cluster

// Usage is what a rank's utilisation figures are made from, kept as the
// run goes: a few float operations at each step or admission, so that a
// report needs no second pass over the run.
type Usage struct {
	// BusyMS is the simulated time the rank ran work.
	BusyMS float64
	// KVArea is its KV blocks in use integrated over time (blocks × ms),
	// and KVPeak the most in use at once.
	KVArea float64
	KVPeak int
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
