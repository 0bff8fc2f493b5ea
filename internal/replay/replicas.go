package replay

import (
	"hash/fnv"
	"slices"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Replicas run a pool's router as several instances, as a deployment with
// several frontends does: requests are spread across them, each sees every
// worker's KV events, and what the others booked only through a sync
// channel (Dynamo's --router-replica-sync), which delivers each message
// after DelayMS. A replica learns of another's booking with probability
// Rate (seeded: the same run drops the same ones); one it learned of, it
// follows to its end, so that no booking outlives its request.
type Replicas struct {
	Count int `json:"count"`
	// Assign is round_robin (requests in turn) or session (a session keeps
	// its replica; a request without one goes in turn).
	Assign  string  `json:"assign"`
	DelayMS float64 `json:"sync_delay_ms"`
	Rate    float64 `json:"sync_rate"`
}

// Replica assignments.
const (
	AssignRoundRobin = "round_robin"
	AssignSession    = "session"
)

// syncMessage is one message of the sync channel: a booking (a pinned
// place, then its dispatch), or a lifecycle command, for one replica.
type syncMessage struct {
	to *replica
	c  *protocol.Command
}

// assign is the replica of pool p that r is sent to.
func (h *host) assign(p *pool, r *simRequest) int {
	n := len(p.replicas)
	if n == 1 {
		return 0
	}
	if h.opt.Replicas.Assign == AssignSession && r.Session != "" {
		f := fnv.New64a()
		f.Write([]byte(r.Session))
		return int(f.Sum64() % uint64(n))
	}
	return r.sentSeq % n
}

// sync sends c from replica from to every other replica of its pool
// through the sync channel.
func (h *host) sync(from *replica, c *protocol.Command, t float64) {
	for _, to := range from.pool.replicas {
		// A booking may be lost; its lifecycle follows it (deliver drops
		// it where the booking was).
		if to == from || (c.Op == protocol.OpPlace && h.syncRNG.Float64() >= h.opt.Replicas.Rate) {
			continue
		}
		h.syncs = append(h.syncs, syncMessage{to: to, c: c})
		h.nextSeq++
		h.events.push(event{at: t + h.opt.Replicas.DelayMS, seq: h.nextSeq, kind: evSync, idx: int32(len(h.syncs) - 1)})
	}
}

// deliver hands a sync message to its replica at t. A booking is a pinned
// place: a replica that would queue or refuse it drops it (it is another
// replica's request, already running); a lifecycle command reaches only a
// replica that booked the request.
func (h *host) deliver(t float64, i int32) {
	m := h.syncs[i]
	h.syncs[i] = syncMessage{} // delivered: let it go
	rp, id := m.to, m.c.RequestID
	c := *m.c
	c.NowMS = &t
	if c.Op != protocol.OpPlace && !rp.synced[id] {
		return
	}
	queued, ok := h.offer(rp, &c, id)
	switch {
	case !ok: // a booking it refused, or a clock it has passed
	case c.Op == protocol.OpPlace && rp.synced[id]:
		h.offer(rp, &protocol.Command{Op: protocol.OpDispatchCommitted, NowMS: &t, RequestID: id}, id)
	case c.Op == protocol.OpPlace && queued:
		// Queued behind its own load: not a booking to keep.
		h.offer(rp, &protocol.Command{Op: protocol.OpCancelPending, NowMS: &t, RequestID: id}, id)
	case c.Op == protocol.OpRequestTerminal:
		delete(rp.synced, id)
	}
}

// offer sends a sync command to a replica, which may refuse it without
// harm (it is about another replica's request), and acts on its answer;
// it reports whether the replica took it, and whether it queued id.
func (h *host) offer(rp *replica, c *protocol.Command, id string) (queued, ok bool) {
	resp, err := rp.router.send(c)
	if err != nil {
		h.err = err
		return false, false
	}
	defer rp.router.release(resp)
	if resp.Error != nil {
		return false, false
	}
	h.answered(rp, c, resp, id)
	return slices.Contains(resp.Queued, id), true
}
