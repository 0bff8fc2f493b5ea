package main

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestCollectorAtItsPercentUnlessGOGCIsSet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "100") // restored after the test
	collectUnlessSet(serveGCPercent)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC set in the environment: GC percent %d, want it left at 100", got)
	}
	os.Unsetenv("GOGC")
	for _, want := range []int{serveGCPercent, replayGCPercent} {
		debug.SetGCPercent(7)
		collectUnlessSet(want)
		if got := debug.SetGCPercent(100); got != want {
			t.Fatalf("GOGC unset: GC percent %d, want %d", got, want)
		}
	}
}
