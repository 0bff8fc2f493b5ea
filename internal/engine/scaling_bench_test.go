package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Benchmarks of the steps that once grew quadratically with a count. Each
// reports the time per item at two sizes ten times apart: linear growth
// shows as the same ns/item at both.

func applyOK(b *testing.B, e *Engine, c *protocol.Command) {
	var resp protocol.Response
	e.Apply(c, &resp)
	if resp.Error != nil {
		b.Fatalf("%+v: %v", c, resp.Error)
	}
}

// sessionWithWaiters is a hard-affinity engine with one worker, a session's
// initializer placed and n more of its requests waiting for it.
func sessionWithWaiters(b *testing.B, n int) *Engine {
	cfg := protocol.DefaultConfig()
	cfg.Affinity.Mode = protocol.AffinityHard
	e, _ := New(cfg)
	applyOK(b, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(1))})
	session, tokens := "s", uint64(16)
	for i := range n + 1 {
		applyOK(b, e, &protocol.Command{Op: protocol.OpPlace, RequestID: fmt.Sprint("r", i), InputTokens: &tokens, SessionID: &session})
	}
	return e
}

// benchWaiters times op sent for requests r<first> to r<first+n-1> of a
// session with n waiters, per request.
func benchWaiters(b *testing.B, op protocol.Op, first int, unit string) {
	for _, n := range []int{2000, 20000} {
		b.Run(fmt.Sprint("waiters=", n), func(b *testing.B) {
			var spent time.Duration
			for b.Loop() {
				e := sessionWithWaiters(b, n)
				start := time.Now()
				for i := first; i < first+n; i++ {
					applyOK(b, e, &protocol.Command{Op: op, RequestID: fmt.Sprint("r", i)})
				}
				spent += time.Since(start)
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N*n), unit)
		})
	}
}

// BenchmarkWaitersPassTheBinding: each initializer in turn is aborted, and
// the binding passes to the next waiter.
func BenchmarkWaitersPassTheBinding(b *testing.B) {
	benchWaiters(b, protocol.OpDispatchAborted, 0, "ns/abort")
}

// BenchmarkWaitersCancelled: every waiter is cancelled, first to last.
func BenchmarkWaitersCancelled(b *testing.B) {
	benchWaiters(b, protocol.OpCancelPending, 1, "ns/cancel")
}

// BenchmarkWorkersComeUp: workers come up one by one, in ascending and in
// descending id order.
func BenchmarkWorkersComeUp(b *testing.B) {
	for _, order := range []string{"ascending", "descending"} {
		for _, n := range []int{4000, 40000} {
			b.Run(fmt.Sprintf("%s/workers=%d", order, n), func(b *testing.B) {
				for b.Loop() {
					e, _ := New(protocol.DefaultConfig())
					for i := range n {
						id := uint64(i)
						if order == "descending" {
							id = uint64(n - i)
						}
						applyOK(b, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: &id})
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/worker")
			})
		}
	}
}

// BenchmarkWorkersGo: n workers drain and are removed one by one while n
// requests, each under its own session binding and with learned blocks in
// approximate mode, stay booked on one other worker. Each removal used to
// walk every request, binding and learned block (30 k of each: 12–22 s).
func BenchmarkWorkersGo(b *testing.B) {
	for _, n := range []int{3000, 30000} {
		b.Run(fmt.Sprint("workers=", n), func(b *testing.B) {
			var spent time.Duration
			for b.Loop() {
				cfg := protocol.DefaultConfig()
				cfg.KVEvents, cfg.Affinity.Mode = false, protocol.AffinityHard
				e, _ := New(cfg)
				applyOK(b, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(0))})
				for i := range n {
					session := fmt.Sprint("s", i)
					applyOK(b, e, &protocol.Command{Op: protocol.OpPlace, RequestID: session, InputTokens: ptrTo(uint64(64)),
						BlockHashes: []protocol.LocalBlockHash{1, 2, protocol.LocalBlockHash(i + 3), 4}, SessionID: &session})
				}
				for i := range n {
					applyOK(b, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(i + 1))})
				}
				start := time.Now()
				for i := range n {
					id := uint64(i + 1)
					applyOK(b, e, &protocol.Command{Op: protocol.OpWorkerDraining, WorkerID: &id})
					applyOK(b, e, &protocol.Command{Op: protocol.OpWorkerRemoved, WorkerID: &id})
				}
				spent += time.Since(start)
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N*n), "ns/worker")
		})
	}
}

// BenchmarkLinesWhileOneWaits: a fleet of n ranks, and one request waiting
// for the one busy worker it is pinned to; then lines that change nothing the
// wakeup rests on (a clock step short of it, a KV event, a refused line).
// Each answer carries next_wakeup_ms, and each line drained the queue: both
// used to cost a pass over every rank per line (3–100 ms a line at 65536
// ranks), now neither does.
func BenchmarkLinesWhileOneWaits(b *testing.B) {
	for _, workers := range []int{6, 60} {
		b.Run(fmt.Sprint("ranks=", workers*protocol.MaxDPSize), func(b *testing.B) {
			cfg := protocol.DefaultConfig()
			cfg.QueueThreshold, cfg.PrefillLoadModel, cfg.PrefillTokensPerMS = ptrTo(0.5), protocol.PrefillLoadLinear, ptrTo(1.0)
			e, _ := New(cfg)
			for i := range workers {
				applyOK(b, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(i)), DPSize: ptrTo(uint32(protocol.MaxDPSize))})
			}
			busy := uint64(workers)
			applyOK(b, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: &busy, MaxNumBatchedTokens: ptrTo(uint64(100))})
			applyOK(b, e, &protocol.Command{Op: protocol.OpPlace, RequestID: "busy", InputTokens: ptrTo(uint64(1000)), WorkerID: &busy})
			applyOK(b, e, &protocol.Command{Op: protocol.OpPlace, RequestID: "waits", InputTokens: ptrTo(uint64(16)), WorkerID: &busy})
			now, lines := 0.0, 0
			for b.Loop() {
				now += 1e-4
				applyOK(b, e, &protocol.Command{Op: protocol.OpAdvanceClock, NowMS: &now})
				applyOK(b, e, &protocol.Command{Op: protocol.OpObserve, Events: []protocol.KVEvent{}})
				var resp protocol.Response
				e.Apply(&protocol.Command{Op: protocol.OpDispatchCommitted, RequestID: "nobody"}, &resp)
				if resp.Error == nil || resp.PendingCount != 1 || resp.NextWakeupMS == nil {
					b.Fatalf("the request must still wait, with a wakeup: %+v", resp)
				}
				lines += 3
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(lines), "ns/line")
		})
	}
}

// BenchmarkFleetChangesWhileOneWaits: one request waits for the busy rank
// its session is bound to while n other workers come up, drain and go. Each
// fleet change used to find every role's wakeup and drain afresh, a pass
// over the whole fleet (3 k: 0.44 s in all, 30 k: 42 s); now a worker that
// comes up is asked alone, and one that goes matters only if it admitted
// the head first.
func BenchmarkFleetChangesWhileOneWaits(b *testing.B) {
	for _, n := range []int{3000, 30000} {
		b.Run(fmt.Sprint("workers=", n), func(b *testing.B) {
			var spent time.Duration
			for b.Loop() {
				cfg := protocol.DefaultConfig()
				cfg.QueueThreshold, cfg.Affinity.Mode = ptrTo(0.5), protocol.AffinityHard
				e, _ := New(cfg)
				session, mbt := "s", ptrTo(uint64(100))
				applyOK(b, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(0)), MaxNumBatchedTokens: mbt})
				applyOK(b, e, &protocol.Command{Op: protocol.OpPlace, RequestID: "a", InputTokens: ptrTo(uint64(1000)), SessionID: &session})
				applyOK(b, e, &protocol.Command{Op: protocol.OpDispatchCommitted, RequestID: "a"})
				applyOK(b, e, &protocol.Command{Op: protocol.OpPlace, RequestID: "b", InputTokens: ptrTo(uint64(10)), SessionID: &session})
				start := time.Now()
				for _, op := range []protocol.Op{protocol.OpWorkerReady, protocol.OpWorkerDraining, protocol.OpWorkerRemoved} {
					for i := range n {
						c := &protocol.Command{Op: op, WorkerID: ptrTo(uint64(i + 1))}
						if op == protocol.OpWorkerReady {
							c.MaxNumBatchedTokens = mbt
						}
						applyOK(b, e, c)
					}
				}
				spent += time.Since(start)
				if e.queue.count != 1 {
					b.Fatal("b must still wait")
				}
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N*n), "ns/worker")
		})
	}
}
