package replay

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"sync"
)

// The paired bootstrap: how sure a contender's difference to the baseline
// is, from the requests themselves. All ran the same requests (the same
// trace, or the same generated workload at each repeat's seed), so one
// resample of the sessions, each with all its requests in every repeat,
// weighs every contender alike; the interval is the 2.5 and 97.5
// percentiles of the ratio over the resamples. Sessions are the unit
// because a session's turns share a prefix and a worker: its requests are
// not independent.
const (
	bootstrapResamples = 2000
	bootstrapSeed      = 0x6f66666c696e6521 // fixed: the same intervals on every run
)

// bootRow is one request of one run, as the bootstrap reads it.
type bootRow struct {
	cluster    int32 // the session (or the request, when it has none), numbered from 0
	completed  bool
	good       bool // met every --goodput level
	ttft       float64
	hit, input uint64
}

// bootSet is one contender's rows, every repeat's pooled, row i the same
// request as row i of every other contender's; and what a resample reads
// of them: each cluster's sums, and the completed rows by TTFT.
type bootSet struct {
	rows      []bootRow
	durationS float64 // the repeats' simulated seconds, summed: goodput's denominator
	// Per cluster: completed requests, their TTFTs summed, those that met
	// every level, cached and input tokens.
	n, ttft, good, hit, input []float64
	byTTFT                    []timed
}

// timed is a completed row's TTFT and cluster, in TTFT order.
type timed struct {
	ttft    float64
	cluster int32
}

func newBootSet(rows []bootRow, durationS float64, clusters int) *bootSet {
	s := &bootSet{rows: rows, durationS: durationS, n: make([]float64, clusters), ttft: make([]float64, clusters),
		good: make([]float64, clusters), hit: make([]float64, clusters), input: make([]float64, clusters)}
	for i := range rows {
		r := &rows[i]
		if !r.completed {
			continue
		}
		c := r.cluster
		s.n[c]++
		s.ttft[c] += r.ttft
		s.hit[c] += float64(r.hit)
		s.input[c] += float64(r.input)
		if r.good {
			s.good[c]++
		}
		s.byTTFT = append(s.byTTFT, timed{r.ttft, c})
	}
	slices.SortStableFunc(s.byTTFT, func(a, b timed) int { return cmp.Compare(a.ttft, b.ttft) })
	return s
}

// full is the verdict metrics (verdictMetrics' order) of the set as the
// report computes them, row by row in trace order: the point estimate,
// the same bits as the report's figures.
func (s *bootSet) full() [4]float64 {
	var n, sumTTFT, good, hit, input float64
	for i := range s.rows {
		r := &s.rows[i]
		if !r.completed {
			continue
		}
		n++
		sumTTFT += r.ttft
		hit += float64(r.hit)
		input += float64(r.input)
		if r.good {
			good++
		}
	}
	return [4]float64{sumTTFT / n, s.percentile(nil, n, 99), good / s.durationS, hit / input}
}

// resampled is the verdict metrics with each cluster counted w[cluster]
// times: sums over the clusters, and one walk of the rows by TTFT.
func (s *bootSet) resampled(w []uint32) [4]float64 {
	var n, sumTTFT, good, hit, input float64
	for c, k := range w {
		if k == 0 {
			continue
		}
		f := float64(k)
		n += float64(f * s.n[c])
		sumTTFT += float64(f * s.ttft[c])
		good += float64(f * s.good[c])
		hit += float64(f * s.hit[c])
		input += float64(f * s.input[c])
	}
	return [4]float64{sumTTFT / n, s.percentile(w, n, 99), good / s.durationS, hit / input}
}

// percentile is numpy's linear percentile of the completed rows' TTFTs,
// each row counted w[its cluster] times (nil: once), n in all. It walks
// down from the longest: a high percentile is found within its first few
// rows.
func (s *bootSet) percentile(w []uint32, n float64, p float64) float64 {
	if n == 0 {
		return math.NaN()
	}
	pos := float64(p / 100 * (n - 1))
	lo := math.Floor(pos)
	above := 0.0 // rows of rank above the current one
	var next float64
	haveNext := pos == lo // the rank after lo is not needed
	for i := len(s.byTTFT) - 1; i >= 0; i-- {
		t := &s.byTTFT[i]
		k := 1.0
		if w != nil {
			if k = float64(w[t.cluster]); k == 0 {
				continue
			}
		}
		first := n - above - k // this row holds ranks first .. first+k-1
		if !haveNext && lo+1 >= first {
			next, haveNext = t.ttft, true
		}
		if lo >= first {
			if pos == lo {
				return t.ttft
			}
			return t.ttft + float64((pos-lo)*(next-t.ttft))
		}
		above += k
	}
	return math.NaN() // unreachable: the rows hold n ranks
}

// splitmix64 is the bootstrap's generator: written here, not taken from
// math/rand, so that a Go release cannot change an interval.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// below is uniform in [0, n): Lemire's multiply and shift, rejecting the
// few draws that would bias it.
func (s *splitmix64) below(n uint64) uint64 {
	hi, lo := bits.Mul64(s.next(), n)
	if lo < n {
		for threshold := -n % n; lo < threshold; {
			hi, lo = bits.Mul64(s.next(), n)
		}
	}
	return hi
}

// resampleWeights draws resample b's clusters: each of the clusters
// drawn clusters times with replacement, from a generator of its own, so
// that a resample is the same whichever goroutine draws it.
func resampleWeights(w []uint32, b int) {
	clear(w)
	rng := splitmix64(bootstrapSeed ^ uint64(b)*0xd1342543de82ef95)
	for range w {
		w[rng.below(uint64(len(w)))]++
	}
}

// bootstrapOutcome is one contender's ratios to the baseline on the
// verdict metrics, their 95% intervals, and whether each is a finite
// number throughout (a zero baseline has no ratio).
type bootstrapOutcome struct {
	ratio [4]float64
	ci    [4][2]float64
	ok    [4]bool
}

// pairedBootstrap measures each of others against base over the same
// resamples of clusters clusters, jobs goroutines drawing them: each
// resample's baseline once for all the others.
func pairedBootstrap(base *bootSet, others []*bootSet, clusters, jobs int) []bootstrapOutcome {
	out := make([]bootstrapOutcome, len(others))
	b := base.full()
	for i, o := range others {
		v := o.full()
		for m := range v {
			out[i].ratio[m] = v[m] / b[m]
			out[i].ok[m] = finite(out[i].ratio[m])
		}
	}
	// draws[i][m][b]: other i's ratio on metric m at resample b.
	draws := make([][4][]float64, len(others))
	for i := range draws {
		for m := range draws[i] {
			draws[i][m] = make([]float64, bootstrapResamples)
		}
	}
	var wg sync.WaitGroup
	jobs = max(1, min(jobs, bootstrapResamples))
	for j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := make([]uint32, clusters)
			for r := j; r < bootstrapResamples; r += jobs {
				resampleWeights(w, r)
				bv := base.resampled(w)
				for i, o := range others {
					ov := o.resampled(w)
					for m := range ov {
						draws[i][m][r] = ov[m] / bv[m]
					}
				}
			}
		}()
	}
	wg.Wait()
	for i := range others {
		for m := range draws[i] {
			d := draws[i][m]
			if !out[i].ok[m] || slices.ContainsFunc(d, func(x float64) bool { return !finite(x) }) {
				out[i].ok[m] = false
				continue
			}
			slices.Sort(d)
			out[i].ci[m] = [2]float64{numpyPercentile(d, 2.5), numpyPercentile(d, 97.5)}
		}
	}
	return out
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// numpyPercentile is numpy's default percentile of sorted xs.
func numpyPercentile(xs []float64, p float64) float64 {
	pos := float64(p / 100 * float64(len(xs)-1))
	lo := math.Floor(pos)
	i := int(lo)
	if i+1 >= len(xs) {
		return xs[len(xs)-1]
	}
	return xs[i] + float64((pos-lo)*(xs[i+1]-xs[i]))
}
