// Package workload generates deterministic command streams for tests,
// benchmarks and soak runs.
package workload

import (
	"bufio"
	"io"
	"math/rand/v2"
	"strconv"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// Mixed describes a synthetic host session: workers come up, requests with
// shared prefixes are placed and go through their lifecycle, and KV events
// report what the workers cache. The stream is valid whatever the router
// decides, because events go to each prefix group's home worker rather than
// to the worker the router chose; every request ends, so the router's load
// is back to zero at the end.
type Mixed struct {
	Workers   int    // workers, ids 1..Workers
	Commands  int    // stop starting requests after about this many lines
	Seed      uint64 // everything random comes from this
	MinBlocks int    // prompt length range, in blocks
	MaxBlocks int
	Prefixes  int // distinct shared prefixes
	InFlight  int // requests in flight at once
	BlockSize int
	// Steady evicts every request's private tail when it ends, so that the
	// caches (and the router's index) stop growing: for soak runs.
	Steady bool
}

// DefaultMixed is the stream of the performance targets: 64 workers,
// prompts of 25 to 100 blocks with shared prefixes.
func DefaultMixed(commands int, seed uint64) Mixed {
	return Mixed{Workers: 64, Commands: commands, Seed: seed, MinBlocks: 25, MaxBlocks: 100,
		Prefixes: 256, InFlight: 256, BlockSize: 16}
}

type inflight struct {
	id      uint64
	home    int                     // worker whose cache the events describe
	seq     []protocol.SequenceHash // sequence hashes of the prompt
	local   []protocol.LocalBlockHash
	shared  int // leading blocks from the shared prefix; the rest is private
	stored  int // blocks of the prompt already on home before this request
	aborted bool
}

type mixedGen struct {
	m       Mixed
	rng     *rand.Rand
	w       *bufio.Writer
	b       []byte
	lines   int
	now     uint64
	eventID []uint64                         // per worker
	cached  []map[protocol.SequenceHash]bool // per worker: sequence hashes stored
	prefix  [][]protocol.LocalBlockHash      // local hashes of each shared prefix
	queue   []*inflight
	nextID  uint64
}

// Write writes the stream to out.
func (m Mixed) Write(out io.Writer) error {
	g := &mixedGen{m: m, rng: rand.New(rand.NewPCG(m.Seed, 0x5eed)), w: bufio.NewWriterSize(out, 1<<16)}
	g.eventID = make([]uint64, m.Workers+1)
	g.cached = make([]map[protocol.SequenceHash]bool, m.Workers+1)
	for w := 1; w <= m.Workers; w++ {
		g.cached[w] = map[protocol.SequenceHash]bool{}
		g.line(`{"op":"worker_ready","worker_id":`, uint64(w), `,"total_kv_blocks":100000,"max_num_batched_tokens":8192}`)
	}
	for range m.Prefixes {
		p := make([]protocol.LocalBlockHash, m.MinBlocks/2+g.rng.IntN(m.MinBlocks/2+1))
		for i := range p {
			p[i] = protocol.LocalBlockHash(g.rng.Uint64())
		}
		g.prefix = append(g.prefix, p)
	}
	for g.lines < m.Commands {
		if len(g.queue) >= m.InFlight {
			g.finish(g.queue[0])
			g.queue = g.queue[1:]
		}
		g.start()
	}
	for _, r := range g.queue {
		g.finish(r)
	}
	return g.w.Flush()
}

// start places a new request whose prompt is a shared prefix and a private tail.
func (g *mixedGen) start() {
	g.nextID++
	g.now += uint64(g.rng.IntN(5))
	p := g.rng.IntN(len(g.prefix))
	n := g.m.MinBlocks + g.rng.IntN(g.m.MaxBlocks-g.m.MinBlocks+1)
	local := append([]protocol.LocalBlockHash(nil), g.prefix[p]...)
	for len(local) < n {
		local = append(local, protocol.LocalBlockHash(g.rng.Uint64()))
	}
	r := &inflight{id: g.nextID, home: 1 + p%g.m.Workers, local: local[:n], seq: kvindex.SequenceHashes(local[:n]),
		shared: min(len(g.prefix[p]), n)}
	for r.stored < len(r.seq) && g.cached[r.home][r.seq[r.stored]] {
		r.stored++
	}
	b := g.begin(`{"op":"place","now_ms":`, g.now)
	b = append(b, `,"request_id":"r`...)
	b = strconv.AppendUint(b, r.id, 10)
	b = append(b, `","input_tokens":`...)
	b = strconv.AppendUint(b, uint64(n*g.m.BlockSize-g.rng.IntN(g.m.BlockSize)), 10)
	b = append(b, `,"output_tokens":64,"block_hashes":[`...)
	for i, h := range r.local {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(h), 10)
	}
	g.end(append(b, "]}"...))
	if g.rng.IntN(50) == 0 {
		r.aborted = true
		g.request("dispatch_aborted", r.id)
	} else {
		g.request("dispatch_committed", r.id)
	}
	g.queue = append(g.queue, r)
}

// finish completes a request: prefill done, its blocks stored on its home
// worker, terminal, and sometimes its private tail evicted.
func (g *mixedGen) finish(r *inflight) {
	if r.aborted {
		return
	}
	g.request("prefill_completed", r.id)
	if r.stored < len(r.seq) {
		w := r.home
		g.eventID[w]++
		b := g.begin(`{"op":"observe","events":[{"worker_id":`, uint64(w))
		b = append(b, `,"event":{"event_id":`...)
		b = strconv.AppendUint(b, g.eventID[w], 10)
		b = append(b, `,"data":{"stored":{"parent_hash":`...)
		if r.stored == 0 {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendUint(b, uint64(r.seq[r.stored-1]), 10)
		}
		b = append(b, `,"blocks":[`...)
		for i := r.stored; i < len(r.seq); i++ {
			if i > r.stored {
				b = append(b, ',')
			}
			b = append(b, `{"block_hash":`...)
			b = strconv.AppendUint(b, uint64(r.seq[i]), 10)
			b = append(b, `,"tokens_hash":`...)
			b = strconv.AppendUint(b, uint64(r.local[i]), 10)
			b = append(b, '}')
			g.cached[w][r.seq[i]] = true
		}
		g.end(append(b, "]}}}}]}"...))
	}
	g.request("request_terminal", r.id)
	// Sometimes evict the end of the private tail: only this request stored
	// those blocks, and none is the parent of another's.
	from := max(r.shared, r.stored, len(r.seq)-8)
	if g.m.Steady {
		from = max(r.shared, r.stored)
	}
	if evict := g.m.Steady || g.rng.IntN(4) == 0; evict && from < len(r.seq) {
		w := r.home
		g.eventID[w]++
		b := g.begin(`{"op":"observe","events":[{"worker_id":`, uint64(w))
		b = append(b, `,"event":{"event_id":`...)
		b = strconv.AppendUint(b, g.eventID[w], 10)
		b = append(b, `,"data":{"removed":{"block_hashes":[`...)
		for i := len(r.seq) - 1; i >= from; i-- {
			if i < len(r.seq)-1 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(r.seq[i]), 10)
			delete(g.cached[w], r.seq[i])
		}
		g.end(append(b, "]}}}}]}"...))
	}
}

func (g *mixedGen) request(op string, id uint64) {
	b := append(g.b[:0], `{"op":"`...)
	b = append(b, op...)
	b = append(b, `","request_id":"r`...)
	b = strconv.AppendUint(b, id, 10)
	g.end(append(b, `"}`...))
}

func (g *mixedGen) begin(prefix string, v uint64) []byte {
	b := append(g.b[:0], prefix...)
	return strconv.AppendUint(b, v, 10)
}

func (g *mixedGen) line(prefix string, v uint64, suffix string) {
	g.end(append(g.begin(prefix, v), suffix...))
}

func (g *mixedGen) end(b []byte) {
	g.b = append(b, '\n')
	g.w.Write(g.b)
	g.lines++
}
