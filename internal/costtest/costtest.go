// Package costtest measures, for tests, what a reader costs on a deep or
// long input without timing it (the machine is noisy): the bytes it
// allocates, and whether it fits a small stack.
package costtest

import (
	"runtime"
	"runtime/debug"
)

// Shallow runs f on a goroutine whose stack may not pass 1 MB: a reader
// that recursed per level of a deep input would overflow it, which ends
// the test binary (a fatal error, not a panic) naming the recursion.
func Shallow(f func()) {
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// Allocated is how many bytes f allocates.
func Allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
