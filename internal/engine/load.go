package engine

// Load booking: what each rank is busy with, from the router's own
// placements. A rank's active blocks are reference-counted by sequence hash
// so that requests sharing a prefix on one rank count it once.

// rankRef is one rank's reference count on an active block.
type rankRef struct {
	slot uint32
	refs uint32
}

// holders are the ranks holding one active block. The first is kept inline:
// a block is usually active on one rank, and booking then allocates nothing.
type holders struct {
	first rankRef // refs 0: none
	more  []rankRef
}

// activeBlocks maps a sequence hash to the ranks that hold it active. One map
// for all ranks lets a placement count, in one pass over the prompt, how many
// of its blocks are already active on every rank.
type activeBlocks map[uint64]*holders

// book adds the demand's hashed blocks to rank r's active set. found holds
// what countHits found for each of them (nil: not active anywhere), so that
// booking looks nothing up again.
func (a activeBlocks) book(d *demand, rk *rank, found []*holders) {
	for i, h := range d.seq {
		hs := found[i]
		if hs == nil {
			hs = &holders{}
			a[h] = hs
		}
		switch {
		case hs.first.refs == 0:
			hs.first = rankRef{slot: rk.slot, refs: 1}
			rk.distinctBlocks++
		case hs.first.slot == rk.slot:
			hs.first.refs++
		default:
			i := 0
			for i < len(hs.more) && hs.more[i].slot != rk.slot {
				i++
			}
			if i < len(hs.more) {
				hs.more[i].refs++
			} else {
				hs.more = append(hs.more, rankRef{slot: rk.slot, refs: 1})
				rk.distinctBlocks++
			}
		}
	}
}

// release removes what book added.
func (a activeBlocks) release(d *demand, rk *rank) {
	for _, h := range d.seq {
		hs, ok := a[h]
		if !ok {
			continue
		}
		if hs.first.slot == rk.slot && hs.first.refs > 0 {
			if hs.first.refs--; hs.first.refs == 0 {
				rk.distinctBlocks--
				if n := len(hs.more); n > 0 {
					hs.first, hs.more = hs.more[n-1], hs.more[:n-1]
				}
			}
		} else {
			for i := range hs.more {
				if hs.more[i].slot != rk.slot {
					continue
				}
				if hs.more[i].refs--; hs.more[i].refs == 0 {
					hs.more[i] = hs.more[len(hs.more)-1]
					hs.more = hs.more[:len(hs.more)-1]
					rk.distinctBlocks--
				}
				break
			}
		}
		if hs.first.refs == 0 {
			delete(a, h)
		}
	}
}

// countHits adds to hits[slot], for every rank, how many of seq are active
// there, and returns what it found for each block (nil where none) for
// book. hits must be zeroed and cover every slot.
func (a activeBlocks) countHits(seq []uint64, hits []uint32, found []*holders) []*holders {
	found = found[:0]
	for _, h := range seq {
		hs := a[h]
		found = append(found, hs)
		if hs != nil {
			hits[hs.first.slot]++
			for _, ref := range hs.more {
				hits[ref.slot]++
			}
		}
	}
	return found
}
