package cluster

import "github.com/offline-router/offline-router/internal/protocol"

// hashTable maps sequence hashes to slice indices for the simulated
// caches, written out rather than a Go map, whose probing and growth were
// a large share of a replay: open addressing with linear probing, removal
// by shifting the probe run back, so churn never leaves tombstones.
// Nothing is allocated once it has grown to its working size.
type hashTable struct {
	slots []hashSlot // length a power of two, or nil
	n     int        // entries
}

type hashSlot struct {
	hash protocol.SequenceHash
	idx  int32 // the index, plus one: 0 is an empty slot
}

// home is where a probe for h starts. Sequence hashes are well mixed
// already; the multiply spreads hosts' small regular ones too.
func (t *hashTable) home(h protocol.SequenceHash) int {
	return int((uint64(h) * 0x9e3779b97f4a7c15) >> 32 & uint64(len(t.slots)-1))
}

// warm reads the slot each of hashes starts its probe at, all before any
// look-up needs one, and returns a value made of them (for the caller to
// keep, so that the loads are not dropped): the loads miss the cache alike,
// and issued together they overlap instead of waiting one by one.
func (t *hashTable) warm(hashes []protocol.SequenceHash) int32 {
	if t.slots == nil {
		return 0
	}
	var x int32
	for _, h := range hashes {
		x ^= t.slots[t.home(h)].idx
	}
	return x
}

// find returns h's index, or -1.
func (t *hashTable) find(h protocol.SequenceHash) int32 {
	if t.slots == nil {
		return -1
	}
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s.idx == 0 {
			return -1
		}
		if s.hash == h {
			return s.idx - 1
		}
	}
}

// insert maps h, which is not in the table, to idx.
func (t *hashTable) insert(h protocol.SequenceHash, idx int32) {
	if (t.n+1)*2 > len(t.slots) {
		t.grow()
	}
	t.n++
	mask := len(t.slots) - 1
	i := t.home(h)
	for t.slots[i].idx != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = hashSlot{hash: h, idx: idx + 1}
}

// grow doubles the table (at least 64 slots) and places every entry anew.
func (t *hashTable) grow() {
	old := t.slots
	t.slots = make([]hashSlot, max(64, 2*len(old)))
	mask := len(t.slots) - 1
	for _, s := range old {
		if s.idx == 0 {
			continue
		}
		i := t.home(s.hash)
		for t.slots[i].idx != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// remove takes h out; it must be in the table.
func (t *hashTable) remove(h protocol.SequenceHash) {
	mask := len(t.slots) - 1
	i := t.home(h)
	for t.slots[i].hash != h || t.slots[i].idx == 0 {
		i = (i + 1) & mask
	}
	// Shift back every later slot of the probe run that may move into the
	// hole: one whose home does not lie cyclically in (hole, slot].
	for j := (i + 1) & mask; t.slots[j].idx != 0; j = (j + 1) & mask {
		if k := t.home(t.slots[j].hash); (j-k)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = hashSlot{}
	t.n--
}
