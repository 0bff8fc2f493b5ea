package engine

import (
	"fmt"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
)

// What the engine keeps is bounded by what is live, not by how many
// commands it has seen: a long stream over a small live state stays small.

// queueBehindHead is an engine with a queue and timeouts whose one worker is
// kept busy by "a", so that "head" waits for as long as the test likes.
func queueBehindHead(t *testing.T) *Engine {
	cfg := protocol.DefaultConfig()
	cfg.QueueThreshold, cfg.QueueTimeoutMS = ptrTo(0.0), ptrTo(1e6)
	e, _ := New(cfg)
	applyOKT(t, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(1)), MaxNumBatchedTokens: ptrTo(uint64(16))})
	applyOKT(t, e, &protocol.Command{Op: protocol.OpPlace, RequestID: "a", InputTokens: ptrTo(uint64(64))})
	applyOKT(t, e, &protocol.Command{Op: protocol.OpPlace, RequestID: "head", InputTokens: ptrTo(uint64(64))})
	return e
}

// Requests that queue behind a head that waits long and are cancelled must
// not stay in the deadline order (they did, one entry per request, until the
// head left).
func TestCancelledWaitersBehindAHeadAreSwept(t *testing.T) {
	e := queueBehindHead(t)
	for i := range 10000 {
		id := fmt.Sprint("c", i)
		applyOKT(t, e, &protocol.Command{Op: protocol.OpPlace, RequestID: id, InputTokens: ptrTo(uint64(16))})
		applyOKT(t, e, &protocol.Command{Op: protocol.OpCancelPending, RequestID: id})
	}
	if e.queue.count != 1 {
		t.Fatalf("want only the head waiting, %d are", e.queue.count)
	}
	if n := len(e.queue.arrivals); n > 64 {
		t.Errorf("the deadline order holds %d entries for 1 waiting request", n)
	}
}

// In approximate mode a prompt routed again refreshes its blocks' deadlines;
// the superseded heap entries must not pile up while they wait to expire
// (they did: one per block per placement, for approx_ttl_ms of clock), nor
// must routing it again at the same moment add any.
func TestApproxRefreshesDoNotPileUp(t *testing.T) {
	cfg := protocol.DefaultConfig()
	cfg.KVEvents, cfg.ApproxTTLMS = false, 1e9
	e, _ := New(cfg)
	applyOKT(t, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(1))})
	hashes := []protocol.LocalBlockHash{1, 2, 3, 4}
	for i := range 5000 {
		id, now := fmt.Sprint("r", i), float64(i/2) // two placements per moment
		applyOKT(t, e, &protocol.Command{Op: protocol.OpPlace, RequestID: id, InputTokens: ptrTo(uint64(64)), BlockHashes: hashes, NowMS: &now})
		applyOKT(t, e, &protocol.Command{Op: protocol.OpRequestTerminal, RequestID: id})
	}
	if live := e.approx.live; live != len(hashes) {
		t.Fatalf("want %d blocks learned, got %d", len(hashes), live)
	}
	if n := len(e.approx.queue); n > 2*len(hashes)+64 {
		t.Errorf("the expiry heap holds %d entries for %d blocks", n, len(hashes))
	}
}

// A request whose prefill never completes stays at the head of its rank's
// prefill FIFO; the requests that come and go behind it must not stay in
// the FIFO too (they did, one entry each, for as long as the head stayed).
func TestPrefillFIFOBehindAStuckHead(t *testing.T) {
	for _, linear := range []bool{false, true} {
		cfg := protocol.DefaultConfig()
		if linear {
			cfg.PrefillLoadModel, cfg.PrefillTokensPerMS = protocol.PrefillLoadLinear, ptrTo(1e-6)
		}
		e, _ := New(cfg)
		applyOKT(t, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(1))})
		applyOKT(t, e, &protocol.Command{Op: protocol.OpPlace, RequestID: "stuck", InputTokens: ptrTo(uint64(1 << 30))})
		for i := range 10000 {
			id, now := fmt.Sprint("r", i), float64(i)
			applyOKT(t, e, &protocol.Command{Op: protocol.OpPlace, RequestID: id, InputTokens: ptrTo(uint64(64)), NowMS: &now})
			applyOKT(t, e, &protocol.Command{Op: protocol.OpRequestTerminal, RequestID: id})
		}
		p := &e.fleet.slots[0].prefill
		if n := len(p.fifo) - p.head; n > 64 {
			t.Errorf("linear %v: the prefill FIFO holds %d entries for 1 live request", linear, n)
		}
		if p.live != 1 {
			t.Errorf("linear %v: %d live entries counted, want 1", linear, p.live)
		}
	}
}

// Approximate-mode blocks of a rank that went must not stay until their
// deadline (with a long approx_ttl_ms, workers coming and going piled them
// up without end).
func TestApproxBlocksOfRanksGoneDoNotPileUp(t *testing.T) {
	cfg := protocol.DefaultConfig()
	cfg.KVEvents, cfg.ApproxTTLMS = false, 1e12
	e, _ := New(cfg)
	for i := range 5000 {
		id, w := fmt.Sprint("r", i), uint64(i)
		applyOKT(t, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: &w})
		applyOKT(t, e, &protocol.Command{Op: protocol.OpPlace, RequestID: id, InputTokens: ptrTo(uint64(64)), BlockHashes: []protocol.LocalBlockHash{1, 2, 3, 4}})
		applyOKT(t, e, &protocol.Command{Op: protocol.OpRequestTerminal, RequestID: id})
		applyOKT(t, e, &protocol.Command{Op: protocol.OpWorkerRemoved, WorkerID: &w})
	}
	if e.approx.live != 0 || len(e.approx.queue) > 64+4 {
		t.Errorf("no rank is up, yet %d deadlines are counted and the heap holds %d entries", e.approx.live, len(e.approx.queue))
	}
}

// Predict-on-route's log must hold about the blocks that have a deadline:
// a prompt written again bucket after bucket under a long TTL, and the
// blocks of ranks that went, must not pile up in it (each write stays in
// the log until its deadline otherwise).
func TestPredictedWritesDoNotPileUp(t *testing.T) {
	cfg := protocol.DefaultConfig()
	cfg.PredictedTTLMS = ptrTo(1e12)
	e, _ := New(cfg)
	applyOKT(t, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(1))})
	hashes := []protocol.LocalBlockHash{1, 2, 3, 4}
	for i := range 5000 {
		id, now := fmt.Sprint("r", i), float64(i*50) // a new bucket every other placement
		applyOKT(t, e, &protocol.Command{Op: protocol.OpPlace, RequestID: id, InputTokens: ptrTo(uint64(64)), BlockHashes: hashes, NowMS: &now})
		applyOKT(t, e, &protocol.Command{Op: protocol.OpRequestTerminal, RequestID: id})
	}
	p := e.predicted
	if p.live != len(hashes) {
		t.Fatalf("want %d blocks with a deadline, got %d", len(hashes), p.live)
	}
	if n := len(p.hashes) - p.hashAt; n > 4*len(hashes)+64 {
		t.Errorf("the log holds %d blocks for %d with a deadline", n, len(hashes))
	}
	for i := range 5000 {
		id, w := fmt.Sprint("g", i), uint64(100+i)
		applyOKT(t, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: &w})
		applyOKT(t, e, &protocol.Command{Op: protocol.OpPlace, RequestID: id, InputTokens: ptrTo(uint64(64)), BlockHashes: []protocol.LocalBlockHash{5, 6, 7, 8}, WorkerID: &w})
		applyOKT(t, e, &protocol.Command{Op: protocol.OpRequestTerminal, RequestID: id})
		applyOKT(t, e, &protocol.Command{Op: protocol.OpWorkerRemoved, WorkerID: &w})
	}
	if n := len(p.hashes) - p.hashAt; p.live != len(hashes) || n > 4*len(hashes)+64 {
		t.Errorf("after 5,000 ranks came and went: %d blocks with a deadline (want %d), %d in the log", p.live, len(hashes), n)
	}
}
