package engine

import (
	"container/heap"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
)

// headsFunc tests heads by a function.
type headsFunc func(*classQueue) bool

func (f headsFunc) dispatchable(cq *classQueue) bool { return f(cq) }

// drrRing is a role's queues of the given quanta, each class's requests of
// the given costs, as deficit round robin sees them.
func drrRing(quanta []uint64, costs [][]uint64) (*roleQueues, *policyQueue) {
	classes := make([]*flowClass, len(quanta))
	for i, q := range quanta {
		classes[i] = &flowClass{name: string(rune('A' + i)), quantum: q, sloMS: 1}
	}
	pq := newPolicyQueue(classes)
	rq := &pq.roles[roleIndex(protocol.RoleAggregated)]
	for i, cs := range costs {
		for _, c := range cs {
			req := &request{d: &demand{}, class: rq.classes[i], cost: c, queueIndex: -1}
			pq.push(req)
		}
	}
	return rq, &pq
}

// serve takes n dispatches, each head dispatchable unless blocked says
// otherwise, and names the class of each.
func serve(rq *roleQueues, pq *policyQueue, n int, blocked func(*classQueue) bool) string {
	var b strings.Builder
	for range n {
		cq := rq.next(headsFunc(func(cq *classQueue) bool { return blocked == nil || !blocked(cq) }))
		if cq == nil {
			b.WriteByte('-')
			continue
		}
		req := heap.Pop(&cq.heap).(*request)
		pq.left(cq, req)
		b.WriteString(cq.class.name)
	}
	return b.String()
}

// TestDRRServesTheQuantumRatio: Dynamo's
// drr_serves_exact_quantum_ratio_for_equal_cost_backlogs (quanta 1 and 3,
// cost 1: every four dispatches are one A and three B) and the premium_4x
// trace (quanta 512 and 128, cost 512: A four times, then B). (Catches: the
// carry not spending credit first, the quantum earned on a served visit,
// the cursor not moving past the served class.)
func TestDRRServesTheQuantumRatio(t *testing.T) {
	ones := func(n int, c uint64) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = c
		}
		return out
	}
	rq, pq := drrRing([]uint64{1, 3}, [][]uint64{ones(20, 1), ones(60, 1)})
	if got := serve(rq, pq, 16, nil); got != "ABBBABBBABBBABBB" {
		t.Errorf("quanta 1:3 served %s", got)
	}
	rq, pq = drrRing([]uint64{512, 128}, [][]uint64{ones(10, 512), ones(10, 512)})
	if got := serve(rq, pq, 10, nil); got != "AAAABAAAAB" {
		t.Errorf("premium_4x served %s, want Dynamo's P,P,P,P,R", got)
	}
	rq, pq = drrRing([]uint64{512, 512}, [][]uint64{ones(4, 512), ones(4, 512)})
	if got := serve(rq, pq, 8, nil); got != "ABABABAB" {
		t.Errorf("equal_share served %s", got)
	}
}

// TestDRRCarrySpendsCreditFirst: Dynamo's
// drr_carry_spends_credit_before_the_next_ring_turn: quantum 10, costs 5 and
// 4: A is served twice on one quantum before B's turn. (Catches: the carry
// dropped, so B, next on the ring, goes first.)
func TestDRRCarrySpendsCreditFirst(t *testing.T) {
	rq, pq := drrRing([]uint64{10, 10}, [][]uint64{{5, 4, 9}, {10, 10}})
	if got := serve(rq, pq, 3, nil); got != "AAB" {
		t.Errorf("served %s, want A twice on its credit, then B", got)
	}
}

// TestDRRBlockedClassEarnsNothing: Dynamo's
// drr_weights_progress_and_skips_blocked_classes_without_credit and
// fully_blocked_ring_returns_without_accruing_deficit: a class whose head
// cannot run is skipped without credit, the others progress, and a ring
// with every head blocked returns none and changes no deficit. (Catches:
// crediting a blocked class, fast-forwarding a blocked one.)
func TestDRRBlockedClassEarnsNothing(t *testing.T) {
	rq, pq := drrRing([]uint64{4, 4}, [][]uint64{{8, 8}, {8, 8}})
	blockA := func(cq *classQueue) bool { return cq.class.name == "A" }
	if got := serve(rq, pq, 2, blockA); got != "BB" {
		t.Errorf("served %s with A blocked", got)
	}
	if d := rq.classes[0].deficit; d != 0 {
		t.Errorf("blocked class A earned %d", d)
	}
	rq, pq = drrRing([]uint64{4, 4}, [][]uint64{{8}, {8}})
	if got := serve(rq, pq, 1, func(*classQueue) bool { return true }); got != "-" || rq.classes[0].deficit != 0 || rq.classes[1].deficit != 0 {
		t.Errorf("fully blocked ring: served %q, deficits %d %d", got, rq.classes[0].deficit, rq.classes[1].deficit)
	}
}

// TestDRROversizedHeadFastForwards: Dynamo's
// oversized_heads_bulk_add_deficit_and_make_progress: a head of cost 101
// on quantum 4 is served in one call, by whole rounds of quanta, and an
// emptied class keeps no credit. (Catches: one quantum a call, so none
// served; rounds rounded down; credit kept by an empty class.)
func TestDRROversizedHeadFastForwards(t *testing.T) {
	rq, pq := drrRing([]uint64{4}, [][]uint64{{101}})
	rq.classes = append(rq.classes, &classQueue{class: &flowClass{name: "B", quantum: 4}, role: protocol.RoleAggregated})
	rq.found, rq.costs = make([]bool, 2), make([]uint64, 2)
	if got := serve(rq, pq, 1, nil); got != "A" {
		t.Errorf("served %q", got)
	}
	if d := rq.classes[0].deficit; d != 0 {
		t.Errorf("an emptied class kept %d of credit", d)
	}
}
