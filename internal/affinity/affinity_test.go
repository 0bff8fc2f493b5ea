package affinity

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

var conv = Key{Role: "aggregated", Kind: KindSession, ID: "c1"}

func TestExpiryIsExactlyTTLAfterTheLastLease(t *testing.T) {
	x := NewTable[int](100)
	b := x.Stage(conv, "r1")
	if x.LiveAt(conv, 1e12) != b {
		t.Fatal("a staged binding never expires")
	}
	x.Bind(b, 7)
	x.AddLease(b)
	x.EndLease(b, 10)
	if got := x.Expire(1e9); len(got) != 0 || x.LiveAt(conv, 1e9) != b {
		t.Fatal("a binding with a lease must not expire")
	}
	x.EndLease(b, 50)
	if x.LiveAt(conv, 149.999) != b || x.LiveAt(conv, 150) != nil {
		t.Fatal("live until ttl after the last lease, gone at exactly that time")
	}
	if got := x.Expire(149.999); len(got) != 0 {
		t.Fatalf("expired early: %v", got)
	}
	if got := x.Expire(150); !cmp.Equal(got, []Key{conv}) || !b.Gone() {
		t.Fatalf("Expire(150) = %v", got)
	}
}

func TestALeaseTakenAgainCancelsThePendingExpiry(t *testing.T) {
	x := NewTable[int](100)
	b := x.Stage(conv, "r1")
	x.Bind(b, 1)
	x.EndLease(b, 0)
	x.AddLease(b)
	if got := x.Expire(500); len(got) != 0 {
		t.Fatalf("expired while leased: %v", got)
	}
	x.EndLease(b, 600)
	if got := x.Expire(699); len(got) != 0 {
		t.Fatal("the countdown restarts at the last lease's end")
	}
	if got := x.Expire(700); len(got) != 1 {
		t.Fatal("and ends ttl later")
	}
	x.EndLease(b, 800) // a lease of a gone binding: nothing happens
	if b.Leases != 0 {
		t.Fatal("a gone binding's leases do not change")
	}
}

func TestInvalidateByTarget(t *testing.T) {
	x := NewTable[int](100)
	other := Key{Role: "aggregated", Kind: KindGroup, ID: "p"}
	a, b := x.Stage(conv, "r1"), x.Stage(other, "r2")
	x.Bind(a, 3)
	x.Bind(b, 4)
	staged := x.Stage(Key{Role: "prefill", Kind: KindSession, ID: "c1"}, "r3") // no target yet
	got := x.Invalidate(func(target int) bool { return target == 3 })
	if len(got) != 1 || got[0] != a || !a.Gone() || b.Gone() || staged.Gone() {
		t.Fatalf("invalidated %v", got)
	}
	if len(x.Sorted()) != 2 {
		t.Fatal("two bindings remain")
	}
}

func TestStageReplacesTheOldBinding(t *testing.T) {
	x := NewTable[int](100)
	old := x.Stage(conv, "r1")
	x.Bind(old, 1)
	x.EndLease(old, 0)
	fresh := x.Stage(conv, "r9")
	if !old.Gone() || x.LiveAt(conv, 0) != fresh || fresh.State != Staged {
		t.Fatal("staging a key replaces its binding")
	}
	if got := x.Expire(1000); len(got) != 0 {
		t.Fatalf("the replaced binding's expiry must not touch the new one: %v", got)
	}
}
