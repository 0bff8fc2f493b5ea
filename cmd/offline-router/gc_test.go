package main

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestCollectorAtHalfUnlessGOGCIsSet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "100") // restored after the test
	collectAtHalfUnlessSet()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC set in the environment: GC percent %d, want it left at 100", got)
	}
	os.Unsetenv("GOGC")
	collectAtHalfUnlessSet()
	if got := debug.SetGCPercent(100); got != 50 {
		t.Fatalf("GOGC unset: GC percent %d, want 50", got)
	}
}
