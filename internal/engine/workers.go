package engine

import (
	"cmp"
	"slices"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

type workerStatus uint8

const (
	statusReady workerStatus = iota
	statusDraining
)

func (s workerStatus) String() string {
	if s == statusDraining {
		return "draining"
	}
	return "ready"
}

// worker is one serving worker, ready or draining; removed workers are
// forgotten but for their id.
type worker struct {
	id                  uint64
	status              workerStatus
	role                protocol.Role
	totalKVBlocks       *uint64
	maxNumBatchedTokens *uint64
	maxNumSeqs          *uint64
	device              protocol.DeviceType // as worker_ready gave it ("" when not: an accelerator)
	lora                *adapters           // nil when it advertised no adapter capacity
	ranks               []*rank             // ascending dp_rank
	unlisted            bool                // no longer ready: leaves the ready list when it is next read
}

// rank is one DP rank of a worker: a candidate for placement, a cache in the
// index (by slot), and the load booked on it.
type rank struct {
	w    *worker
	dp   uint32
	slot uint32 // dense id, shared with the index; reused after removal

	activeRequests uint64
	prefill        prefillLoad
	privateBlocks  uint64                                // blocks of requests without hashes: never shared
	distinctBlocks uint64                                // distinct active sequence hashes
	booked         []*request                            // the requests booked here, in no order
	approx         map[protocol.SequenceHash]float64     // approximate mode: when each block learned here expires
	predicted      map[protocol.SequenceHash]float64     // predict-on-route: when each block routed here is forgotten
	routed         map[protocol.SequenceHash]routedBlock // sglang_cache_aware: the blocks routed here
}

func (r *rank) activeDecodeBlocks() uint64 { return r.distinctBlocks + r.privateBlocks }

// kvUsage is the fraction of the rank's KV cache its active blocks take, as
// far as the router knows them; 0 when its size is not known.
func (r *rank) kvUsage() float64 {
	if r.w.totalKVBlocks == nil || *r.w.totalKVBlocks == 0 {
		return 0
	}
	return float64(r.activeDecodeBlocks()) / float64(*r.w.totalKVBlocks)
}

// fleet is the set of workers and the slots of their ranks.
type fleet struct {
	byID      map[uint64]*worker
	ready     []*worker // the ready workers; in id order (the candidate order) unless unsorted
	unsorted  bool
	unlisted  int // workers in ready that left it
	removed   removedIDs
	slots     []*rank    // by slot; nil when free
	loads     []rankLoad // by slot
	rolePos   []int32    // by slot: the rank's position in its role's ready list when last built, or -1
	freeSlots []uint32
	// version counts changes to the ready set; roles holds each role's
	// ready ranks as of a version.
	version uint64
	roles   map[protocol.Role]*roleRanks
	// discovered counts each role's workers that are ready or draining:
	// what a policy class's per-worker queue limits multiply.
	discovered [3]uint64
	// loraWorkers counts the workers, ready or draining, whose adapters the
	// router knows: with none, no request is filtered by its adapter.
	loraWorkers int
}

// rankLoad is a copy of what costing a rank reads of its load, kept in
// slot order beside the other ranks': a placement at temperature 0 reads it
// for every candidate, and reading it through each rank's own struct cost a
// cache miss a rank. book, unbook and prefillCompleted, the only changes to
// a booked load, refresh it through noteLoad.
//
// A reached rank with no prefill booked is costed from its decode blocks
// and whether prefill is pending: those lead the struct, so that the two
// cross a cache line for one rank in eight, not one in two (the entries
// are 40 bytes): at 1,024 ranks nearly every reached rank's load misses.
type rankLoad struct {
	decode  uint64 // activeDecodeBlocks
	prefill prefillLevel
}

// noteLoad copies r's load into its rankLoad, and refiles r in its role's
// decode buckets if the role's ready list is current and holds it.
func (f *fleet) noteLoad(r *rank) {
	next := rankLoad{prefill: r.prefill.prefillLevel, decode: r.activeDecodeBlocks()}
	if rr := f.roles[r.w.role]; rr != nil && rr.version == f.version {
		if pos, ok := f.positionIn(rr, r.slot); ok {
			rr.buckets.move(pos, &f.loads[r.slot], &next)
		}
	}
	f.loads[r.slot] = next
}

// roleRanks are the ready ranks of one role in candidate order, and their
// slots: a placement with no filter to apply takes them as its candidates
// instead of walking every worker, which at 1,024 ranks was a third of its
// cost. They are rebuilt, into new slices, once the ready set has changed.
type roleRanks struct {
	version uint64
	ranks   []*rank
	slots   []uint32 // of ranks
	buckets decodeBuckets
}

func newFleet() fleet {
	return fleet{byID: map[uint64]*worker{}, removed: newRemovedIDs(RememberedRemovals), version: 1,
		roles: map[protocol.Role]*roleRanks{}}
}

// positionIn is slot s's position in rr's list, if it is there (rolePos
// holds it as of rr's build, and may be stale for a slot that left).
func (f *fleet) positionIn(rr *roleRanks, s uint32) (int32, bool) {
	pos := f.rolePos[s]
	return pos, pos >= 0 && int(pos) < len(rr.slots) && rr.slots[pos] == s
}

// ofRole returns the ready ranks of role, which the caller must not change.
func (f *fleet) ofRole(role protocol.Role) *roleRanks {
	rr := f.roles[role]
	if rr == nil {
		rr = &roleRanks{}
		f.roles[role] = rr
	}
	if rr.version != f.version {
		*rr = roleRanks{version: f.version}
		for _, w := range f.readyWorkers() {
			if w.role == role {
				for _, r := range w.ranks {
					f.rolePos[r.slot] = int32(len(rr.ranks))
					rr.ranks, rr.slots = append(rr.ranks, r), append(rr.slots, r.slot)
				}
			}
		}
		rr.buckets = newDecodeBuckets(rr.slots, f.loads)
	}
	return rr
}

// readyWorkers are the ready workers in id order, the candidate order.
// Workers join and leave the list in O(1), and the order is restored when
// it is next read, so n workers coming up or going, in any order of ids,
// cost O(n log n) in all (sorting a list that is sorted but for its last
// few workers is linear).
func (f *fleet) readyWorkers() []*worker {
	if f.unsorted {
		f.ready = slices.DeleteFunc(f.ready, func(w *worker) bool { return w.unlisted })
		f.unlisted = 0
		slices.SortFunc(f.ready, func(a, b *worker) int { return cmp.Compare(a.id, b.id) })
		f.unsorted = false
	}
	return f.ready
}

func (f *fleet) rankOf(w *worker, dp uint32) *rank {
	if dp < w.ranks[0].dp || dp-w.ranks[0].dp >= uint32(len(w.ranks)) {
		return nil
	}
	return w.ranks[dp-w.ranks[0].dp]
}

func (f *fleet) allocSlot(r *rank) {
	if n := len(f.freeSlots); n > 0 {
		r.slot, f.freeSlots = f.freeSlots[n-1], f.freeSlots[:n-1]
		f.slots[r.slot] = r
		return
	}
	r.slot = uint32(len(f.slots))
	f.slots = append(f.slots, r)
	f.loads = append(f.loads, rankLoad{})
	f.rolePos = append(f.rolePos, -1)
}

// workerReady adds a worker that check has vetted.
func (e *Engine) workerReady(c *protocol.Command) {
	id := *c.WorkerID
	d := e.cfg.WorkerDefaults
	role := firstRole(c.Role, d.Role, protocol.RoleAggregated)
	dpSize := first(c.DPSize, d.DPSize, 1)
	dpStart := first(c.DPStart, d.DPStart, 0)
	w := &worker{
		id: id, role: role,
		totalKVBlocks:       orDefault(c.TotalKVBlocks, d.TotalKVBlocks),
		maxNumBatchedTokens: orDefault(c.MaxNumBatchedTokens, d.MaxNumBatchedTokens),
		maxNumSeqs:          orDefault(c.MaxNumSeqs, d.MaxNumSeqs),
		device:              c.DeviceType,
		lora:                newAdapters(c),
	}
	if w.lora != nil {
		e.fleet.loraWorkers++
		defer e.adaptersChanged(role)
	}
	for i := range dpSize {
		r := &rank{w: w, dp: dpStart + i, prefill: prefillLoad{prefillLevel: prefillLevel{rate: e.prefillRate(), last: e.now}}}
		e.fleet.allocSlot(r)
		e.fleet.noteLoad(r)
		e.index.AddRank(kvindex.RankID(r.slot))
		if e.routed != nil {
			e.routed.index.AddRank(kvindex.RankID(r.slot))
		}
		if e.predicted != nil {
			e.predicted.index.AddRank(kvindex.RankID(r.slot))
		}
		w.ranks = append(w.ranks, r)
	}
	e.fleet.byID[id] = w
	e.fleet.discovered[roleIndex(role)]++
	e.fleet.removed.forget(id)
	if n := len(e.fleet.ready); n > 0 && e.fleet.ready[n-1].id > id {
		e.fleet.unsorted = true // ids arriving in ascending order keep the list sorted
	}
	e.fleet.ready = append(e.fleet.ready, w)
	e.fleet.version++
	e.growScratch()
	e.workerChanged(w)
}

func (e *Engine) lookupWorker(id uint64) (*worker, *protocol.Error) {
	w, ok := e.fleet.byID[id]
	if !ok {
		what := "never became ready"
		if e.fleet.removed.has(id) {
			what = "was removed"
		}
		return nil, protocol.Errorf(protocol.CodeUnknownWorker, "worker %d %s", id, what)
	}
	return w, nil
}

func (e *Engine) unready(w *worker) {
	if w.lora != nil {
		e.adaptersChanged(w.role)
	}
	w.unlisted = true
	e.fleet.unsorted = true
	e.fleet.version++
	// A stream that only brings workers up and down never reads the list:
	// sweep it once the workers that left are half of it, so it stays the
	// size of the fleet (O(1) per worker, amortized).
	if e.fleet.unlisted++; 2*e.fleet.unlisted > len(e.fleet.ready) {
		e.fleet.ready = slices.DeleteFunc(e.fleet.ready, func(w *worker) bool { return w.unlisted })
		e.fleet.unlisted = 0
	}
}

func (e *Engine) workerDraining(w *worker) {
	if w.status == statusDraining {
		return
	}
	w.status = statusDraining
	e.unready(w)
	e.workerLost(w)
}

// workerRemoved drops the worker's eligibility, index entries and load at
// once. Requests booked there stay known (orphaned) so that their lifecycle
// commands still succeed.
func (e *Engine) workerRemoved(w *worker) {
	ev := &e.out.ev
	if w.status == statusReady {
		e.unready(w)
		e.workerLost(w)
	}
	var orphaned []string
	for _, r := range w.ranks {
		for len(r.booked) > 0 {
			req := r.booked[len(r.booked)-1]
			e.unbook(req)
			req.orphaned = true
			orphaned = append(orphaned, req.d.id)
		}
	}
	slices.Sort(orphaned)
	ev.RequestsOrphaned = orphaned
	for _, r := range w.ranks {
		ev.BlocksDropped += e.index.DropRank(kvindex.RankID(r.slot)) + e.tiers.clear(kvindex.RankID(r.slot))
		e.approx.forget(r)
		if e.routed != nil {
			e.routed.index.DropRank(kvindex.RankID(r.slot))
		}
		if e.predicted != nil {
			e.predicted.forget(r)
		}
		e.fleet.slots[r.slot] = nil
		e.fleet.freeSlots = append(e.fleet.freeSlots, r.slot)
	}
	delete(e.fleet.byID, w.id)
	e.fleet.discovered[roleIndex(w.role)]--
	if w.lora != nil {
		e.fleet.loraWorkers--
	}
	e.fleet.removed.add(w.id)
}

// RememberedRemovals is how many removed worker ids the router remembers,
// the most recent, so that a late event or a pin can say "removed" rather
// than "unknown"; past it the oldest is forgotten. Remembering every id
// ever removed would grow without end.
const RememberedRemovals = 1 << 16

// removedIDs are the most recently removed worker ids, in removal order.
type removedIDs struct {
	limit int
	seq   map[uint64]uint64 // id -> when it was removed, while remembered
	order []removal         // oldest first from head; entries of ids re-added or removed again are stale
	head  int
	next  uint64
}

type removal struct{ id, seq uint64 }

func newRemovedIDs(limit int) removedIDs {
	return removedIDs{limit: limit, seq: map[uint64]uint64{}}
}

func (r *removedIDs) has(id uint64) bool { _, ok := r.seq[id]; return ok }

// forget drops id, which came back.
func (r *removedIDs) forget(id uint64) { delete(r.seq, id) }

func (r *removedIDs) add(id uint64) {
	r.next++
	r.seq[id] = r.next
	r.order = append(r.order, removal{id, r.next})
	for len(r.seq) > r.limit {
		old := r.order[r.head]
		r.head++
		if r.seq[old.id] == old.seq {
			delete(r.seq, old.id)
		}
	}
	// Stale entries (ids that came back, or were removed again since) are
	// swept once they outnumber the live ones, and the forgotten front once
	// it is half the queue: O(1) per removal, amortized.
	if live := len(r.seq); len(r.order)-r.head > 2*live+16 || r.head > len(r.order)/2 {
		kept := r.order[:0]
		for _, e := range r.order[r.head:] {
			if r.seq[e.id] == e.seq {
				kept = append(kept, e)
			}
		}
		r.order, r.head = kept, 0
	}
}

func first[T any](v, d *T, fallback T) T {
	if v != nil {
		return *v
	}
	if d != nil {
		return *d
	}
	return fallback
}

func orDefault[T any](v, d *T) *T {
	if v != nil {
		return v
	}
	return d
}

func firstRole(v, d, fallback protocol.Role) protocol.Role {
	if v != "" {
		return v
	}
	if d != "" {
		return d
	}
	return fallback
}
