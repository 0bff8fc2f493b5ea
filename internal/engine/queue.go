package engine

import (
	"container/heap"
	"slices"

	"github.com/offline-router/offline-router/internal/protocol"
)

// The policy queue (queue_threshold set): requests that cannot be placed
// yet wait here, one queue per role, and only the head of a role's queue is
// ever considered (no overtaking).

// roleOrder is the order in which role queues are drained.
var roleOrder = []protocol.Role{protocol.RoleAggregated, protocol.RoleDecode, protocol.RolePrefill}

type policyQueue struct {
	byRole   map[protocol.Role]*roleQueue
	count    int
	arrivals []*request // waiting requests in arrival (= deadline) order; stale entries skipped
	nextSeq  uint64
}

func newPolicyQueue() policyQueue {
	q := policyQueue{byRole: map[protocol.Role]*roleQueue{}}
	for _, r := range roleOrder {
		q.byRole[r] = &roleQueue{}
	}
	return q
}

func (q *policyQueue) push(req *request) {
	q.nextSeq++
	req.arrivalSeq = q.nextSeq
	heap.Push(q.byRole[req.d.role], req)
	q.count++
}

func (q *policyQueue) remove(req *request) {
	heap.Remove(q.byRole[req.d.role], req.queueIndex)
	q.count--
}

func (q *policyQueue) head(role protocol.Role) *request {
	if q.count == 0 {
		return nil
	}
	if rq := q.byRole[role]; rq.Len() > 0 {
		return (*rq)[0]
	}
	return nil
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

// ordered lists a role's waiting requests in queue order.
func (q *policyQueue) ordered(role protocol.Role) []*request {
	out := slices.Clone(*q.byRole[role])
	slices.SortFunc(out, func(a, b *request) int {
		if before(a, b) {
			return -1
		}
		return 1
	})
	return out
}

// before is the queue order: higher strict_priority tier first, then the
// higher policy score, then earlier arrival.
func before(a, b *request) bool {
	if a.d.tier != b.d.tier {
		return a.d.tier > b.d.tier
	}
	if a.score != b.score {
		return a.score > b.score
	}
	return a.arrivalSeq < b.arrivalSeq
}

// roleQueue is a heap of waiting requests in queue order.
type roleQueue []*request

func (h roleQueue) Len() int           { return len(h) }
func (h roleQueue) Less(i, j int) bool { return before(h[i], h[j]) }
func (h roleQueue) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].queueIndex, h[j].queueIndex = i, j
}
func (h *roleQueue) Push(x any) {
	r := x.(*request)
	r.queueIndex = len(*h)
	*h = append(*h, r)
}
func (h *roleQueue) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	r.queueIndex = -1
	return r
}
