package kvindex

import "github.com/offline-router/offline-router/internal/protocol"

// Tier is the index of one lower storage tier (host, disk or external),
// as Dynamo's LowerTierIndexer keeps it: not a tree but a set of
// continuation edges, (parent block hash, local hash) -> child block hash,
// each with the ranks that hold it. A lower tier holds the blocks a device
// evicted, hung off the device blocks they followed, so its edges need not
// start at the root, nor their parent be in this tier: a match continues
// from where the device prefix (or the tier before) stopped.
//
// As in Dynamo, the first mapping of an edge wins: a store that names an
// edge another child holds, or a block hash the rank holds under another
// edge, stops there, and the rest of its chain is not taken.
//
// Not safe for concurrent use.
type Tier struct {
	edges map[tierKey]*tierEdge
	ranks []map[protocol.SequenceHash]tierSlot // by rank: its block hashes and where each is held
	held  int                                  // blocks held, over every rank
}

// tierKey is an edge: the parent's block hash (rooted: none) and the
// child's local hash.
type tierKey struct {
	parent protocol.SequenceHash
	rooted bool
	local  protocol.LocalBlockHash
}

type tierEdge struct {
	child  protocol.SequenceHash
	owners []RankID
}

// tierSlot is where a rank's block is held: its edge, and the rank's
// place among the edge's owners, so that leaving is O(1).
type tierSlot struct {
	key tierKey
	at  int
}

// Continuation is where a rank's match stands: Pos blocks of the prompt
// matched, the last of them Hash (Rooted: none matched yet).
type Continuation struct {
	Rank   RankID
	Pos    int
	Hash   protocol.SequenceHash
	Rooted bool
}

// NewTier returns an empty tier.
func NewTier() *Tier { return &Tier{edges: map[tierKey]*tierEdge{}} }

// Blocks returns how many blocks the tier holds, over every rank.
func (t *Tier) Blocks() int { return t.held }

// RankBlocks returns how many blocks id holds in the tier.
func (t *Tier) RankBlocks(id RankID) int {
	if int(id) >= len(t.ranks) {
		return 0
	}
	return len(t.ranks[id])
}

// Store records the blocks of a stored event for id, each the child of
// the one before, the first the child of parent (nil: a root).
func (t *Tier) Store(id RankID, parent *protocol.SequenceHash, blocks []Block) {
	for int(id) >= len(t.ranks) {
		t.ranks = append(t.ranks, nil)
	}
	if t.ranks[id] == nil {
		t.ranks[id] = map[protocol.SequenceHash]tierSlot{}
	}
	mine := t.ranks[id]
	key := tierKey{rooted: parent == nil}
	if parent != nil {
		key.parent = *parent
	}
	for _, b := range blocks {
		key.local = b.TokensHash
		if s, ok := mine[b.BlockHash]; ok {
			if s.key != key {
				return // held under another edge: the chain is not this index's
			}
		} else {
			e := t.edges[key]
			switch {
			case e == nil:
				e = &tierEdge{child: b.BlockHash}
				t.edges[key] = e
			case e.child != b.BlockHash:
				return // the edge leads to another block: the first mapping wins
			}
			mine[b.BlockHash] = tierSlot{key: key, at: len(e.owners)}
			e.owners = append(e.owners, id)
			t.held++
		}
		key = tierKey{parent: b.BlockHash}
	}
}

// Remove drops id's blocks of hashes; a hash id does not hold is passed
// over. An edge has no tree below it, so nothing else goes.
func (t *Tier) Remove(id RankID, hashes []protocol.SequenceHash) {
	if int(id) >= len(t.ranks) || t.ranks[id] == nil {
		return
	}
	for _, h := range hashes {
		if s, ok := t.ranks[id][h]; ok {
			t.leave(id, h, s)
		}
	}
}

// Clear drops every block of id, and returns how many.
func (t *Tier) Clear(id RankID) int {
	if int(id) >= len(t.ranks) {
		return 0
	}
	n := len(t.ranks[id])
	for h, s := range t.ranks[id] { // order does not matter: each leave is independent
		t.leave(id, h, s)
	}
	t.ranks[id] = nil
	return n
}

// leave takes id off the edge of its block h, and the edge away when no
// rank holds it: the last owner moves into id's place.
func (t *Tier) leave(id RankID, h protocol.SequenceHash, s tierSlot) {
	e := t.edges[s.key]
	last := len(e.owners) - 1
	if moved := e.owners[last]; s.at != last {
		e.owners[s.at] = moved
		ms := t.ranks[moved][e.child]
		ms.at = s.at
		t.ranks[moved][e.child] = ms
	}
	e.owners = e.owners[:last]
	if last == 0 {
		delete(t.edges, s.key)
	}
	delete(t.ranks[id], h)
	t.held--
}

// RootOwners returns the ranks holding the prompt's first block as a root
// of this tier (nothing before it), which can match from the start
// without a device prefix. The slice is the tier's: read, do not keep.
func (t *Tier) RootOwners(first protocol.LocalBlockHash) []RankID {
	if e := t.edges[tierKey{rooted: true, local: first}]; e != nil {
		return e.owners
	}
	return nil
}

// Extend continues c along the prompt's local hashes through the blocks
// c.Rank holds in this tier, one edge after another while each is the
// rank's, and returns how many it matched; c is left where it stopped.
func (t *Tier) Extend(local []protocol.LocalBlockHash, c *Continuation) int {
	if int(c.Rank) >= len(t.ranks) || len(t.ranks[c.Rank]) == 0 {
		return 0
	}
	mine, start := t.ranks[c.Rank], c.Pos
	for c.Pos < len(local) {
		key := tierKey{parent: c.Hash, rooted: c.Rooted, local: local[c.Pos]}
		e := t.edges[key]
		if e == nil {
			break
		}
		if s, ok := mine[e.child]; !ok || s.key != key {
			break
		}
		c.Pos, c.Hash, c.Rooted = c.Pos+1, e.child, false
	}
	return c.Pos - start
}
