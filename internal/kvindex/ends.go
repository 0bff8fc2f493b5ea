package kvindex

// endIndex finds an edge by the block hash of its last block, for an index
// whose ranks keep no tables (Lazy): a chain a rank frees tail first starts
// at the end of an edge it holds, since it holds nothing below its deepest
// block. Several edges may end in one hash (ranks that hashed with other
// seeds); such a hash finds none, and a rank that names it gets its table.
type endIndex struct {
	first edgeTable           // hash (under parent 0) -> the edge that ended in it first
	more  map[uint64][]uint32 // the further edges ending in a hash
}

func (x *endIndex) add(h uint64, e uint32) {
	if _, added := x.first.findOrAdd(0, h, func() uint32 { return e }); !added {
		if x.more == nil {
			x.more = map[uint64][]uint32{}
		}
		x.more[h] = append(x.more[h], e)
	}
}

func (x *endIndex) remove(h uint64, e uint32) {
	more := x.more[h]
	if f, _ := x.first.find(0, h); f != e {
		i := 0
		for more[i] != e {
			i++
		}
		more = append(more[:i], more[i+1:]...)
	} else if len(more) == 0 {
		x.first.take(0, h)
		return
	} else {
		x.first.set(0, h, more[len(more)-1])
		more = more[:len(more)-1]
	}
	if len(more) == 0 {
		delete(x.more, h)
	} else {
		x.more[h] = more
	}
}

// find returns the one edge ending in h, if exactly one does.
func (x *endIndex) find(h uint64) (uint32, bool) {
	if len(x.more) > 0 && len(x.more[h]) > 0 {
		return 0, false
	}
	return x.first.find(0, h)
}
