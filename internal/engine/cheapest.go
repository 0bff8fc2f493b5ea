package engine

import (
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
// active decode blocks, each group in candidate order. A rank that starts
// prefilling stays listed in its group, stale, until it goes to another
// group: a placement takes its rank from the idle group to prefilling and
// the request's end brings it back, and deleting it from a sorted group of
// a thousand ranks and inserting it again moved the group's memory twice
// a placement.
type decodeBuckets struct {
	byDecode   map[uint64]*decodeGroup // decode blocks -> its group
	decodes    []uint64                // the keys of byDecode, ascending
	prefilling []int32                 // positions with prefill booked, in no order
	at         []int32                 // by position: its index in prefilling, or -1
	groupOf    []*decodeGroup          // by position: the group listing it (stale while it prefills), or nil
}

// decodeGroup is the ranks with as many active decode blocks and no
// prefill booked (live), and ranks prefilling since they had as many.
type decodeGroup struct {
	decode  uint64
	members []int32 // positions, ascending: live and stale
	live    int     // members with no prefill booked
}

// newDecodeBuckets files the ranks at positions 0, 1, ... by their loads:
// each group fills in candidate order, and the keys are sorted once.
func newDecodeBuckets(slots []uint32, loads []rankLoad) decodeBuckets {
	b := decodeBuckets{byDecode: map[uint64]*decodeGroup{}, at: make([]int32, len(slots)), groupOf: make([]*decodeGroup, len(slots))}
	for pos, s := range slots {
		b.at[pos] = -1
		if pf, d := bucketOf(&loads[s]); pf {
			b.at[pos] = int32(len(b.prefilling))
			b.prefilling = append(b.prefilling, int32(pos))
		} else {
			g := b.byDecode[d]
			if g == nil {
				g = &decodeGroup{decode: d}
				b.byDecode[d] = g
			}
			g.members = append(g.members, int32(pos))
			g.live++
			b.groupOf[pos] = g
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

// move refiles the rank at pos from its old load to its new one.
func (b *decodeBuckets) move(pos int32, from, to *rankLoad) {
	fp, fd := bucketOf(from)
	tp, td := bucketOf(to)
	if fp == tp && (fp || fd == td) {
		return
	}
	if fp {
		i, last := b.at[pos], b.prefilling[len(b.prefilling)-1]
		b.prefilling[i], b.at[last] = last, i
		b.prefilling = b.prefilling[:len(b.prefilling)-1]
		b.at[pos] = -1
	} else {
		b.groupOf[pos].live--
	}
	if tp {
		b.at[pos] = int32(len(b.prefilling))
		b.prefilling = append(b.prefilling, pos)
		return
	}
	if g := b.groupOf[pos]; g != nil && g.decode == td {
		g.live++ // back in the group that lists it
		return
	}
	b.unlist(pos)
	g := b.byDecode[td]
	if g == nil {
		g = &decodeGroup{decode: td}
		b.byDecode[td] = g
		i, _ := slices.BinarySearch(b.decodes, td)
		b.decodes = slices.Insert(b.decodes, i, td)
	}
	i, _ := slices.BinarySearch(g.members, pos)
	g.members = slices.Insert(g.members, i, pos)
	g.live++
	b.groupOf[pos] = g
}

// unlist takes pos out of the group listing it, if one does, and drops
// the group once it lists none.
func (b *decodeBuckets) unlist(pos int32) {
	g := b.groupOf[pos]
	if g == nil {
		return
	}
	b.groupOf[pos] = nil
	i, _ := slices.BinarySearch(g.members, pos)
	if g.members = slices.Delete(g.members, i, i+1); len(g.members) > 0 {
		return
	}
	delete(b.byDecode, g.decode)
	j, _ := slices.BinarySearch(b.decodes, g.decode)
	b.decodes = slices.Delete(b.decodes, j, j+1)
}

// bucketScratch is selectBucketed's scratch, kept between placements.
type bucketScratch struct {
	// tiedSingle are the positions costed one by one that tie for the
	// cheapest; skip the members of tied groups that are costed one by
	// one (reached, or stale) and so not counted as group members.
	tiedSingle, skip []int32
	tied             []uint64 // the tied decode groups, ascending
	// bestOverlap is the most blocks any reached rank caches on its
	// device: Engine.bestOverlap's answer (no lower tier is in use), which
	// the walk over the reached ranks finds on its way.
	bestOverlap uint64
}

// selectBucketed is selectCheapest for candidates that are a role's whole
// ready list (rr), from its buckets.
func (e *Engine) selectBucketed(d *demand, rr *roleRanks) selector.Result {
	b, x := &rr.buckets, &e.bucketed
	loads, overlap, hits, slots, p := e.fleet.loads, e.overlap, e.hits, rr.slots, e.paramsFor(d)
	blocks := uint64(len(d.local)) + d.privateBlocks
	coster := selector.NewCoster(p, d.isl)
	// The ranks costed one by one: those the walks reached (as the index
	// and the active tree list them: not a pass over every rank, nor a
	// list of them, which only a tie with a group needs), and those with
	// prefill booked. The walks list each rank once, and the index lists
	// exactly the ranks with an overlap (the tiers, which would list
	// others, are not in use here), so an active tree's rank with an
	// overlap is reached already.
	matched, touched := e.matched, e.active.Touched()
	best, tied, bestOverlap := math.Inf(1), x.tiedSingle[:0], uint32(0)
	for i := range len(matched) + len(touched) {
		var s uint32
		if i < len(matched) {
			s = uint32(matched[i])
		} else if s = touched[i-len(matched)]; overlap[s] != 0 {
			continue
		}
		pos, ok := e.fleet.positionIn(rr, s)
		if !ok {
			continue
		}
		l, o := &loads[s], overlap[s]
		bestOverlap = max(bestOverlap, o)
		cost := 0.0
		if l.prefill.pending > 0 {
			cost = coster.Of(uint64(o), l.prefill.at(e.now), l.decode+blocks-uint64(hits[s]))
		} else {
			cost = coster.Idle(o, l.decode+blocks-uint64(hits[s]))
		}
		if cost <= best {
			if cost < best {
				best, tied = cost, tied[:0]
			}
			tied = append(tied, pos)
		}
	}
	x.bestOverlap = uint64(bestOverlap)
	for _, pos := range b.prefilling {
		s := slots[pos]
		if overlap[s] != 0 || hits[s] != 0 {
			continue // reached
		}
		if cost := coster.Of(0, loads[s].prefill.at(e.now), loads[s].decode+blocks); cost <= best {
			if cost < best {
				best, tied = cost, tied[:0]
			}
			tied = append(tied, pos)
		}
	}
	// The groups, fewest decode blocks first, while they can tie or beat.
	// One that beats the best holds no reached rank: a reached rank costs
	// no more than its group (an overlap and active blocks only take from
	// a cost, the knobs being non-negative), and no less than the best.
	ties := len(tied)
	x.tied = x.tied[:0]
	for _, dec := range b.decodes {
		c := coster.Of(0, 0, dec+blocks)
		if c > best {
			break
		}
		g := b.byDecode[dec]
		if g.live == 0 {
			continue // only stale members
		}
		if c < best {
			best, ties, tied, x.tied = c, 0, tied[:0], x.tied[:0]
		}
		ties += len(g.members)
		x.tied = append(x.tied, dec)
	}
	x.tiedSingle = tied
	// Not counted as members of the tied groups: their reached live
	// members, which tie themselves (costing no more than their group) and
	// are in tiedSingle, and their stale ones, costed one by one as the
	// prefilling ranks they are.
	x.skip = x.skip[:0]
	if len(x.tied) > 0 {
		skip := func(s uint32) {
			if pos, ok := e.fleet.positionIn(rr, s); ok && b.at[pos] < 0 {
				if _, in := slices.BinarySearch(x.tied, loads[s].decode); in {
					x.skip = append(x.skip, pos)
				}
			}
		}
		for _, r := range matched {
			skip(uint32(r))
		}
		for _, s := range touched {
			if overlap[s] == 0 {
				skip(s)
			}
		}
		for _, pos := range b.prefilling {
			if g := b.groupOf[pos]; g != nil {
				if _, in := slices.BinarySearch(x.tied, g.decode); in {
					x.skip = append(x.skip, pos)
				}
			}
		}
		ties -= len(x.skip)
	}
	nth := 0
	if ties > 1 {
		nth = e.draws.Index(ties) // as selector.PickCheapest draws among the ties
	}
	pos := x.nthTied(rr, nth)
	chosen := e.cheapCandidate(d, slots[pos])
	return selector.Result{Index: int(pos), Chosen: selector.Cost(p, d.isl, &chosen), Ties: ties, BestCost: best}
}

// manyTiedGroups is how many tied decode groups nthTied searches by
// counting; past it, it lists the ties (O(ties log ties) rather than
// O(groups log² ranks)).
const manyTiedGroups = 8

// nthTied is the position of the nth (from 0) candidate, in candidate
// order, of those tied for the cheapest: the ranks costed one by one
// (tiedSingle) and the other members of the tied decode groups (tied),
// less skip. It counts the tied candidates before a position and searches
// for the one where the count passes nth.
func (x *bucketScratch) nthTied(rr *roleRanks, nth int) int32 {
	b := &rr.buckets
	if len(x.tied) == 0 && len(x.tiedSingle) == 1 {
		return x.tiedSingle[0]
	}
	if len(x.tied) > manyTiedGroups {
		// Costs so large that decode blocks round away: list every tie.
		// The skipped are left out of their groups' members only: one that
		// ties on its own cost is in tiedSingle, once.
		slices.Sort(x.skip)
		for _, dec := range x.tied {
			for _, pos := range b.byDecode[dec].members {
				if _, found := slices.BinarySearch(x.skip, pos); !found {
					x.tiedSingle = append(x.tiedSingle, pos)
				}
			}
		}
		slices.Sort(x.tiedSingle)
		return x.tiedSingle[nth]
	}
	// Ranks tied on their own cost mostly share a depth of the index walk,
	// which lists them in slot order, as candidates are unless workers
	// joined out of order: checking is a third of what sorting costs then.
	if !slices.IsSorted(x.tiedSingle) {
		slices.Sort(x.tiedSingle)
	}
	if len(x.tied) == 0 {
		return x.tiedSingle[nth]
	}
	slices.Sort(x.skip)
	// before counts the tied candidates at positions below at.
	before := func(at int32) int {
		n, _ := slices.BinarySearch(x.tiedSingle, at)
		for _, dec := range x.tied {
			i, _ := slices.BinarySearch(b.byDecode[dec].members, at)
			n += i
		}
		skipped, _ := slices.BinarySearch(x.skip, at)
		return n - skipped
	}
	// The smallest position with more than nth tied candidates at or below
	// it.
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
