package engine

import (
	"testing"
	"time"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// sglangWithTwoBlocksRouted is an sglang_cache_aware engine that trims its
// routed tree to 1 block every 1 ms, with one worker and a 2-block prompt
// routed to it at time 0.
func sglangWithTwoBlocksRouted(t *testing.T) *Engine {
	t.Helper()
	cfg := protocol.DefaultConfig()
	cfg.Policy, cfg.SGLang.EvictionIntervalMS, cfg.SGLang.MaxTreeSize = protocol.PolicySGLang, 1, 1
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var resp protocol.Response
	for _, c := range []*protocol.Command{
		{Op: protocol.OpWorkerReady, WorkerID: ptrTo(uint64(1))},
		{Op: protocol.OpPlace, RequestID: "a", InputTokens: ptrTo(uint64(32)), BlockHashes: []protocol.LocalBlockHash{1, 2}},
	} {
		if e.Apply(c, &resp); resp.Error != nil {
			t.Fatal(resp.Error)
		}
	}
	return e
}

// TestSGLangTrimAtAFarClock: sglang_cache_aware's trim finds the last
// eviction boundary at once, not by counting boundaries (10^12 steps at a
// clock of 2^53 ms with a 1 ms interval).
func TestSGLangTrimAtAFarClock(t *testing.T) {
	e := sglangWithTwoBlocksRouted(t)
	done := make(chan *protocol.Response)
	go func() {
		var r protocol.Response
		e.Apply(&protocol.Command{Op: protocol.OpPlace, RequestID: "b", NowMS: ptrTo(float64(1 << 53)),
			InputTokens: ptrTo(uint64(32)), BlockHashes: []protocol.LocalBlockHash{1, 2}}, &r)
		done <- &r
	}()
	select {
	case r := <-done:
		if r.Error != nil {
			t.Fatal(r.Error)
		}
		if got := len(e.fleet.slots[0].routed); got != 2 {
			t.Errorf("after the trim to 1 block and the new placement: %d blocks routed, want 2", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a placement at a clock of 2^53 ms did not return")
	}
}

// TestSGLangTrimsTheDeeperFirst: blocks routed at the same moment are
// trimmed deepest first, so a trim never leaves a child without the parent
// a match must pass through.
func TestSGLangTrimsTheDeeperFirst(t *testing.T) {
	e := sglangWithTwoBlocksRouted(t)
	var resp protocol.Response
	// A placement past the boundary trims the tree to one block, and routes
	// nothing itself.
	e.Apply(&protocol.Command{Op: protocol.OpPlace, RequestID: "b", NowMS: ptrTo(1.0), InputTokens: ptrTo(uint64(16))}, &resp)
	if resp.Error != nil {
		t.Fatal(resp.Error)
	}
	routed, parent := e.fleet.slots[0].routed, kvindex.SequenceHashes([]protocol.LocalBlockHash{1, 2})[0]
	if _, ok := routed[parent]; !ok || len(routed) != 1 {
		t.Errorf("after the trim to one block: %v routed, want the first block alone", routed)
	}
}
