package engine

// Load booking: what each rank is busy with, from the router's own
// placements. A rank's active blocks are reference-counted by sequence hash
// so that requests sharing a prefix on one rank count it once.

// rankRef is one rank's reference count on an active block.
type rankRef struct {
	slot uint32
	refs uint32
}

// activeBlocks maps a sequence hash to the ranks that hold it active. One map
// for all ranks lets a placement count, in one pass over the prompt, how many
// of its blocks are already active on every rank.
type activeBlocks map[uint64][]rankRef

// book adds the demand's hashed blocks to rank r's active set.
func (a activeBlocks) book(d *demand, rk *rank) {
	for _, h := range d.seq {
		refs := a[h]
		found := false
		for i := range refs {
			if refs[i].slot == rk.slot {
				refs[i].refs++
				found = true
				break
			}
		}
		if !found {
			a[h] = append(refs, rankRef{slot: rk.slot, refs: 1})
			rk.distinctBlocks++
		}
	}
}

// release removes what book added.
func (a activeBlocks) release(d *demand, rk *rank) {
	for _, h := range d.seq {
		refs := a[h]
		for i := range refs {
			if refs[i].slot != rk.slot {
				continue
			}
			if refs[i].refs--; refs[i].refs == 0 {
				refs[i] = refs[len(refs)-1]
				refs = refs[:len(refs)-1]
				rk.distinctBlocks--
				if len(refs) == 0 {
					delete(a, h)
				} else {
					a[h] = refs
				}
			}
			break
		}
	}
}

// countHits adds to hits[slot], for every rank, how many of seq are active
// there. hits must be zeroed and cover every slot.
func (a activeBlocks) countHits(seq []uint64, hits []uint32) {
	for _, h := range seq {
		for _, ref := range a[h] {
			hits[ref.slot]++
		}
	}
}
