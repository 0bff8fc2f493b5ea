package kvindex

import "runtime"

type runtimeMem struct{ heap uint64 }

func (m *runtimeMem) read() {
	runtime.GC()
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.heap = s.HeapAlloc
}

var sink any

// keep stops the compiler from dropping what a benchmark measures.
func keep(v any) { sink = v }
