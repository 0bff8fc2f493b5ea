package cluster

import (
	"slices"

	"github.com/offline-router/offline-router/internal/protocol"
)

// runCache is a simulated worker's prefix cache under the simple model,
// held as runs: a run is consecutive blocks of one chain (each the parent
// of the next) with one reference count, one computed flag and one place
// in the least-recently-used order of unreferenced runs. A run stands for
// its blocks in the order a per-block cache would keep them: referenced
// and released together, and, released, idle deepest block first, so that
// eviction takes blocks from the tail of the oldest idle run. A run is
// split where its blocks stop sharing those: where a request's match ends
// inside it (the request references the head only). Lookup, store,
// reference, release and eviction then cost a few operations a run, not a
// block: at 16-token blocks a request's prompt is hundreds of blocks and a
// handful of runs.
//
// It gives the same answers as a cache of single blocks (blockmodel_test.go
// keeps one, and TestRunCacheMatchesBlockModel compares them) because of
// how the simple model uses it: a request references every cached block of
// its chain from the first, and releases them deepest first. So a block's
// parent is cached for as long as the block is (a parent is never idle
// before its child, nor older in the idle order), and:
//
//   - only a run's head needs finding by hash: a block past it is reached
//     from its parent, the block before it in the run;
//   - a request's cached blocks are a prefix of its chain: nothing past the
//     first block missing is cached;
//   - a block with children in other runs ends its run (the request that
//     made a child split it there), so a match that leaves a run before its
//     end has found all there is.
//
// Runs live in one slice, reused as they go, found through a table of
// their heads, and linked into the LRU order by index. A run's hashes are
// a window on the request's that made it (which it never writes, and
// drops when it ends) when the run is at least half of them, else a copy:
// so no run keeps alive more than twice the hashes it was made with, and
// most runs cost no copy. A split leaves both runs windows on the one
// array.
type runCache struct {
	runs  []cacheRun
	heads hashTable // each run's first block
	spare []int32   // indices in runs of dropped runs, to reuse
	used  int       // blocks held
	idle  int       // of those, unreferenced (in the LRU order)
	// head and tail of the LRU order of idle runs (least recently used
	// first); noRun when it is empty.
	head, tail int32
	// path is the last match's runs, each with the blocks it matched, for
	// take; scratch lists the runs a request holds, for store and release.
	path    []heldRun
	scratch []int32
	ops     cacheOps
}

// cacheOps counts a cache's work, for TestReplayOperationCounts: run
// operations (a table probe, an insert or removal, a reference or release
// of a run, a split, a run evicted from) and block operations (a hash
// compared in a match, a block evicted).
type cacheOps struct {
	runs, blocks int
}

// noRun is "none" for a run index.
const noRun int32 = -1

type cacheRun struct {
	seq  []protocol.SequenceHash // its blocks' hashes, head first
	refs int32
	// stored: computed, visible to later requests and to the router.
	stored     bool
	prev, next int32 // neighbours in the LRU order while unreferenced
	// cont is the run split off this one's end, which continues it along
	// its chain: a request that referenced the run before the split holds
	// both, and finds the second through it. Only such a holder follows it,
	// and what it holds is never evicted, so a stale cont is never read.
	cont int32
}

// heldRun is n blocks of a chain from run on, following cont links past
// its end where it was split since.
type heldRun struct {
	run, n int32
}

func newRunCache() *runCache { return &runCache{head: noRun, tail: noRun} }

// find returns the run whose head is h, or noRun.
func (c *runCache) find(h protocol.SequenceHash) int32 {
	c.ops.runs++
	return c.heads.find(h)
}

// match looks seq up: hit is how many of its first blocks are cached and
// computed, found how many are cached. The runs it went through are left
// in c.path for take.
func (c *runCache) match(seq []protocol.SequenceHash) (hit, found int) {
	c.path = c.path[:0]
	for found < len(seq) {
		ri := c.find(seq[found])
		if ri == noRun {
			break
		}
		run := &c.runs[ri]
		n := 1
		for n < len(run.seq) && found+n < len(seq) && run.seq[n] == seq[found+n] {
			n++
		}
		c.ops.blocks += n
		if run.stored && hit == found {
			hit = found + n
		}
		c.path = append(c.path, heldRun{ri, int32(n)})
		found += n
		if n < len(run.seq) {
			break // left the run before its end: nothing further is cached
		}
	}
	return hit, found
}

// take gives r the blocks the last match found (r.Seq's first found) and
// caches as many of the rest as fit in total blocks, evicting idle blocks,
// least recently used first, to make room. It returns evicted with the
// evicted hashes appended, and how many of r's blocks it holds.
func (c *runCache) take(r *Request, found, total int, evicted []protocol.SequenceHash) ([]protocol.SequenceHash, int) {
	r.runs = r.runs[:0]
	for _, p := range c.path {
		if int(p.n) < len(c.runs[p.run].seq) {
			c.split(p.run, int(p.n))
		}
		c.ref(p.run)
		r.runs = append(r.runs, p)
	}
	missing := len(r.Seq) - found
	if over := c.used + missing - total; over > 0 {
		evicted = c.evict(min(over, c.idle), evicted)
	}
	n := min(missing, max(total-c.used, 0))
	if n > 0 {
		seq := r.Seq[found : found+n]
		if 2*n < len(r.Seq) {
			seq = slices.Clone(seq)
		}
		ri := c.add(seq)
		r.runs = append(r.runs, heldRun{ri, int32(n)})
	}
	return evicted, found + n
}

// store marks r's blocks from position from on as computed.
func (c *runCache) store(r *Request, from int) {
	pos := 0
	for _, ri := range c.held(r) {
		run := &c.runs[ri]
		if pos >= from {
			run.stored = true
			c.ops.runs++
		}
		pos += len(run.seq)
	}
}

// release drops r's references, deepest run first, so that among blocks
// freed together a child is evicted before its parent.
func (c *runCache) release(r *Request) {
	held := c.held(r)
	for i := len(held) - 1; i >= 0; i-- {
		c.unref(held[i])
	}
	r.runs = r.runs[:0]
}

// held lists the runs r holds, head first, in c.scratch.
func (c *runCache) held(r *Request) []int32 {
	c.scratch = c.scratch[:0]
	for _, h := range r.runs {
		for ri, n := h.run, int(h.n); n > 0; ri = c.runs[ri].cont {
			c.scratch = append(c.scratch, ri)
			n -= len(c.runs[ri].seq)
		}
	}
	return c.scratch
}

// add caches a new run of blocks, seq, referenced once and not computed
// yet. Its head must not be cached.
func (c *runCache) add(seq []protocol.SequenceHash) int32 {
	ri := c.newRun()
	c.runs[ri] = cacheRun{seq: seq, refs: 1, prev: noRun, next: noRun, cont: noRun}
	c.used += len(seq)
	c.insert(ri)
	return ri
}

// split cuts run ri after its first n blocks; the rest becomes a run of
// its own with the same references, next before it in the LRU order (its
// blocks are the deeper ones, idle first).
func (c *runCache) split(ri int32, n int) {
	c.ops.runs++
	t := c.newRun()
	s := &c.runs[ri]
	c.runs[t] = cacheRun{seq: s.seq[n:], refs: s.refs, stored: s.stored, prev: noRun, next: noRun, cont: s.cont}
	s.seq, s.cont = s.seq[:n], t
	if s.refs == 0 { // idle: t takes the place before s
		x := &c.runs[t]
		x.prev, x.next = s.prev, ri
		if s.prev != noRun {
			c.runs[s.prev].next = t
		} else {
			c.head = t
		}
		s.prev = t
	}
	c.insert(t)
}

// newRun is a run index to fill: a dropped run's, else a new one.
func (c *runCache) newRun() int32 {
	if n := len(c.spare); n > 0 {
		ri := c.spare[n-1]
		c.spare = c.spare[:n-1]
		return ri
	}
	c.runs = append(c.runs, cacheRun{})
	return int32(len(c.runs) - 1)
}

// insert enters run ri's head in the table.
func (c *runCache) insert(ri int32) {
	c.ops.runs++
	c.heads.insert(c.runs[ri].seq[0], ri)
}

// drop forgets run ri, which no request references and which holds no
// blocks any more.
func (c *runCache) drop(ri int32, head protocol.SequenceHash) {
	c.ops.runs++
	c.heads.remove(head)
	c.runs[ri] = cacheRun{}
	c.spare = append(c.spare, ri)
}

// ref adds a reference to run ri, taking it out of the LRU order if it was
// idle.
func (c *runCache) ref(ri int32) {
	c.ops.runs++
	x := &c.runs[ri]
	if x.refs == 0 { // only a computed run stays unreferenced
		c.unlink(ri)
		c.idle -= len(x.seq)
	}
	x.refs++
}

// unref drops a reference to run ri. A run no request references any more
// is forgotten if it was never computed, else it becomes the most recently
// used idle run.
func (c *runCache) unref(ri int32) {
	c.ops.runs++
	x := &c.runs[ri]
	if x.refs--; x.refs > 0 {
		return
	}
	if !x.stored {
		c.used -= len(x.seq)
		c.drop(ri, x.seq[0])
		return
	}
	x.prev, x.next = c.tail, noRun
	if c.tail != noRun {
		c.runs[c.tail].next = ri
	} else {
		c.head = ri
	}
	c.tail = ri
	c.idle += len(x.seq)
}

func (c *runCache) unlink(ri int32) {
	x := &c.runs[ri]
	if x.prev != noRun {
		c.runs[x.prev].next = x.next
	} else {
		c.head = x.next
	}
	if x.next != noRun {
		c.runs[x.next].prev = x.prev
	} else {
		c.tail = x.prev
	}
	x.prev, x.next = noRun, noRun
}

// evict drops the n least recently used idle blocks, each run's deepest
// first, and returns out with their hashes appended. There must be n.
func (c *runCache) evict(n int, out []protocol.SequenceHash) []protocol.SequenceHash {
	for n > 0 {
		c.ops.runs++
		ri := c.head
		x := &c.runs[ri]
		k := min(n, len(x.seq))
		keep := len(x.seq) - k
		for i := len(x.seq) - 1; i >= keep; i-- {
			out = append(out, x.seq[i])
		}
		c.ops.blocks += k
		n, c.used, c.idle = n-k, c.used-k, c.idle-k
		if keep > 0 {
			x.seq, x.cont = x.seq[:keep], noRun
			continue
		}
		head := x.seq[0]
		c.unlink(ri)
		c.drop(ri, head)
	}
	return out
}
