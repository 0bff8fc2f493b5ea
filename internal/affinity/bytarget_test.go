package affinity

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestInvalidateFindsExactlyTheTargetsBindings drives a table through random
// transitions and checks, after each, that the per-target index Invalidate
// reads agrees with the bindings themselves: a binding is listed under a
// target exactly when it is in the table with that target.
func TestInvalidateFindsExactlyTheTargetsBindings(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		x := NewTable[int](10)
		now := 0.0
		key := rapid.Map(rapid.IntRange(0, 4), func(i int) Key { return Key{Role: "aggregated", Kind: KindSession, ID: fmt.Sprint(i)} })
		target := rapid.IntRange(0, 3)
		for range rapid.IntRange(1, 80).Draw(t, "steps") {
			k := key.Draw(t, "key")
			b := x.byKey[k]
			switch op := rapid.IntRange(0, 7).Draw(t, "op"); {
			case op == 0 || b == nil:
				x.Stage(k, "i")
			case op == 1:
				x.Wait(b, "w")
			case op == 2 && b.State == Staged:
				x.Placed(b, target.Draw(t, "target"))
			case op == 3 && b.State == Staged:
				x.Commit(b, target.Draw(t, "target"))
			case op == 4 && b.State == Staged:
				x.Abort(b)
			case op == 5 && b.State == Bound:
				x.Move(b, target.Draw(t, "target"))
			case op == 6 && b.State == Bound:
				x.EndLease(b, now)
				now += rapid.Float64Range(0, 20).Draw(t, "dt")
				x.Expire(now)
			case op == 7:
				want := []*Binding[int]{}
				tg := target.Draw(t, "target")
				for _, b := range x.Sorted() {
					if b.HasTarget && b.Target == tg {
						want = append(want, b)
					}
				}
				if got := x.Invalidate(tg); !slices.Equal(got, want) && len(got)+len(want) > 0 {
					t.Fatalf("Invalidate(%d) = %v, want %v", tg, got, want)
				}
			}
			listed := 0
			for tg, set := range x.byTarget {
				for b := range set {
					listed++
					if b.gone || !b.HasTarget || b.Target != tg || x.byKey[b.Key] != b {
						t.Fatalf("%v is listed under %d: %+v", b.Key, tg, b)
					}
				}
			}
			for _, b := range x.byKey {
				if b.HasTarget {
					listed--
				}
			}
			if listed != 0 {
				t.Fatalf("the index lists %d bindings more than have a target", listed)
			}
		}
	})
}
