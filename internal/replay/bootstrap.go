package replay

import (
	"math"
	"math/bits"
	"slices"
)

// The paired bootstrap: how sure a contender's difference to the baseline
// is, from the requests themselves. Both ran the same requests (the same
// trace, or the same generated workload at each repeat's seed), so one
// resample of the sessions, each with all its requests in every repeat,
// weighs both alike; the interval is the 2.5 and 97.5 percentiles of the
// ratio over the resamples. Sessions are the unit because a session's
// turns share a prefix and a worker: its requests are not independent.
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
// request as row i of every other contender's.
type bootSet struct {
	rows      []bootRow
	durationS float64 // the repeats' simulated seconds, summed: goodput's denominator
	byTTFT    []int32 // the completed rows, by TTFT
}

func newBootSet(rows []bootRow, durationS float64) *bootSet {
	s := &bootSet{rows: rows, durationS: durationS}
	for i := range rows {
		if rows[i].completed {
			s.byTTFT = append(s.byTTFT, int32(i))
		}
	}
	slices.SortStableFunc(s.byTTFT, func(a, b int32) int {
		x, y := rows[a].ttft, rows[b].ttft
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	return s
}

// values are the verdict metrics (verdictMetrics' order) of the set with
// each cluster weighed w[cluster] times (nil: once each).
func (s *bootSet) values(w []uint32) [4]float64 {
	weight := func(i int32) float64 {
		if w == nil {
			return 1
		}
		return float64(w[s.rows[i].cluster])
	}
	var n, sumTTFT, good, hit, input float64
	for i := range s.rows {
		r := &s.rows[i]
		if !r.completed {
			continue
		}
		k := weight(int32(i))
		n += k
		sumTTFT += float64(k * r.ttft)
		hit += float64(k * float64(r.hit))
		input += float64(k * float64(r.input))
		if r.good {
			good += k
		}
	}
	return [4]float64{sumTTFT / n, s.percentile(w, weight, n, 99), good / s.durationS, hit / input}
}

// percentile is numpy's linear percentile of the completed rows' TTFTs,
// each row counted weight(row) times: one walk of the sorted rows.
func (s *bootSet) percentile(w []uint32, weight func(int32) float64, n float64, p float64) float64 {
	if n == 0 {
		return math.NaN()
	}
	pos := float64(p / 100 * (n - 1))
	lo := math.Floor(pos)
	below := 0.0 // rows of rank below the current one
	var a float64
	found := false
	for _, i := range s.byTTFT {
		k := weight(i)
		if k == 0 {
			continue
		}
		v := s.rows[i].ttft
		if found { // the next rank after lo is this row's first
			return a + float64((pos-lo)*(v-a))
		}
		if lo < below+k {
			a = v
			if pos == lo || lo+1 < below+k { // both ranks are this row
				return a
			}
			found = true
		}
		below += k
	}
	return a
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

// pairedBootstrap gives, for each verdict metric, the ratio of other's
// value to base's and its 95% percentile interval over the resamples of
// clusters clusters; ok[m] is false where a ratio is not a finite number
// (a zero baseline), which has no interval.
func pairedBootstrap(base, other *bootSet, clusters int) (ratio [4]float64, ci [4][2]float64, ok [4]bool) {
	b, o := base.values(nil), other.values(nil)
	for m := range ratio {
		ratio[m] = o[m] / b[m]
		ok[m] = !math.IsNaN(ratio[m]) && !math.IsInf(ratio[m], 0)
	}
	draws := make([][]float64, len(ratio))
	for m := range draws {
		draws[m] = make([]float64, 0, bootstrapResamples)
	}
	rng := splitmix64(bootstrapSeed)
	w := make([]uint32, clusters)
	for range bootstrapResamples {
		clear(w)
		for range clusters {
			w[rng.below(uint64(clusters))]++
		}
		b, o := base.values(w), other.values(w)
		for m := range ratio {
			r := o[m] / b[m]
			if math.IsNaN(r) || math.IsInf(r, 0) {
				ok[m] = false
			}
			draws[m] = append(draws[m], r)
		}
	}
	for m := range ratio {
		if !ok[m] {
			continue
		}
		slices.Sort(draws[m])
		ci[m] = [2]float64{numpyPercentile(draws[m], 2.5), numpyPercentile(draws[m], 97.5)}
	}
	return ratio, ci, ok
}

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
