package kvindex

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/goccy/go-json"

	"github.com/offline-router/offline-router/internal/protocol"
)

// traceHashIDs returns the hash_ids of the shared Mooncake trace, or a
// synthetic stand-in of the same shape (shared prefixes, ~30 blocks) when
// the trace is absent.
func traceHashIDs(b *testing.B) [][]protocol.LocalBlockHash {
	b.Helper()
	f, err := os.Open(filepath.Join("..", "..", "..", "shared", "traces", "synthetic_trace.jsonl"))
	if err != nil {
		rng := rand.New(rand.NewPCG(1, 2))
		var out [][]protocol.LocalBlockHash
		for i := range 4000 {
			ids := []protocol.LocalBlockHash{protocol.LocalBlockHash(i % 50), protocol.LocalBlockHash(i%50) + 1000}
			for range 5 + rng.IntN(50) {
				ids = append(ids, protocol.LocalBlockHash(rng.Uint64()))
			}
			out = append(out, ids)
		}
		return out
	}
	defer f.Close()
	var out [][]protocol.LocalBlockHash
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var line struct {
			HashIDs []protocol.LocalBlockHash `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			b.Fatal(err)
		}
		out = append(out, line.HashIDs)
	}
	return out
}

// withRanks returns an index with live ranks 0..n-1.
func withRanks(n int) *Index {
	x := New()
	for r := range RankID(n) {
		x.AddRank(r)
	}
	return x
}

// indexWorkload spreads the trace's prompts over ranks as stored events,
// built beforehand as a decoder would hand them over, so that the
// benchmarks time the index alone.
type indexWorkload struct {
	local  [][]protocol.LocalBlockHash
	seq    [][]protocol.SequenceHash
	blocks [][]Block
	rank   []RankID
}

func newIndexWorkload(b *testing.B, ranks int) indexWorkload {
	ids := traceHashIDs(b)
	w := indexWorkload{}
	for i, p := range ids {
		seq := SequenceHashes(p)
		blocks := make([]Block, len(p))
		for j := range p {
			blocks[j] = Block{BlockHash: seq[j], TokensHash: p[j]}
		}
		w.local = append(w.local, p)
		w.seq = append(w.seq, seq)
		w.blocks = append(w.blocks, blocks)
		w.rank = append(w.rank, RankID(i%ranks))
	}
	return w
}

func (w indexWorkload) store(x *Index, i int) {
	x.Store(w.rank[i], nil, w.blocks[i])
}

// BenchmarkIndexOps interleaves the two operations of the target: a stored
// event of a whole prompt and a find_matches of a whole prompt, over 16
// ranks. One op is one of them.
func BenchmarkIndexOps(b *testing.B) {
	const ranks = 16
	w := newIndexWorkload(b, ranks)
	x := withRanks(ranks)
	overlap := make([]uint32, ranks)
	n := len(w.local)
	b.ResetTimer()
	i := 0
	for b.Loop() {
		p := (i / 2) % n
		if i%2 == 0 {
			w.store(x, p)
		} else {
			x.FindMatches(w.local[(p*7919)%n], overlap)
		}
		i++
	}
}

func BenchmarkFindMatches(b *testing.B) {
	const ranks = 16
	w := newIndexWorkload(b, ranks)
	x := withRanks(ranks)
	for i := range w.local {
		w.store(x, i)
	}
	overlap := make([]uint32, ranks)
	i := 0
	for b.Loop() {
		x.FindMatches(w.local[i%len(w.local)], overlap)
		i++
	}
}

// BenchmarkIndexMemory reports the index's heap bytes per (rank, block)
// entry after storing every prompt of the trace, request i on rank i mod
// ranks: at 16 ranks the target's figure, at 256 and 1,024 what ranks
// past 64 (other groups) cost.
func BenchmarkIndexMemory(b *testing.B) {
	for _, ranks := range []int{16, 256, 1024} {
		b.Run(fmt.Sprint("ranks=", ranks), func(b *testing.B) {
			w := newIndexWorkload(b, ranks)
			for b.Loop() {
				var before, after runtimeMem
				before.read()
				x := withRanks(ranks)
				entries := 0
				for i := range w.local {
					w.store(x, i)
				}
				for r := range RankID(ranks) {
					entries += x.Blocks(r)
				}
				after.read()
				b.ReportMetric(float64(after.heap-before.heap)/float64(entries), "bytes/entry")
				b.ReportMetric(float64(entries), "entries")
				keep(x)
			}
		})
	}
}

// BenchmarkFindMatchesIndexSize: a 64-block prompt against indexes of
// growing size (64 ranks, random prompts sharing 32 prefixes).
func BenchmarkFindMatchesIndexSize(b *testing.B) {
	for _, entries := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 4))
			x := withRanks(64)
			prefixes := make([][]protocol.LocalBlockHash, 32)
			for i := range prefixes {
				for range 32 {
					prefixes[i] = append(prefixes[i], protocol.LocalBlockHash(rng.Uint64()))
				}
			}
			var probes [][]protocol.LocalBlockHash
			for n := 0; n < entries; n += 64 {
				local := append([]protocol.LocalBlockHash(nil), prefixes[rng.IntN(32)]...)
				for len(local) < 64 {
					local = append(local, protocol.LocalBlockHash(rng.Uint64()))
				}
				seq := SequenceHashes(local)
				blocks := make([]Block, 64)
				for j := range blocks {
					blocks[j] = Block{BlockHash: seq[j], TokensHash: local[j]}
				}
				x.Store(RankID(rng.IntN(64)), nil, blocks)
				if len(probes) < 1024 {
					probes = append(probes, local)
				}
			}
			overlap := make([]uint32, 64)
			i := 0
			for b.Loop() {
				x.FindMatches(probes[i%len(probes)], overlap)
				i++
			}
		})
	}
}

// BenchmarkIndexChurn is the index as a replay drives it: for each request
// of the trace, in order, find_matches of its whole prompt, then a stored
// event of the blocks its rank lacked (under the last block it had), and,
// once the rank holds more than its capacity, a removed event of the
// oldest stored run (16 ranks of 2,000 blocks). One op is one of those
// three events. A removed event lists the run tail first, as vLLM evicts
// (a request's blocks are freed in reverse, so its last block goes first),
// or head first, the order in which each removal cascades over the rest.
func BenchmarkIndexChurn(b *testing.B) {
	for _, order := range []string{"tail_first", "head_first"} {
		b.Run("removed="+order, func(b *testing.B) { indexChurn(b, order == "tail_first") })
	}
}

func indexChurn(b *testing.B, tailFirst bool) {
	const ranks, capacity = 16, 2000
	w := newIndexWorkload(b, ranks)
	x := withRanks(ranks)
	overlap := make([]uint32, ranks)
	type run struct{ hashes []protocol.SequenceHash }
	fifo := make([][]run, ranks)
	held := make([]int, ranks)
	var blocks []Block
	ops, changes, moved := 0, 0, 0
	i := 0
	for b.Loop() {
		p := i % len(w.local)
		r := w.rank[p]
		local, seq := w.local[p], w.seq[p]
		x.FindMatches(local, overlap)
		ops++
		have := int(overlap[r])
		if have < len(local) {
			var parent *protocol.SequenceHash
			if have > 0 {
				parent = &seq[have-1]
			}
			blocks = blocks[:0]
			for j := have; j < len(local); j++ {
				blocks = append(blocks, Block{BlockHash: seq[j], TokensHash: local[j]})
			}
			x.Store(r, parent, blocks)
			ops++
			changes++
			moved += len(blocks)
			hashes := seq[have:]
			if tailFirst {
				hashes = slices.Clone(hashes)
				slices.Reverse(hashes)
			}
			fifo[r] = append(fifo[r], run{hashes})
			held[r] += len(local) - have
		}
		for held[r] > capacity {
			old := fifo[r][0]
			fifo[r] = fifo[r][1:]
			dropped := x.Remove(r, old.hashes)
			held[r] -= dropped
			ops++
			changes++
			moved += dropped
		}
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(ops), "ns/event")
	// What a stored or removed event carries: the per-block work that an
	// events-per-second figure hides.
	b.ReportMetric(float64(moved)/float64(max(changes, 1)), "blocks/change")
}

// BenchmarkWideRanksShareANode: ranks from 64 up, many on one node. Under
// "hashes" one such rank stores one prefix under n block hashes, then
// removes them; under "ranks" n such ranks store the same prefix, then
// leave. Either used to scan the node's whole side list per step (quadratic);
// the time per step must not grow with n.
func BenchmarkWideRanksShareANode(b *testing.B) {
	prefix := []protocol.LocalBlockHash{7}
	for _, n := range []int{4000, 40000} {
		b.Run(fmt.Sprint("hashes=", n), func(b *testing.B) {
			overlap := make([]uint32, maskRanks+1)
			for b.Loop() {
				x := New()
				x.AddRank(maskRanks)
				for i := range n {
					x.Store(maskRanks, nil, []Block{{BlockHash: protocol.SequenceHash(i), TokensHash: prefix[0]}})
					x.FindMatches(prefix, overlap)
				}
				for i := range n {
					x.Remove(maskRanks, []protocol.SequenceHash{protocol.SequenceHash(i)})
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/hash")
		})
		b.Run(fmt.Sprint("ranks=", n), func(b *testing.B) {
			for b.Loop() {
				x := New()
				for i := range n {
					id := RankID(maskRanks + i)
					x.AddRank(id)
					x.Store(id, nil, []Block{{BlockHash: 1, TokensHash: prefix[0]}})
				}
				for i := range n {
					x.DropRank(RankID(maskRanks + i))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/rank")
		})
	}
}

// BenchmarkRemoveUnderFanOut: rank 0 has given one shared block n children;
// another rank stores that block and removes it, over and over, holding none
// of the children ("none"), or storing a child too and removing it first
// ("child_gone"). Either way its removal must not visit the n children: the
// time per round must not grow with n, for a rank under 64 and one above.
func BenchmarkRemoveUnderFanOut(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, rank := range []RankID{1, maskRanks} {
			for _, how := range []string{"none", "child_gone"} {
				b.Run(fmt.Sprintf("children=%d/rank=%d/%s", n, rank, how), func(b *testing.B) {
					x := New()
					x.AddRank(0)
					x.AddRank(rank)
					shared := Block{BlockHash: 1, TokensHash: 1}
					x.Store(0, nil, []Block{shared})
					for i := range n {
						x.Store(0, &shared.BlockHash, []Block{{BlockHash: protocol.SequenceHash(100 + i), TokensHash: protocol.LocalBlockHash(100 + i)}})
					}
					child := Block{BlockHash: 99, TokensHash: 99}
					for b.Loop() {
						if how == "child_gone" {
							x.Store(rank, nil, []Block{shared, child})
							x.Remove(rank, []protocol.SequenceHash{child.BlockHash})
						} else {
							x.Store(rank, nil, []Block{shared})
						}
						x.Remove(rank, []protocol.SequenceHash{shared.BlockHash})
					}
				})
			}
		}
	}
}

// BenchmarkRemoveSharedParent: every rank stores a shared block and 8
// children of its own under it, then removes the shared block (taking its
// children), over and over. A removal visits the children its own group of
// 64 ranks holds, not every rank's: the time per rank must not grow with
// the rank count (one tree for all ranks once made it ranks × children).
func BenchmarkRemoveSharedParent(b *testing.B) {
	const children = 8
	for _, ranks := range []int{256, 4096} {
		b.Run(fmt.Sprint("ranks=", ranks), func(b *testing.B) {
			x := withRanks(ranks)
			shared := Block{BlockHash: 1, TokensHash: 1}
			store := func(r RankID) {
				x.Store(r, nil, []Block{shared})
				for i := range children {
					h := 100 + int(r)*children + i
					x.Store(r, &shared.BlockHash, []Block{{BlockHash: protocol.SequenceHash(h), TokensHash: protocol.LocalBlockHash(h)}})
				}
			}
			for r := range RankID(ranks) {
				store(r)
			}
			r := RankID(0)
			for b.Loop() {
				x.Remove(r, []protocol.SequenceHash{shared.BlockHash})
				store(r)
				r = (r + 1) % RankID(ranks)
			}
		})
	}
}
