package engine

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// TestBucketsFollowLoads: a request's load moves its rank between decode
// groups as it is booked, prefilled and ended, and the groups stay those
// the ranks' loads make (invariants checks them).
func TestBucketsFollowLoads(t *testing.T) {
	e, err := New(protocol.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	do := func(c *protocol.Command) {
		t.Helper()
		var resp protocol.Response
		e.Apply(c, &resp)
		if resp.Error != nil {
			t.Fatal(resp.Error)
		}
		if err := invariants(e, c, &resp); err != nil {
			t.Fatalf("%s %s: %v", c.Op, c.RequestID, err)
		}
	}
	for w := range uint64(3) {
		do(&protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(w + 1)})
	}
	place := func(id string, hashes ...protocol.LocalBlockHash) {
		do(&protocol.Command{Op: protocol.OpPlace, RequestID: id, InputTokens: ptrTo(uint64(16 * len(hashes))), BlockHashes: hashes})
	}
	place("a", 1, 2, 3, 4)                                                 // prefilling
	place("b", 1, 2)                                                       // shares a's active blocks
	place("c")                                                             // no blocks, no prefill: a decode group of its own load
	do(&protocol.Command{Op: protocol.OpPrefillCompleted, RequestID: "a"}) // to a's decode group
	do(&protocol.Command{Op: protocol.OpRequestTerminal, RequestID: "a"})  // back to none
	do(&protocol.Command{Op: protocol.OpPrefillCompleted, RequestID: "b"})
	do(&protocol.Command{Op: protocol.OpWorkerDraining, WorkerID: ptrTo(uint64(2))}) // the list is rebuilt
	do(&protocol.Command{Op: protocol.OpRequestTerminal, RequestID: "b"})
	do(&protocol.Command{Op: protocol.OpRequestTerminal, RequestID: "c"})
}

// TestBucketsDrawTiesAsEveryScore: among many idle ranks, some loaded and
// some caching the prompt, placements drawn among ties land where scoring
// every candidate puts them, placement after placement; with no overlap
// credit too, where a rank the index walk reached costs what its decode
// group does and must be counted once.
func TestBucketsDrawTiesAsEveryScore(t *testing.T) {
	for _, credit := range []float64{1, 0} {
		cfg := protocol.DefaultConfig()
		cfg.OverlapScoreCredit = credit
		full := cfg
		full.Evidence = protocol.EvidenceFull
		engines := []*Engine{}
		for _, c := range []protocol.Config{cfg, full} {
			e, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			engines = append(engines, e)
		}
		var out [2]bytes.Buffer
		apply := func(c *protocol.Command) {
			for k, e := range engines {
				var resp protocol.Response
				e.Apply(c, &resp)
				for i := range resp.Placements {
					if ev := resp.Placements[i].Evidence; ev != nil {
						ev.CandidateSet, ev.FilteredSet = nil, nil
					}
				}
				b, _ := wire.Encode(nil, &resp)
				out[k].Write(b)
			}
		}
		for w := range uint64(40) {
			apply(&protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(w + 1), DPSize: ptrTo(uint32(1 + w%2))})
		}
		// Workers 3, 9 and 27 cache the first block of some prompts.
		for i, w := range []uint64{3, 9, 27} {
			local := []protocol.LocalBlockHash{protocol.LocalBlockHash(1 + i)}
			seq := kvindex.SequenceHashes(local)
			ev := protocol.KVEvent{WorkerID: w, StorageTier: "device", EventID: 1,
				Data: protocol.Stored{Blocks: []protocol.StoredBlock{{BlockHash: seq[0], TokensHash: local[0]}}}}
			apply(&protocol.Command{Op: protocol.OpObserve, Events: []protocol.KVEvent{ev}})
		}
		for i := range 300 {
			id := fmt.Sprint("r", i)
			hashes := []protocol.LocalBlockHash{protocol.LocalBlockHash(1 + i%3), protocol.LocalBlockHash(10 + i%7)}
			apply(&protocol.Command{Op: protocol.OpPlace, RequestID: id, InputTokens: ptrTo(uint64(32 + i%5)), BlockHashes: hashes[:i%3]})
			switch i % 4 {
			case 0:
				apply(&protocol.Command{Op: protocol.OpPrefillCompleted, RequestID: id})
			case 1:
				apply(&protocol.Command{Op: protocol.OpRequestTerminal, RequestID: fmt.Sprint("r", i-1)})
			}
		}
		if !bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
			t.Fatalf("credit %v: the bucketed placements differ from scoring every candidate", credit)
		}
	}
}
