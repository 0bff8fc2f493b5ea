package kvindex

import "github.com/offline-router/offline-router/internal/protocol"

// RankID names one (worker, dp_rank) cache inside the index. The engine hands
// out dense IDs so that per-rank results fit in a plain slice.
type RankID uint32

// Block is one stored block of a KV "stored" event: its sequence hash
// addresses it in events, its local hash keys the tree under the parent.
type Block = protocol.StoredBlock

// maskRanks is how many ranks a group holds: the width of a node's rank
// mask.
const maskRanks = 64

// Index is the cache index of every rank. Ranks are kept in groups of 64
// by id, each group a radix tree of its ranks' cached prefixes whose nodes
// carry a 64-bit mask of the ranks holding them (group.go). A prefix held
// in two groups is a node in each.
//
// Groups, rather than one tree whose nodes list ranks past 64 in a side
// table: a match then walks a mask per group the prompt reaches instead of
// looking each node's side list up in a map (37% of a placement at 256
// ranks), and a rank's entry costs what it costs at 64 ranks (a node's
// share and a block-table slot), where a side-table entry took more than
// the rest of the entry together. A prompt no rank of a group caches stops
// that group's walk at its first block.
//
// Not safe for concurrent use.
type Index struct {
	groups  []*group // by id / maskRanks; nil until a rank of the group is added
	matched []RankID // the ranks the last FindMatches gave an overlap
}

// New returns an empty index.
func New() *Index { return &Index{} }

// of returns the group of id and id within it.
func (x *Index) of(id RankID) (*group, RankID) {
	return x.groups[id/maskRanks], id % maskRanks
}

// AddRank starts an empty cache for id, dropping anything an earlier user of
// the same id left behind.
func (x *Index) AddRank(id RankID) {
	g := int(id / maskRanks)
	for g >= len(x.groups) {
		x.groups = append(x.groups, nil)
	}
	if x.groups[g] == nil {
		x.groups[g] = newGroup()
	}
	x.groups[g].AddRank(id % maskRanks)
}

// DropRank removes every entry of id and forgets it; it returns how many
// blocks were dropped.
func (x *Index) DropRank(id RankID) int {
	if g := int(id / maskRanks); g >= len(x.groups) || x.groups[g] == nil {
		return 0
	}
	g, r := x.of(id)
	return g.DropRank(r)
}

// RecordEventID notes eventID as the last event applied to id.
func (x *Index) RecordEventID(id RankID, eventID uint64) {
	g, r := x.of(id)
	g.RecordEventID(r, eventID)
}

// LastEventID returns the last applied event id of id, and whether there is one.
func (x *Index) LastEventID(id RankID) (uint64, bool) {
	g, r := x.of(id)
	return g.LastEventID(r)
}

// HasBlock reports whether id caches the block addressed by blockHash.
func (x *Index) HasBlock(id RankID, blockHash protocol.SequenceHash) bool {
	g, r := x.of(id)
	return g.HasBlock(r, blockHash)
}

// Store adds blocks as a chain under parent (nil = root) for id.
func (x *Index) Store(id RankID, parent *protocol.SequenceHash, blocks []Block) error {
	g, r := x.of(id)
	return g.Store(r, parent, blocks)
}

// Remove drops the blocks of id addressed by hashes; unknown hashes are
// ignored (their store may have been skipped). A block the rank then no
// longer holds takes with it every block the rank holds below it, as in
// Dynamo's tree: a removed block's descendants are unreachable, and must not
// come back when it is stored again. It returns how many blocks it dropped.
func (x *Index) Remove(id RankID, hashes []protocol.SequenceHash) int {
	g, r := x.of(id)
	return g.Remove(r, hashes)
}

// Clear drops every block of id and returns how many there were.
func (x *Index) Clear(id RankID) int {
	g, r := x.of(id)
	return g.Clear(r)
}

// Blocks returns how many blocks id caches.
func (x *Index) Blocks(id RankID) int {
	g, r := x.of(id)
	return g.Blocks(r)
}

// Nodes returns how many nodes the index holds: a prefix counts once per
// group of 64 ranks that holds it.
func (x *Index) Nodes() int {
	n := 0
	for _, g := range x.groups {
		if g != nil {
			n += g.Nodes()
		}
	}
	return n
}

// FindMatches writes into overlap[r] the number of leading blocks of local
// that rank r caches as one contiguous prefix, for every rank r below
// len(overlap). Matched then lists the ranks it gave an overlap.
func (x *Index) FindMatches(local []protocol.LocalBlockHash, overlap []uint32) {
	x.matched = x.matched[:0]
	for i, g := range x.groups {
		lo := i * maskRanks
		if lo >= len(overlap) {
			return
		}
		part := overlap[lo:min(lo+maskRanks, len(overlap))]
		if g == nil {
			clear(part)
			continue
		}
		x.matched = g.FindMatches(local, part, RankID(lo), x.matched)
	}
	clear(overlap[min(len(x.groups)*maskRanks, len(overlap)):])
}

// Matched returns the ranks the last FindMatches gave an overlap, each
// once, in no particular order: a caller that wants only those need not
// read every rank's. The slice is the index's, valid until the next
// FindMatches.
func (x *Index) Matched() []RankID { return x.matched }
