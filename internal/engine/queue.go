package engine

import (
	"container/heap"
	"slices"

	"github.com/offline-router/offline-router/internal/protocol"
)

// The policy queue is Dynamo's flow control, "classify, order, place"
// (lib/kv-router scheduling/policy_queue.rs and policy_config.rs at the
// pinned commit): every request is in a policy class; a request that must
// wait joins its class's queue in its role; a class orders only its own
// queue and only its head is ever considered (no overtaking inside a
// class); and deficit round robin shares a role's dispatches between its
// classes by their quanta, in uncached prompt tokens (in proportion while a
// head costs more than its class's quantum: PROTOCOL.md §5).
// Without configured classes there is one synthetic class, Dynamo's
// fallback: queue_threshold is its busy fraction, queue_policy its order,
// and it has no deadline.

// roleOrder is the order in which role queues are drained.
var roleOrder = []protocol.Role{protocol.RoleAggregated, protocol.RoleDecode, protocol.RolePrefill}

func roleIndex(r protocol.Role) int {
	switch r {
	case protocol.RoleDecode:
		return 1
	case protocol.RolePrefill:
		return 2
	}
	return 0
}

// flowClass is one policy class as the config gives it.
type flowClass struct {
	name string
	// legacy: the synthetic class, ordered by (strict_priority tier, queue
	// policy score, arrival) with no deadline; a configured class orders by
	// (deadline, arrival) and ignores both priorities, as Dynamo's does.
	legacy   bool
	sloMS    float64
	quantum  uint64
	busyAbs  *float64 // prefill_busy_threshold, in tokens
	busyFrac *float64 // prefill_busy_threshold_frac, of max_num_batched_tokens
	// Per-worker queue limits (nil: none): requests, their input tokens,
	// their cached tokens.
	limits [3]*uint64
}

// queueing reports whether the class ever queues: a class with no busy
// threshold places every request on arrival.
func (c *flowClass) queueing() bool { return c.busyAbs != nil || c.busyFrac != nil }

// flowClasses are the config's classes, or the synthetic one.
func flowClasses(cfg *protocol.Config) []*flowClass {
	if len(cfg.PolicyClasses) == 0 {
		return []*flowClass{{name: protocol.SyntheticPolicyClass, legacy: true, quantum: 1, busyFrac: cfg.QueueThreshold}}
	}
	out := make([]*flowClass, len(cfg.PolicyClasses))
	for i, pc := range cfg.PolicyClasses {
		c := &flowClass{name: pc.Name, sloMS: float64(pc.SLOMS), quantum: pc.Quantum, busyFrac: pc.PrefillBusyThresholdFrac,
			limits: [3]*uint64{pc.RequestQueueLimitPerWorker, pc.RawISLTokenQueueLimitPerWorker, pc.CachedTokenQueueLimitPerWorker}}
		if v := pc.PrefillBusyThreshold; v != nil {
			abs := float64(*v)
			c.busyAbs = &abs
		}
		out[i] = c
	}
	return out
}

// classQueue is one class's waiting requests in one role, with what deficit
// round robin and the limits keep of it.
type classQueue struct {
	class   *flowClass
	role    protocol.Role
	heap    classHeap
	deficit uint64
	held    usage    // what the waiting requests hold, against the limits
	wake    roleWake // its head's moment (wakeup.go)
	// waiters are its requests held for their session's staged binding,
	// in arrival order, which for a configured class is deadline order (a
	// held request's deadline runs too); those no longer held are skipped.
	waiters []*request
}

// firstWaiter is the earliest of cq's requests still held for a binding.
func (cq *classQueue) firstWaiter() *request {
	for len(cq.waiters) > 0 && cq.waiters[0].bindRole != bindWaiter {
		cq.waiters[0] = nil
		cq.waiters = cq.waiters[1:]
	}
	if len(cq.waiters) == 0 {
		return nil
	}
	return cq.waiters[0]
}

// hold notes a request of a configured class that starts waiting for its
// binding. Those that stopped waiting are swept once they outnumber the
// held requests of every class (held), so the list stays their size.
func (cq *classQueue) hold(req *request, held int) {
	if cq.class.legacy {
		return // no deadline to keep
	}
	if len(cq.waiters) > 2*held+32 {
		cq.waiters = slices.DeleteFunc(cq.waiters, func(r *request) bool { return r.bindRole != bindWaiter })
	}
	cq.waiters = append(cq.waiters, req)
}

// usage is what queued requests hold: how many, their input tokens and
// their cached tokens (each fixed at arrival).
type usage [3]uint64

func (q *classQueue) head() *request {
	if len(q.heap) == 0 {
		return nil
	}
	return q.heap[0]
}

// roleQueues are one role's classes, in config order, and the round robin's
// place among them: the class after the last one served, and the class
// that keeps its turn while credit remains (carry, -1 for none).
type roleQueues struct {
	classes []*classQueue
	cursor  int
	carry   int
	found   []bool   // scratch of next: the classes whose head it costed
	costs   []uint64 // and those costs
}

type policyQueue struct {
	roles    [3]roleQueues
	count    int
	arrivals []*request // waiting requests in arrival order, for queue_timeout_ms; stale entries skipped
	nextSeq  uint64
}

func newPolicyQueue(classes []*flowClass) policyQueue {
	var q policyQueue
	for _, role := range roleOrder {
		rq := &q.roles[roleIndex(role)]
		rq.carry = -1
		for _, c := range classes {
			rq.classes = append(rq.classes, &classQueue{class: c, role: role})
		}
		rq.found, rq.costs = make([]bool, len(classes)), make([]uint64, len(classes))
	}
	return q
}

// classOf is the queue a request of role and class index waits in.
func (q *policyQueue) classOf(role protocol.Role, class int) *classQueue {
	return q.roles[roleIndex(role)].classes[class]
}

func (q *policyQueue) push(req *request) {
	q.nextSeq++
	req.arrivalSeq = q.nextSeq
	cq := req.class
	heap.Push(&cq.heap, req)
	for i, v := range req.holds {
		cq.held[i] += v
	}
	q.count++
}

func (q *policyQueue) remove(req *request) {
	cq := req.class
	heap.Remove(&cq.heap, req.queueIndex)
	q.left(cq, req)
}

// left accounts for req leaving cq, and forgets the class's credit when it
// empties (Dynamo: an empty class keeps no deficit).
func (q *policyQueue) left(cq *classQueue, req *request) {
	for i, v := range req.holds {
		cq.held[i] -= v
	}
	q.count--
	if len(cq.heap) == 0 {
		cq.deficit = 0
		rq := &q.roles[roleIndex(cq.role)]
		if rq.carry >= 0 && rq.classes[rq.carry] == cq {
			rq.carry = -1
		}
	}
}

// oldest returns the waiting request that arrived first, if any.
func (q *policyQueue) oldest() *request {
	for len(q.arrivals) > 0 && !q.arrivals[0].waiting() {
		q.arrivals[0] = nil
		q.arrivals = q.arrivals[1:]
	}
	if len(q.arrivals) == 0 {
		return nil
	}
	return q.arrivals[0]
}

// ordered lists a class's waiting requests in queue order.
func (cq *classQueue) ordered() []*request {
	out := slices.Clone(cq.heap)
	slices.SortFunc(out, func(a, b *request) int {
		if before(a, b) {
			return -1
		}
		return 1
	})
	return out
}

// before is a class's order. The synthetic class: higher strict_priority
// tier first, then the higher policy score, then earlier arrival. A
// configured class: the earlier deadline, then earlier arrival (one SLO per
// class, so arrival order).
func before(a, b *request) bool {
	if a.class.class.legacy {
		if a.d.tier != b.d.tier {
			return a.d.tier > b.d.tier
		}
		if a.score != b.score {
			return a.score > b.score
		}
	} else if a.deadline != b.deadline {
		return a.deadline < b.deadline
	}
	return a.arrivalSeq < b.arrivalSeq
}

// heads tests a class's head: whether it can be dispatched now.
type heads interface {
	dispatchable(cq *classQueue) bool
}

// waiting reports whether some class of the role has a waiting request.
func (rq *roleQueues) waiting() bool {
	for _, cq := range rq.classes {
		if len(cq.heap) > 0 {
			return true
		}
	}
	return false
}

// next is deficit round robin's choice among a role's class heads: the
// class to serve now, or nil when no head is dispatchable. h tests a
// class's head now (it may be asked more than once). Dynamo's
// pop_next: a class that kept its turn (carry) spends its credit first;
// else, from the cursor, each class whose head is dispatchable earns its
// quantum when its credit does not cover the head's cost, and the first
// one covered is served; when none is, every dispatchable class earns the
// same number of quanta, the fewest that cover one of them, and the first
// covered in ring order is served. A blocked or empty class earns nothing.
func (rq *roleQueues) next(h heads) *classQueue {
	n := len(rq.classes)
	if n == 1 { // one class: its credit never decides
		if cq := rq.classes[0]; cq.head() != nil && h.dispatchable(cq) {
			return cq
		}
		return nil
	}
	cost := func(cq *classQueue) (uint64, bool) {
		if cq.head() == nil || !h.dispatchable(cq) {
			return 0, false
		}
		return cq.head().cost, true
	}
	carried := rq.carry
	rq.carry = -1
	if carried >= 0 {
		cq := rq.classes[carried]
		if c, ok := cost(cq); ok && c <= cq.deficit {
			return rq.served(carried)
		}
	}
	found, costOf := rq.found, rq.costs
	clear(found)
	for off := range n {
		k := (rq.cursor + off) % n
		cq := rq.classes[k]
		c, ok := cost(cq)
		if !ok {
			continue
		}
		found[k], costOf[k] = true, c
		if c <= cq.deficit {
			return rq.served(k)
		}
		cq.deficit = saturatingAdd(cq.deficit, cq.class.quantum)
		if c <= cq.deficit {
			return rq.served(k)
		}
	}
	rounds := uint64(0)
	for k, cq := range rq.classes {
		if found[k] {
			need := (costOf[k] - cq.deficit + cq.class.quantum - 1) / cq.class.quantum
			if rounds == 0 || need < rounds {
				rounds = need
			}
		}
	}
	if rounds == 0 {
		return nil // every class blocked or empty: no credit is earned
	}
	for k, cq := range rq.classes {
		if found[k] {
			cq.deficit = saturatingAdd(cq.deficit, saturatingMul(cq.class.quantum, rounds))
		}
	}
	for off := range n {
		k := (rq.cursor + off) % n
		if found[k] && costOf[k] <= rq.classes[k].deficit {
			return rq.served(k)
		}
	}
	return nil
}

// served charges class k for its head, which the caller dispatches next,
// and moves the cursor past it; a class left with credit keeps its turn.
func (rq *roleQueues) served(k int) *classQueue {
	cq := rq.classes[k]
	rq.cursor = (k + 1) % len(rq.classes)
	cq.deficit -= min(cq.deficit, cq.head().cost)
	if len(cq.heap) > 1 && cq.deficit > 0 {
		rq.carry = k
	}
	return cq
}

func saturatingAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

func saturatingMul(a, b uint64) uint64 {
	if b != 0 && a > ^uint64(0)/b {
		return ^uint64(0)
	}
	return a * b
}

// classHeap is a heap of waiting requests in their class's order.
type classHeap []*request

func (h classHeap) Len() int           { return len(h) }
func (h classHeap) Less(i, j int) bool { return before(h[i], h[j]) }
func (h classHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].queueIndex, h[j].queueIndex = i, j
}
func (h *classHeap) Push(x any) {
	r := x.(*request)
	r.queueIndex = len(*h)
	*h = append(*h, r)
}
func (h *classHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	r.queueIndex = -1
	return r
}
