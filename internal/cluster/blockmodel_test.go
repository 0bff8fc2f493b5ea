package cluster

import "github.com/offline-router/offline-router/internal/protocol"

// blockCache is the simple model's cache one block at a time, as the
// replay ran it before runCache: the model runCache must agree with
// (blockModel drives it as the simple model's worker did). Its blocks by
// sequence hash, each with a reference count, and the unreferenced ones in
// least-recently-used order, the eviction order, linked by index. It finds
// blocks through a Go map, not the hashTable runCache uses, so that the
// model shares no code with what it checks.
type blockCache struct {
	blocks []cachedBlock
	index  map[protocol.SequenceHash]int32
	spare  []int32 // indices in blocks of dropped blocks, to reuse
	used   int     // blocks held: len(blocks) - len(spare)
	idle   int     // of those, unreferenced (in the LRU order)
	// head and tail of the LRU order (least recently used first); noBlock
	// when it is empty.
	head, tail int32
}

type cachedBlock struct {
	hash       protocol.SequenceHash
	local      protocol.LocalBlockHash
	refs       int32
	stored     bool  // computed: visible to later requests and to the router
	prev, next int32 // neighbours in the LRU order while unreferenced
}

func newBlockCache() *blockCache {
	return &blockCache{index: map[protocol.SequenceHash]int32{}, head: noBlock, tail: noBlock}
}

// find returns h's block, or noBlock.
func (c *blockCache) find(h protocol.SequenceHash) int32 {
	if b, ok := c.index[h]; ok {
		return b
	}
	return noBlock
}

// add caches h, referenced once and not computed yet, and returns its
// block. h must not be cached.
func (c *blockCache) add(h protocol.SequenceHash, local protocol.LocalBlockHash) int32 {
	var b int32
	if n := len(c.spare); n > 0 {
		b, c.spare = c.spare[n-1], c.spare[:n-1]
	} else {
		b = int32(len(c.blocks))
		c.blocks = append(c.blocks, cachedBlock{})
	}
	c.blocks[b] = cachedBlock{hash: h, local: local, refs: 1, prev: noBlock, next: noBlock}
	c.used++
	c.index[h] = b
	return b
}

// drop forgets block b, which no request references.
func (c *blockCache) drop(b int32) {
	delete(c.index, c.blocks[b].hash)
	c.spare = append(c.spare, b)
	c.used--
}

// ref adds a reference to b, taking it out of the LRU order if it was idle.
func (c *blockCache) ref(b int32) {
	if c.blocks[b].refs == 0 { // only a computed block stays unreferenced
		c.unlink(b)
	}
	c.blocks[b].refs++
}

// unref drops a reference to b. A block no request references any more is
// forgotten if it was never computed, else it becomes the most recently
// used idle block.
func (c *blockCache) unref(b int32) {
	x := &c.blocks[b]
	if x.refs--; x.refs > 0 {
		return
	}
	if !x.stored {
		c.drop(b)
		return
	}
	x.prev, x.next = c.tail, noBlock
	if c.tail != noBlock {
		c.blocks[c.tail].next = b
	} else {
		c.head = b
	}
	c.tail = b
	c.idle++
}

func (c *blockCache) unlink(b int32) {
	x := &c.blocks[b]
	if x.prev != noBlock {
		c.blocks[x.prev].next = x.next
	} else {
		c.head = x.next
	}
	if x.next != noBlock {
		c.blocks[x.next].prev = x.prev
	} else {
		c.tail = x.prev
	}
	x.prev, x.next = noBlock, noBlock
	c.idle--
}

// evictOldest drops the least recently used idle block and returns its
// hash. There must be one.
func (c *blockCache) evictOldest() protocol.SequenceHash {
	b := c.head
	h := c.blocks[b].hash
	c.unlink(b)
	c.drop(b)
	return h
}

// blockModel is the simple model's worker cache, block by block, as the
// replay's worker drove blockCache: each request's block per position
// (noBlock where none), looked up one position at a time.
type blockModel struct {
	c      *blockCache
	blocks map[*Request][]int32
}

func newBlockModel() *blockModel {
	return &blockModel{c: newBlockCache(), blocks: map[*Request][]int32{}}
}

// match is how many of seq's first blocks are cached and computed, and
// every position's block.
func (m *blockModel) match(seq []protocol.SequenceHash) (hit int, blocks []int32) {
	hit = -1
	for i, h := range seq {
		b := m.c.find(h)
		blocks = append(blocks, b)
		if hit < 0 && (b == noBlock || !m.c.blocks[b].stored) {
			hit = i
		}
	}
	if hit < 0 {
		hit = len(seq)
	}
	return hit, blocks
}

// admits reports whether the worker's room check lets r in (running:
// others run on the worker).
func (m *blockModel) admits(seq []protocol.SequenceHash, total int, running bool) bool {
	hit, blocks := m.match(seq)
	free := total - m.c.used + m.c.idle
	if running && len(seq)-hit > free {
		missing := 0
		for _, b := range blocks[hit:] {
			if b == noBlock {
				missing++
			}
		}
		return missing <= free
	}
	return true
}

// take references r's cached blocks and caches the rest that fit,
// returning the evicted hashes.
func (m *blockModel) take(r *Request, total int) []protocol.SequenceHash {
	c := m.c
	_, blocks := m.match(r.Seq)
	for _, b := range blocks {
		if b != noBlock {
			c.ref(b)
		}
	}
	var evicted []protocol.SequenceHash
	for i, b := range blocks {
		if b != noBlock {
			continue
		}
		for c.used >= total && c.idle > 0 {
			evicted = append(evicted, c.evictOldest())
		}
		if c.used >= total {
			break
		}
		blocks[i] = c.add(r.Seq[i], r.Local[i])
	}
	m.blocks[r] = blocks
	return evicted
}

// store marks r's blocks from position from on computed, up to the first
// that did not fit, and returns where it stopped.
func (m *blockModel) store(r *Request, from int) int {
	blocks := m.blocks[r]
	for i := from; i < len(blocks); i++ {
		if blocks[i] == noBlock {
			return i
		}
		m.c.blocks[blocks[i]].stored = true
	}
	return len(blocks)
}

// release drops r's references, deepest first.
func (m *blockModel) release(r *Request) {
	blocks := m.blocks[r]
	for i := len(blocks) - 1; i >= 0; i-- {
		if b := blocks[i]; b != noBlock {
			m.c.unref(b)
		}
	}
	delete(m.blocks, r)
}
