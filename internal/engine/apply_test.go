package engine

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/protocol"
)

// TestApplyRefusesBadBuiltCommands: a command built in Go, not decoded, is
// validated by Apply itself: each gets the code the decoder would give the
// same command as a line, and the engine is unchanged. Without the
// validation, the worker_ready, place and observe cases panic.
func TestApplyRefusesBadBuiltCommands(t *testing.T) {
	nan, inf, neg := math.NaN(), math.Inf(1), -1.0
	zero32 := uint32(0)
	for _, tc := range []struct {
		name string
		c    protocol.Command
		code protocol.Code
	}{
		{"zero command", protocol.Command{}, protocol.CodeUnknownOp},
		{"unknown op", protocol.Command{Op: "teleport"}, protocol.CodeUnknownOp},
		{"worker_ready without worker_id", protocol.Command{Op: protocol.OpWorkerReady}, protocol.CodeInvalidField},
		{"worker_ready with dp_size 0", protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(1)), DPSize: &zero32}, protocol.CodeInvalidField},
		{"worker_ready with a bad role", protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(1)), Role: "chef"}, protocol.CodeInvalidField},
		{"place without request_id", protocol.Command{Op: protocol.OpPlace}, protocol.CodeInvalidField},
		{"place with a NaN priority", protocol.Command{Op: protocol.OpPlace, RequestID: "r", Priority: &nan}, protocol.CodeInvalidField},
		{"place with sequence_hashes alone", protocol.Command{Op: protocol.OpPlace, RequestID: "r", SequenceHashes: []protocol.SequenceHash{1}}, protocol.CodeInvalidField},
		{"place with a field of another op", protocol.Command{Op: protocol.OpPlace, RequestID: "r", Events: []protocol.KVEvent{}}, protocol.CodeUnknownField},
		{"observe without events", protocol.Command{Op: protocol.OpObserve}, protocol.CodeInvalidField},
		{"observe with an event without data", protocol.Command{Op: protocol.OpObserve, Events: []protocol.KVEvent{{WorkerID: 1}}}, protocol.CodeInvalidField},
		{"observe with a stored event without blocks", protocol.Command{Op: protocol.OpObserve, Events: []protocol.KVEvent{{WorkerID: 1, Data: protocol.Stored{}}}}, protocol.CodeInvalidField},
		{"advance_clock without now_ms", protocol.Command{Op: protocol.OpAdvanceClock}, protocol.CodeInvalidField},
		{"advance_clock to NaN", protocol.Command{Op: protocol.OpAdvanceClock, NowMS: &nan}, protocol.CodeInvalidField},
		{"advance_clock to infinity", protocol.Command{Op: protocol.OpAdvanceClock, NowMS: &inf}, protocol.CodeInvalidField},
		{"advance_clock to a negative time", protocol.Command{Op: protocol.OpAdvanceClock, NowMS: &neg}, protocol.CodeInvalidField},
		{"request_terminal without request_id", protocol.Command{Op: protocol.OpRequestTerminal}, protocol.CodeInvalidField},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(protocol.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			e.Apply(&protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(1))}, &protocol.Response{})
			before := e.inspect()
			var resp protocol.Response
			e.Apply(&tc.c, &resp)
			if resp.OK || resp.Error == nil || resp.Error.Code != tc.code {
				t.Fatalf("got ok=%v error %+v, want %s", resp.OK, resp.Error, tc.code)
			}
			if diff := cmp.Diff(before, e.inspect()); diff != "" {
				t.Fatalf("a refused command changed the state:\n%s", diff)
			}
		})
	}
}

// builtCommand turns fuzz bytes into a Command value field by field, so the
// fuzzer reaches values no JSON line can carry (NaN, infinities, an event
// without data, fields of other ops) as well as ordinary ones.
type builtCommand struct{ b []byte }

func (g *builtCommand) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	v := g.b[0]
	g.b = g.b[1:]
	return v
}

// small is a value from a small range, so that ids and hashes collide.
func (g *builtCommand) small() uint64 { return uint64(g.byte() % 6) }

func (g *builtCommand) float() float64 {
	return [...]float64{0, 1, 2.5, 10, 40, 1e9, -1, math.NaN(), math.Inf(1), math.Inf(-1)}[g.byte()%10]
}

func (g *builtCommand) has() bool { return g.byte()%3 != 0 }

var builtOps = []protocol.Op{"", "bogus", protocol.OpWorkerReady, protocol.OpWorkerDraining, protocol.OpWorkerRemoved,
	protocol.OpTopologySettled, protocol.OpPlace, protocol.OpObserve, protocol.OpDispatchCommitted,
	protocol.OpDispatchAborted, protocol.OpPrefillCompleted, protocol.OpRequestTerminal,
	protocol.OpCancelPending, protocol.OpAdvanceClock, protocol.OpInspect}

func (g *builtCommand) next() protocol.Command {
	c := protocol.Command{Op: builtOps[int(g.byte())%len(builtOps)]}
	if g.byte()%4 == 0 {
		v := g.float()
		c.NowMS = &v
	}
	if g.has() {
		c.WorkerID = ptrTo(g.small())
	}
	if g.byte()%4 == 0 {
		c.DPSize, c.DPStart = ptrTo(uint32(g.small())), ptrTo(uint32(g.small()))
	}
	if g.byte()%4 == 0 {
		c.TotalKVBlocks, c.MaxNumBatchedTokens, c.MaxNumSeqs = ptrTo(g.small()*8), ptrTo(g.small()*16), ptrTo(g.small())
	}
	if g.has() {
		c.RequestID = string('a' + rune(g.small()))
	}
	if g.has() {
		c.InputTokens = ptrTo(g.small() * 20)
	}
	switch g.byte() % 4 {
	case 1:
		for range g.small() {
			c.BlockHashes = append(c.BlockHashes, protocol.LocalBlockHash(g.small()))
		}
	case 2:
		c.Tokens = make([]uint32, g.small()*8)
	}
	if g.byte()%4 == 0 {
		c.Priority = ptrTo(g.float())
	}
	if g.byte()%5 == 0 {
		c.SessionID = ptrTo(string('s' + rune(g.small())))
	}
	if g.byte()%5 == 0 {
		c.DPRank = ptrTo(uint32(g.small()))
	}
	if g.byte()%5 == 0 {
		c.AllowedWorkers = []uint64{g.small()}
	}
	for range g.byte() % 3 {
		ev := protocol.KVEvent{WorkerID: g.small(), StorageTier: "device", EventID: g.small(), DPRank: uint32(g.small() % 2)}
		switch g.byte() % 4 {
		case 0:
			st := protocol.Stored{Blocks: []protocol.StoredBlock{}}
			if g.byte()%2 == 0 {
				st.ParentHash = ptrTo(protocol.SequenceHash(g.small()))
			}
			for range g.small() {
				st.Blocks = append(st.Blocks, protocol.StoredBlock{BlockHash: protocol.SequenceHash(g.small()), TokensHash: protocol.LocalBlockHash(g.small())})
			}
			ev.Data = st
		case 1:
			ev.Data = protocol.Removed{BlockHashes: []protocol.SequenceHash{protocol.SequenceHash(g.small())}}
		case 2:
			ev.Data = protocol.Cleared{}
		}
		c.Events = append(c.Events, ev)
	}
	return c
}

// FuzzApplyBuiltCommands applies commands built as Go values, not decoded
// from JSON, and checks what FuzzEngine checks: no panic, the invariants
// after every accepted command, and no change from a refused one.
func FuzzApplyBuiltCommands(f *testing.F) {
	f.Add(byte(0), []byte{2, 0, 1, 1, 0, 0, 1, 6, 0, 2, 1, 1, 1, 1, 2, 3})
	f.Add(byte(1), []byte{7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 1, 0, 0, 3, 13, 1, 4})
	configs := fuzzConfigs()
	f.Fuzz(func(t *testing.T, pick byte, data []byte) {
		e, err := New(configs[int(pick)%len(configs)])
		if err != nil {
			t.Fatal(err)
		}
		g := &builtCommand{b: data}
		for len(g.b) > 0 {
			c := g.next()
			before := e.inspect()
			var resp protocol.Response
			e.Apply(&c, &resp)
			if resp.Error != nil {
				if diff := cmp.Diff(before, e.inspect()); diff != "" {
					t.Fatalf("%+v failed (%s) but changed the state:\n%s", c, resp.Error.Message, diff)
				}
				continue
			}
			if err := invariants(e, &c, &resp); err != nil {
				t.Fatalf("after %+v: %v", c, err)
			}
		}
	})
}

// TestRankCap: the ranks of the workers that are up are capped; the worker
// that would pass the cap is refused, naming dp_size, and changes nothing;
// removing a worker makes room again.
func TestRankCap(t *testing.T) {
	e, _ := New(protocol.DefaultConfig())
	full := uint32(protocol.MaxDPSize)
	ready := func(id uint64, size uint32) *protocol.Response {
		var resp protocol.Response
		e.Apply(&protocol.Command{Op: protocol.OpWorkerReady, WorkerID: &id, DPSize: &size}, &resp)
		return &resp
	}
	for id := range uint64(protocol.MaxRanks / protocol.MaxDPSize) {
		if resp := ready(id, full); resp.Error != nil {
			t.Fatal(resp.Error)
		}
	}
	before := e.inspect()
	if resp := ready(1000, 1); resp.Error == nil || resp.Error.Code != protocol.CodeInvalidField || !strings.Contains(resp.Error.Message, `"dp_size": 1 more ranks would pass the 65536`) {
		t.Fatalf("past the cap: %+v", resp.Error)
	}
	if diff := cmp.Diff(before, e.inspect()); diff != "" {
		t.Fatalf("a refused worker changed the state:\n%s", diff)
	}
	var resp protocol.Response
	e.Apply(&protocol.Command{Op: protocol.OpWorkerRemoved, WorkerID: ptrTo(uint64(0))}, &resp)
	if resp := ready(1000, full); resp.Error != nil {
		t.Fatalf("after a removal: %v", resp.Error)
	}
}

// TestRemovedWorkersAreRememberedUpToACap: a late event from a removed
// worker is skipped as removed_worker while the router remembers the id,
// as unknown_worker once RememberedRemovals later removals pushed it out;
// a worker that came back and went again counts once; memory stays capped.
func TestRemovedWorkersAreRememberedUpToACap(t *testing.T) {
	e, _ := New(protocol.DefaultConfig())
	cycle := func(id uint64) {
		applyOKT(t, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: &id})
		applyOKT(t, e, &protocol.Command{Op: protocol.OpWorkerRemoved, WorkerID: &id})
	}
	for range 3 {
		cycle(7) // back and gone again: one remembered id
	}
	for id := uint64(1000); id < 1000+RememberedRemovals; id++ {
		cycle(id)
	}
	skip := func(id uint64) string {
		var resp protocol.Response
		e.Apply(&protocol.Command{Op: protocol.OpObserve, Events: []protocol.KVEvent{{WorkerID: id, StorageTier: "device", Data: protocol.Cleared{}}}}, &resp)
		return resp.Evidence.EventsSkipped[0].Reason
	}
	if got := skip(7); got != protocol.SkipUnknownWorker {
		t.Errorf("the oldest removal, past the cap: %s", got)
	}
	if got := skip(1000); got != protocol.SkipRemovedWorker {
		t.Errorf("the oldest remembered removal: %s", got)
	}
	if len(e.fleet.ready) > 2 || cap(e.fleet.removed.order) > 4*RememberedRemovals {
		t.Errorf("workers that came and went still held: ready list %d, removal queue capacity %d", len(e.fleet.ready), cap(e.fleet.removed.order))
	}
	if n, q := len(e.fleet.removed.seq), len(e.fleet.removed.order)-e.fleet.removed.head; n != RememberedRemovals || q > 2*n+16 {
		t.Errorf("%d ids remembered, %d in the queue; want %d and at most %d", n, q, RememberedRemovals, 2*n+16)
	}
}

func applyOKT(t *testing.T, e *Engine, c *protocol.Command) {
	t.Helper()
	var resp protocol.Response
	e.Apply(c, &resp)
	if resp.Error != nil {
		t.Fatalf("%+v: %v", c, resp.Error)
	}
}

// TestWakeupIsTheFirstAdmissibleTime: under linear decay the inverse of the
// decay can land thousands of ulps late; next_wakeup_ms is the first time
// at which the waiting request is admissible, so one ulp before it nothing
// happens and at it the request is placed. (Before the bisection, the
// router answered 0.33333333333332976 and a move to 0.3333333333333 placed
// the request.)
func TestWakeupIsTheFirstAdmissibleTime(t *testing.T) {
	cfg := protocol.DefaultConfig()
	cfg.QueueThreshold, cfg.PrefillLoadModel, cfg.PrefillTokensPerMS = ptrTo(1.0), protocol.PrefillLoadLinear, ptrTo(3.0)
	run := func(at float64) (*protocol.Response, float64) {
		e, _ := New(cfg)
		applyOKT(t, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(1)), MaxNumBatchedTokens: ptrTo(uint64(8192))})
		applyOKT(t, e, &protocol.Command{Op: protocol.OpPlace, RequestID: "a", InputTokens: ptrTo(uint64(8193))})
		var resp protocol.Response
		e.Apply(&protocol.Command{Op: protocol.OpPlace, RequestID: "b", InputTokens: ptrTo(uint64(1))}, &resp)
		wake := float64(*resp.NextWakeupMS)
		if at < 0 {
			at = wake
		}
		resp = protocol.Response{}
		e.Apply(&protocol.Command{Op: protocol.OpAdvanceClock, NowMS: &at}, &resp)
		return &resp, wake
	}
	at, wake := run(-1)
	if len(at.Placements) != 1 {
		t.Fatalf("advancing to next_wakeup_ms %v placed nothing", wake)
	}
	if before, _ := run(math.Nextafter(wake, 0)); len(before.Placements) != 0 {
		t.Fatalf("advancing to one ulp before next_wakeup_ms %v placed %+v", wake, before.Placements)
	}
}

// A wakeup the clock can never reach (past 2^53 ms, the latest now_ms a
// command may carry) is no wakeup: next_wakeup_ms is null rather than a
// time advance_clock would refuse. Both the decay and a deadline can pass it.
func TestWakeupPastTheLastTimeIsNull(t *testing.T) {
	cfg := protocol.DefaultConfig()
	cfg.QueueThreshold, cfg.PrefillLoadModel, cfg.PrefillTokensPerMS = ptrTo(0.0), protocol.PrefillLoadLinear, ptrTo(1e-6)
	cases := []struct {
		name    string
		timeout *float64
		at      float64
	}{
		{"decay", nil, 0},
		{"deadline", ptrTo(float64(protocol.MaxNumber)), 10},
	}
	for _, c := range cases {
		cfg.QueueTimeoutMS = c.timeout
		e, _ := New(cfg)
		applyOKT(t, e, &protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(1)), MaxNumBatchedTokens: ptrTo(uint64(1))})
		applyOKT(t, e, &protocol.Command{Op: protocol.OpPlace, RequestID: "a", InputTokens: ptrTo(uint64(protocol.MaxTokens))})
		var resp protocol.Response
		e.Apply(&protocol.Command{Op: protocol.OpPlace, RequestID: "b", InputTokens: ptrTo(uint64(1)), NowMS: &c.at}, &resp)
		if resp.Error != nil || resp.PendingCount != 1 {
			t.Fatalf("%s: b should wait, got %+v", c.name, resp)
		}
		if t0, ok := e.nextWakeup(); !ok || t0 <= protocol.MaxNumber {
			t.Fatalf("%s: the case should wake past 2^53, wakes at %v", c.name, t0)
		}
		if resp.NextWakeupMS != nil {
			t.Errorf("%s: next_wakeup_ms %v is past the latest now_ms", c.name, *resp.NextWakeupMS)
		}
	}
}

// TestRemovedIDsStayBounded: past the cap, each removal forgets the oldest
// id; the queue behind the remembered set holds neither forgotten entries
// (its front) nor stale ones (ids that came back or were removed again)
// beyond a constant factor of what it remembers, however many removals.
func TestRemovedIDsStayBounded(t *testing.T) {
	const limit = 8
	r := newRemovedIDs(limit)
	for i := range uint64(10000) {
		id := i // first new ids, past the cap: the front is forgotten
		if i >= 5000 {
			id = i % 5 // then the same few again and again: entries go stale
		}
		if i%3 == 0 {
			r.forget(id) // as when the worker comes back first
		}
		r.add(id)
		if len(r.seq) > limit {
			t.Fatalf("%d ids remembered past the cap of %d", len(r.seq), limit)
		}
		if len(r.order) > 4*limit+32+1 { // at most 2*limit+16 past the front, which is at most half
			t.Fatalf("after %d removals the queue holds %d entries (%d forgotten at its front) for %d ids", i+1, len(r.order), r.head, len(r.seq))
		}
		if !r.has(id) {
			t.Fatalf("the latest removal, %d, is not remembered", id)
		}
	}
}
