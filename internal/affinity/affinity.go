// Package affinity keeps session bindings on virtual time: which rank a
// conversation (or an agent's sibling group) is bound to, whether that is
// settled yet, how many requests hold it, and when it expires.
package affinity

import (
	"container/heap"
	"container/list"
	"math"
	"slices"
	"strings"
)

// Kind says what a key groups: one session, or the children of a parent.
type Kind string

// Key kinds.
const (
	KindSession Kind = "session"
	KindGroup   Kind = "group"
)

// Key names a binding. Bindings are per role.
type Key struct {
	Role string
	Kind Kind
	ID   string
}

// String is the key as responses show it: "session:abc" or "group:abc".
func (k Key) String() string { return string(k.Kind) + ":" + k.ID }

func compareKeys(a, b Key) int {
	if c := strings.Compare(a.Role, b.Role); c != 0 {
		return c
	}
	if c := strings.Compare(string(a.Kind), string(b.Kind)); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// State is where a binding is in its life.
type State uint8

// States.
const (
	// Staged: its first request (the initializer) was placed or is waiting
	// to be, and is not dispatched yet; other requests of the key wait.
	Staged State = iota + 1
	// Bound: the initializer was dispatched; the key's requests go to Target.
	Bound
)

func (s State) String() string {
	if s == Staged {
		return "staged"
	}
	return "bound"
}

// Binding ties a key to a target (a rank, for the engine). Its fields are
// for reading: the Table's transitions (Stage, Wait, Leave, Placed,
// Commit, Abort, AddLease, EndLease, Move, Expire, Invalidate) change it.
type Binding[T comparable] struct {
	Key         Key
	State       State
	Target      T    // bound: the rank; staged: the initializer's rank once placed
	HasTarget   bool // staged bindings have none while the initializer waits
	Initializer string
	waiters     list.List // staged: ids of the requests waiting for the commit or abort, in arrival order
	Leases      int       // requests placed (or waiting to be) under a bound binding
	lastLeaseAt float64   // when the last lease ended
	gone        bool
}

// Waiters are the ids of the requests waiting for a staged binding, in
// arrival order (nil when none).
func (b *Binding[T]) Waiters() []string {
	var ids []string
	for e := b.waiters.Front(); e != nil; e = e.Next() {
		ids = append(ids, e.Value.(string))
	}
	return ids
}

// Waiter is a request's place among a staged binding's waiters: leaving
// takes it out in O(1), whatever its place.
type Waiter struct{ e *list.Element }

// Gone reports whether the binding left its table (dropped, expired or
// invalidated); requests still pointing at it hold nothing.
func (b *Binding[T]) Gone() bool { return b.gone }

// Table holds the bindings. Not safe for concurrent use.
type Table[T comparable] struct {
	ttl      float64
	byKey    map[Key]*Binding[T]
	byTarget map[T]map[*Binding[T]]struct{} // the bindings in the table that have a target, by target
	expiring expiryHeap[T]
}

// NewTable returns an empty table whose idle bindings expire after ttl.
func NewTable[T comparable](ttl float64) *Table[T] {
	return &Table[T]{ttl: ttl, byKey: map[Key]*Binding[T]{}, byTarget: map[T]map[*Binding[T]]struct{}{}}
}

// ExpiresAt is when b expires: a bound binding without leases expires ttl
// after its last lease ended; any other never does.
func (x *Table[T]) ExpiresAt(b *Binding[T]) float64 {
	if b.State != Bound || b.Leases > 0 {
		return math.Inf(1)
	}
	return b.lastLeaseAt + x.ttl
}

// LiveAt returns the binding of key as it will be at time t with no input
// but the clock, or nil. A request arriving exactly at the expiry finds none.
func (x *Table[T]) LiveAt(key Key, t float64) *Binding[T] {
	b := x.byKey[key]
	if b == nil || t >= x.ExpiresAt(b) {
		return nil
	}
	return b
}

// Stage starts a staged binding for key with its initializer, replacing
// whatever binding the key had.
func (x *Table[T]) Stage(key Key, initializer string) *Binding[T] {
	x.drop(x.byKey[key])
	b := &Binding[T]{Key: key, State: Staged, Initializer: initializer}
	x.byKey[key] = b
	return b
}

// Wait adds a request that waits for a staged binding to settle.
func (x *Table[T]) Wait(b *Binding[T], id string) Waiter { return Waiter{b.waiters.PushBack(id)} }

// Leave takes a waiting request off a staged binding.
func (x *Table[T]) Leave(b *Binding[T], w Waiter) { b.waiters.Remove(w.e) }

// Placed records the rank a staged binding's initializer was placed on.
func (x *Table[T]) Placed(b *Binding[T], target T) { x.retarget(b, target, true) }

// Commit settles a staged binding on target, its initializer's rank, with
// one lease (the initializer's), and hands back the waiters it releases,
// each of which the caller gives a lease with AddLease.
func (x *Table[T]) Commit(b *Binding[T], target T) (released []string) {
	released = b.Waiters()
	b.waiters.Init()
	x.retarget(b, target, true)
	b.State, b.Initializer, b.Leases = Bound, "", 1
	return released
}

// Abort ends the staging of a binding whose initializer went away
// (aborted, or its rank drained or went away). Without waiters the binding
// leaves the table. Otherwise the first waiter becomes its initializer,
// staged afresh with no rank yet, and the others keep waiting: the binding
// stays the same object, so the requests that point at it need no update
// however often it passes from waiter to waiter. It returns the new
// initializer's id, or false.
func (x *Table[T]) Abort(b *Binding[T]) (initializer string, ok bool) {
	first := b.waiters.Front()
	if first == nil {
		x.drop(b)
		return "", false
	}
	b.waiters.Remove(first)
	if b.gone { // invalidated with its rank: it comes back, staged
		x.drop(x.byKey[b.Key])
		b.gone = false
		x.byKey[b.Key] = b
	}
	var none T
	x.retarget(b, none, false)
	b.State, b.Initializer = Staged, first.Value.(string)
	return b.Initializer, true
}

// Move re-binds a bound binding to another target (soft affinity).
func (x *Table[T]) Move(b *Binding[T], target T) { x.retarget(b, target, true) }

// retarget sets b's target, keeping byTarget in step.
func (x *Table[T]) retarget(b *Binding[T], target T, has bool) {
	x.untarget(b)
	b.Target, b.HasTarget = target, has
	if has && !b.gone {
		set := x.byTarget[target]
		if set == nil {
			set = map[*Binding[T]]struct{}{}
			x.byTarget[target] = set
		}
		set[b] = struct{}{}
	}
}

// untarget takes b out of byTarget; its target stays for readers.
func (x *Table[T]) untarget(b *Binding[T]) {
	if !b.HasTarget || b.gone {
		return
	}
	set := x.byTarget[b.Target]
	delete(set, b)
	if len(set) == 0 {
		delete(x.byTarget, b.Target)
	}
}

func (x *Table[T]) drop(b *Binding[T]) {
	if b != nil && !b.gone {
		x.untarget(b)
		b.gone = true
		delete(x.byKey, b.Key)
	}
}

// AddLease records one more request under a bound binding.
func (x *Table[T]) AddLease(b *Binding[T]) { b.Leases++ }

// EndLease records that a request under b ended at time now; the last one
// starts the idle countdown.
func (x *Table[T]) EndLease(b *Binding[T], now float64) {
	if b.gone || b.Leases == 0 {
		return
	}
	b.Leases--
	if b.Leases == 0 {
		b.lastLeaseAt = now
		heap.Push(&x.expiring, expiryEntry[T]{at: x.ExpiresAt(b), b: b})
		x.compact()
	}
}

// compact rebuilds the expiry heap from the bindings once superseded
// entries (a binding leased again, or gone) outnumber them: a session's
// every turn left one until its time came, an hour of turns by default.
// Pops come in (time, key) order, which the rebuild keeps.
func (x *Table[T]) compact() {
	if len(x.expiring) <= 2*len(x.byKey)+64 {
		return
	}
	x.expiring = x.expiring[:0]
	for _, b := range x.byKey {
		if at := x.ExpiresAt(b); !math.IsInf(at, 1) {
			x.expiring = append(x.expiring, expiryEntry[T]{at: at, b: b})
		}
	}
	heap.Init(&x.expiring)
}

// Expire removes every binding whose expiry is at or before now and returns
// their keys in a stable order.
func (x *Table[T]) Expire(now float64) []Key {
	var keys []Key
	for x.expiring.Len() > 0 && x.expiring[0].at <= now {
		e := heap.Pop(&x.expiring).(expiryEntry[T])
		if !e.b.gone && x.ExpiresAt(e.b) == e.at {
			x.drop(e.b)
			keys = append(keys, e.b.Key)
		}
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

// Invalidate removes every binding whose target is one of targets and
// returns them in a stable order. It costs what it removes, not the size of
// the table: a fleet going away worker by worker is linear.
func (x *Table[T]) Invalidate(targets ...T) []*Binding[T] {
	var out []*Binding[T]
	for _, t := range targets {
		for b := range x.byTarget[t] {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b *Binding[T]) int { return compareKeys(a.Key, b.Key) })
	for _, b := range out {
		x.drop(b)
	}
	return out
}

// Sorted returns every binding in a stable order.
func (x *Table[T]) Sorted() []*Binding[T] {
	out := make([]*Binding[T], 0, len(x.byKey))
	for _, b := range x.byKey {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b *Binding[T]) int { return compareKeys(a.Key, b.Key) })
	return out
}

type expiryEntry[T comparable] struct {
	at float64
	b  *Binding[T]
}

// expiryHeap orders pending expiries; entries of bindings that were leased
// again or went away are skipped when they come up.
type expiryHeap[T comparable] []expiryEntry[T]

func (h expiryHeap[T]) Len() int { return len(h) }
func (h expiryHeap[T]) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return compareKeys(h[i].b.Key, h[j].b.Key) < 0
}
func (h expiryHeap[T]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap[T]) Push(v any)   { *h = append(*h, v.(expiryEntry[T])) }
func (h *expiryHeap[T]) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}
