package affinity

import (
	"slices"
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
	x.Commit(b, 7)
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
	x.Commit(b, 1)
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
	x.Commit(a, 3)
	x.Commit(b, 4)
	staged := x.Stage(Key{Role: "prefill", Kind: KindSession, ID: "c1"}, "r3") // no target yet
	got := x.Invalidate(3)
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
	x.Commit(old, 1)
	x.EndLease(old, 0)
	fresh := x.Stage(conv, "r9")
	if !old.Gone() || x.LiveAt(conv, 0) != fresh || fresh.State != Staged {
		t.Fatal("staging a key replaces its binding")
	}
	if got := x.Expire(1000); len(got) != 0 {
		t.Fatalf("the replaced binding's expiry must not touch the new one: %v", got)
	}
}

// TestStagedTransitions: waiters join and leave a staged binding; an abort
// hands the binding to the first waiter, staged afresh with no rank, the
// others still waiting; a commit binds it and hands its waiters back; an
// abort without waiters leaves nothing. An invalidated staged binding
// comes back staged under its first waiter.
func TestStagedTransitions(t *testing.T) {
	x := NewTable[int](10)
	k := Key{Role: "aggregated", Kind: KindSession, ID: "s"}
	b := x.Stage(k, "a")
	waiters := map[string]Waiter{}
	for _, id := range []string{"b", "c", "d", "e"} {
		waiters[id] = x.Wait(b, id)
	}
	x.Leave(b, waiters["c"])
	x.Placed(b, 3)
	if !b.HasTarget || b.Target != 3 || b.State != Staged {
		t.Fatalf("placed: %+v", b)
	}
	if id, ok := x.Abort(b); !ok || id != "b" || b.Gone() || b.Initializer != "b" || !slices.Equal(b.Waiters(), []string{"d", "e"}) || b.HasTarget || x.LiveAt(k, 0) != b {
		t.Fatalf("abort: %q %v, binding %+v", id, ok, b)
	}
	x.Placed(b, 4)
	if gone := x.Invalidate(4); len(gone) != 1 || !b.Gone() {
		t.Fatalf("invalidate: %v", gone)
	}
	if id, ok := x.Abort(b); !ok || id != "d" || b.Gone() || x.LiveAt(k, 0) != b || !slices.Equal(b.Waiters(), []string{"e"}) {
		t.Fatalf("abort after invalidation: %q %v, binding %+v", id, ok, b)
	}
	released := x.Commit(b, 5)
	if !slices.Equal(released, []string{"e"}) || b.State != Bound || b.Target != 5 || b.Leases != 1 || b.Initializer != "" || b.Waiters() != nil {
		t.Fatalf("commit: released %v, binding %+v", released, b)
	}
	lone := x.Stage(Key{Role: "aggregated", Kind: KindSession, ID: "t"}, "e")
	if _, ok := x.Abort(lone); ok || !lone.Gone() || x.LiveAt(lone.Key, 0) != nil {
		t.Fatal("an abort without waiters must leave no binding")
	}
}

// A session's turns each end a lease; the expiry entries they leave behind
// (superseded when the next turn leases again) must not pile up until their
// time comes, and the live binding must still expire on time.
func TestTurnsDoNotPileUpExpiries(t *testing.T) {
	x := NewTable[int](1e12)
	b := x.Stage(conv, "r0")
	x.Commit(b, 1)
	for turn := range 10000 {
		x.EndLease(b, float64(turn))
		x.AddLease(b)
	}
	x.EndLease(b, 10000)
	if n := len(x.expiring); n > 2*len(x.byKey)+64 {
		t.Fatalf("%d expiry entries for one binding", n)
	}
	if got := x.Expire(10000 + 1e12); len(got) != 1 || !b.Gone() {
		t.Fatalf("the binding must expire 1e12 after its last lease: %v", got)
	}
}
