package cluster

import "github.com/offline-router/offline-router/internal/protocol"

// ReferenceCache is the simple model's cache taking each request whole:
// a request references its cached prefix, caches the rest (evicting the
// least recently used idle blocks past capacity) and releases it all at
// once. A replay's headroom bound runs the trace through it.
type ReferenceCache struct {
	cache    *runCache
	capacity int
	r        Request
	scratch  []protocol.SequenceHash
}

// NewReferenceCache is an empty cache of capacity blocks.
func NewReferenceCache(capacity int) *ReferenceCache {
	return &ReferenceCache{cache: newRunCache(), capacity: capacity}
}

// Take takes a prompt of sequence hashes seq through the cache and returns
// how many of its first blocks were cached before. The cache keeps
// windows on seq (runcache.go), which the caller must not write again.
func (c *ReferenceCache) Take(seq []protocol.SequenceHash) int {
	c.r.Seq = seq
	_, found := c.cache.match(seq)
	c.scratch, _ = c.cache.take(&c.r, found, c.capacity, c.scratch[:0])
	c.cache.store(&c.r, found)
	c.cache.release(&c.r)
	c.r.Seq = nil
	return found
}
