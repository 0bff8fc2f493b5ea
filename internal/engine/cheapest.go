package engine

import (
	"cmp"
	"maps"
	"math"
	"slices"

	"github.com/offline-router/offline-router/internal/selector"
)

// Placing among a role's ready ranks at temperature 0 under kv needs only
// the cheapest, and most ranks were reached by neither the index walk nor
// the active blocks (their overlap and hits are 0): such a rank's cost
// depends on its load alone. A rank with no prefill booked (pending 0,
// whose prefill load is exactly 0 at any time) then costs the same as any
// other with as many active decode blocks, and more blocks never cost
// less (the cost's float sum is monotone). So the role keeps those ranks
// grouped by decode blocks (decodeBuckets), and a placement costs one by
// one only the ranks reached and those with prefill booked, then walks the
// groups from the fewest blocks while they can tie or beat the best: the
// same choice, tie count and draw as costing every candidate, in time for
// the ranks reached, not the fleet.

// decodeBuckets are a role's ready ranks (by position in its candidate
// list) sorted by load: those with prefill booked, and the others by
// active decode blocks, each group in candidate order.
type decodeBuckets struct {
	byDecode   map[uint64][]int32 // decode blocks -> positions, ascending
	decodes    []uint64           // the keys of byDecode, ascending
	prefilling []int32            // positions with prefill booked, in no order
	at         []int32            // by position: its index in prefilling, or -1
}

// newDecodeBuckets files the ranks at positions 0, 1, ... by their loads:
// each group fills in candidate order, and the keys are sorted once.
func newDecodeBuckets(slots []uint32, loads []rankLoad) decodeBuckets {
	b := decodeBuckets{byDecode: map[uint64][]int32{}, at: make([]int32, len(slots))}
	for pos, s := range slots {
		b.at[pos] = -1
		if pf, d := bucketOf(&loads[s]); pf {
			b.at[pos] = int32(len(b.prefilling))
			b.prefilling = append(b.prefilling, int32(pos))
		} else {
			b.byDecode[d] = append(b.byDecode[d], int32(pos))
		}
	}
	b.decodes = slices.Sorted(maps.Keys(b.byDecode))
	return b
}

// bucketOf is where a load goes: prefilling, or the group of its decode
// blocks.
func bucketOf(l *rankLoad) (prefilling bool, decode uint64) {
	return l.prefill.pending > 0, l.decode
}

func (b *decodeBuckets) add(pos int32, l *rankLoad) {
	if pf, d := bucketOf(l); pf {
		b.at[pos] = int32(len(b.prefilling))
		b.prefilling = append(b.prefilling, pos)
	} else {
		ps, ok := b.byDecode[d]
		if !ok {
			i, _ := slices.BinarySearch(b.decodes, d)
			b.decodes = slices.Insert(b.decodes, i, d)
		}
		i, _ := slices.BinarySearch(ps, pos)
		b.byDecode[d] = slices.Insert(ps, i, pos)
	}
}

func (b *decodeBuckets) remove(pos int32, l *rankLoad) {
	if pf, d := bucketOf(l); pf {
		i, last := b.at[pos], b.prefilling[len(b.prefilling)-1]
		b.prefilling[i], b.at[last] = last, i
		b.prefilling = b.prefilling[:len(b.prefilling)-1]
		b.at[pos] = -1
	} else {
		ps := b.byDecode[d]
		i, _ := slices.BinarySearch(ps, pos)
		if ps = slices.Delete(ps, i, i+1); len(ps) > 0 {
			b.byDecode[d] = ps
			return
		}
		delete(b.byDecode, d)
		j, _ := slices.BinarySearch(b.decodes, d)
		b.decodes = slices.Delete(b.decodes, j, j+1)
	}
}

// move refiles the rank at pos from its old load to its new one.
func (b *decodeBuckets) move(pos int32, from, to *rankLoad) {
	fp, fd := bucketOf(from)
	if tp, td := bucketOf(to); fp == tp && (fp || fd == td) {
		return
	}
	b.remove(pos, from)
	b.add(pos, to)
}

// selectBucketed is selectCheapest for candidates that are a role's whole
// ready list (rr), from its buckets.
func (e *Engine) selectBucketed(d *demand, rr *roleRanks) selector.Result {
	b := &rr.buckets
	loads, overlap, hits, p := e.fleet.loads, e.overlap, e.hits, e.paramsFor(d)
	blocks := uint64(len(d.local)) + d.privateBlocks
	cost := func(pos int32) float64 {
		c := e.cheapCandidate(d, rr.slots[pos])
		return selector.CostOf(p, d.isl, c.Overlap, c.PrefillTokens, c.DecodeBlocks)
	}
	// The ranks costed one by one: those the walks reached (as the index
	// and the active tree list them: not a pass over every rank), and those
	// with prefill booked. A reached rank is left out of its decode group.
	e.reached = e.reached[:0]
	for _, r := range e.matched {
		if pos, ok := e.fleet.positionIn(rr, uint32(r)); ok {
			e.reached = append(e.reached, pos)
		}
	}
	for _, s := range e.active.Touched() {
		if pos, ok := e.fleet.positionIn(rr, s); ok {
			e.reached = append(e.reached, pos)
		}
	}
	slices.Sort(e.reached)
	e.reached = slices.Compact(e.reached)
	// Reached ranks with no prefill booked, by decode blocks then position:
	// the members each decode group must not count.
	e.grouped = e.grouped[:0]
	for _, pos := range e.reached {
		if pf, dec := bucketOf(&loads[rr.slots[pos]]); !pf {
			e.grouped = append(e.grouped, member{dec, pos})
		}
	}
	slices.SortFunc(e.grouped, compareMembers)
	e.single = append(e.single[:0], e.reached...)
	for _, pos := range b.prefilling {
		if s := rr.slots[pos]; overlap[s] == 0 && hits[s] == 0 {
			e.single = append(e.single, pos)
		}
	}
	best, ties := math.Inf(1), 0
	e.singleCost = e.singleCost[:0]
	for _, pos := range e.single {
		c := cost(pos)
		e.singleCost = append(e.singleCost, c)
		switch {
		case c < best:
			best, ties = c, 1
		case c == best:
			ties++
		}
	}
	// The groups, fewest decode blocks first, while they can tie or beat.
	e.tied = e.tied[:0]
	for _, dec := range b.decodes {
		c := selector.CostOf(p, d.isl, 0, 0, dec+blocks)
		if c > best {
			break
		}
		n := len(b.byDecode[dec]) - len(e.groupedIn(dec))
		switch {
		case n == 0:
			continue
		case c < best:
			best, ties = c, 0
			e.tied = e.tied[:0]
		}
		ties += n
		e.tied = append(e.tied, dec)
	}
	nth := 0
	if ties > 1 {
		nth = e.draws.Index(ties) // as selector.PickCheapest draws among the ties
	}
	pos := e.nthTied(rr, best, nth)
	chosen := e.cheapCandidate(d, rr.slots[pos])
	return selector.Result{Index: int(pos), Chosen: selector.Cost(p, d.isl, &chosen), Ties: ties, BestCost: best}
}

// member is a rank in a decode group: the group's blocks, its position.
type member struct {
	decode uint64
	pos    int32
}

func compareMembers(a, b member) int {
	if a.decode != b.decode {
		return cmp.Compare(a.decode, b.decode)
	}
	return cmp.Compare(a.pos, b.pos)
}

// groupedIn is the reached ranks in decode group dec (from e.grouped).
func (e *Engine) groupedIn(dec uint64) []member {
	lo, _ := slices.BinarySearchFunc(e.grouped, member{dec, 0}, compareMembers)
	hi, _ := slices.BinarySearchFunc(e.grouped, member{dec, math.MaxInt32}, compareMembers)
	return e.grouped[lo:hi]
}

// manyTiedGroups is how many tied decode groups nthTied searches by
// counting; past it, it lists the ties (O(ties log ties) rather than
// O(groups log² ranks)).
const manyTiedGroups = 8

// nthTied is the position of the nth (from 0) candidate, in candidate
// order, of those at cost best: the ranks costed one by one (e.single, at
// e.singleCost) and the unreached members of the tied decode groups
// (e.tied). It counts the tied candidates before a position and searches
// for the one where the count passes nth.
func (e *Engine) nthTied(rr *roleRanks, best float64, nth int) int32 {
	b := &rr.buckets
	e.tiedSingle = e.tiedSingle[:0]
	for i, pos := range e.single {
		if e.singleCost[i] == best {
			e.tiedSingle = append(e.tiedSingle, pos)
		}
	}
	// The reached members of the tied groups: costed one by one, so not
	// counted as group members.
	e.skip = e.skip[:0]
	for _, dec := range e.tied {
		for _, m := range e.groupedIn(dec) {
			e.skip = append(e.skip, m.pos)
		}
	}
	if len(e.tied) > manyTiedGroups {
		// Costs so large that decode blocks round away: list every tie.
		for _, dec := range e.tied {
			e.tiedSingle = append(e.tiedSingle, b.byDecode[dec]...)
		}
		slices.Sort(e.tiedSingle)
		slices.Sort(e.skip)
		e.tiedSingle = slices.DeleteFunc(e.tiedSingle, func(pos int32) bool {
			_, found := slices.BinarySearch(e.skip, pos)
			return found
		})
		return e.tiedSingle[nth]
	}
	slices.Sort(e.tiedSingle)
	slices.Sort(e.skip)
	// before counts the tied candidates at positions below x.
	before := func(x int32) int {
		n, _ := slices.BinarySearch(e.tiedSingle, x)
		for _, dec := range e.tied {
			i, _ := slices.BinarySearch(b.byDecode[dec], x)
			n += i
		}
		skipped, _ := slices.BinarySearch(e.skip, x)
		return n - skipped
	}
	// The smallest x with more than nth tied candidates at or below it.
	lo, hi := int32(0), int32(len(rr.slots)-1)
	for lo < hi {
		if mid := lo + (hi-lo)/2; before(mid+1) > nth {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
