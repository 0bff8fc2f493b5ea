package engine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
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

// sameAsEveryScore drives an engine on cfg and one on cfg with evidence
// "full" (which scores every candidate) through the commands script sends,
// and requires the same responses but for the scores "full" adds.
func sameAsEveryScore(t *testing.T, cfg protocol.Config, script func(apply func(*protocol.Command))) {
	t.Helper()
	full := cfg
	full.Evidence = protocol.EvidenceFull
	var engines []*Engine
	for _, c := range []protocol.Config{cfg, full} {
		e, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	var out [2]bytes.Buffer
	script(func(c *protocol.Command) {
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
	})
	if !bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
		t.Fatalf("placing among decode groups answered\n%s\nwhere scoring every candidate answered\n%s", out[0].Bytes(), out[1].Bytes())
	}
}

// stored is an observe of a worker caching one block.
func stored(worker uint64, block protocol.LocalBlockHash) *protocol.Command {
	local := []protocol.LocalBlockHash{block}
	seq := kvindex.SequenceHashes(local)
	ev := protocol.KVEvent{WorkerID: worker, StorageTier: "device", EventID: 1,
		Data: protocol.Stored{Blocks: []protocol.StoredBlock{{BlockHash: seq[0], TokensHash: local[0]}}}}
	return &protocol.Command{Op: protocol.OpObserve, Events: []protocol.KVEvent{ev}}
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
		sameAsEveryScore(t, cfg, func(apply func(*protocol.Command)) {
			for w := range uint64(40) {
				apply(&protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(w + 1), DPSize: ptrTo(uint32(1 + w%2))})
			}
			for i, w := range []uint64{3, 9, 27} { // they cache the first block of some prompts
				apply(stored(w, protocol.LocalBlockHash(1+i)))
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
		})
	}
}

// TestBucketsReachedRankInATiedGroup: with no overlap credit, a rank that
// caches the prompt costs what the idle ranks do; whichever the draw picks
// (every seed), it is counted once and found at its own position. (From
// the second cold review.)
func TestBucketsReachedRankInATiedGroup(t *testing.T) {
	for seed := range uint64(32) {
		cfg := protocol.DefaultConfig()
		cfg.Seed, cfg.OverlapScoreCredit = seed, 0
		sameAsEveryScore(t, cfg, func(apply func(*protocol.Command)) {
			for w := range uint64(4) {
				apply(&protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(w + 1)})
			}
			apply(stored(2, 1))
			apply(&protocol.Command{Op: protocol.OpPlace, RequestID: "a", InputTokens: ptrTo(uint64(16)), BlockHashes: []protocol.LocalBlockHash{1}})
		})
	}
}

// TestBucketsReachedPrefillingRank: a rank with prefill booked that the
// prompt reaches (an active hit), whose decode blocks equal a tied group's,
// is costed once, not also as a member of that group. (From the second
// cold review.)
func TestBucketsReachedPrefillingRank(t *testing.T) {
	sameAsEveryScore(t, protocol.DefaultConfig(), func(apply func(*protocol.Command)) {
		for w := range uint64(3) {
			apply(&protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(w + 1)})
		}
		pinned := func(id string, worker uint64, hashes ...protocol.LocalBlockHash) *protocol.Command {
			return &protocol.Command{Op: protocol.OpPlace, RequestID: id, InputTokens: ptrTo(uint64(16)), BlockHashes: hashes, WorkerID: ptrTo(worker)}
		}
		apply(pinned("a", 1, 1))
		apply(pinned("b", 2))
		apply(pinned("c", 3))
		apply(&protocol.Command{Op: protocol.OpPrefillCompleted, RequestID: "b"})
		apply(&protocol.Command{Op: protocol.OpPrefillCompleted, RequestID: "c"})
		apply(&protocol.Command{Op: protocol.OpPlace, RequestID: "x", InputTokens: ptrTo(uint64(16)), BlockHashes: []protocol.LocalBlockHash{1}})
	})
}

// TestBucketsManyTiedGroups: a prefill weight so large that decode blocks
// round away makes every decode group tie; the draw still lands where
// scoring every candidate puts it.
func TestBucketsManyTiedGroups(t *testing.T) {
	cfg := protocol.DefaultConfig()
	cfg.PrefillLoadScale, cfg.BlockSize, cfg.OverlapScoreCredit = 1<<53, 1, 0
	for seed := range uint64(8) {
		cfg.Seed = seed
		sameAsEveryScore(t, cfg, func(apply func(*protocol.Command)) {
			for w := range uint64(24) {
				apply(&protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(w + 1)})
				// A different number of active blocks on each worker.
				id := fmt.Sprint("load", w)
				hashes := make([]protocol.LocalBlockHash, w)
				for j := range hashes {
					hashes[j] = protocol.LocalBlockHash(1000*w + uint64(j) + 1)
				}
				apply(&protocol.Command{Op: protocol.OpPlace, RequestID: id, InputTokens: ptrTo(uint64(len(hashes))), BlockHashes: hashes, WorkerID: ptrTo(w + 1)})
				apply(&protocol.Command{Op: protocol.OpPrefillCompleted, RequestID: id})
				if w%2 == 0 {
					apply(stored(w+1, 7))
				}
			}
			for i := range 20 {
				apply(&protocol.Command{Op: protocol.OpPlace, RequestID: fmt.Sprint("x", i), InputTokens: ptrTo(uint64(1 << 20)), BlockHashes: []protocol.LocalBlockHash{7}})
			}
		})
	}
}

// TestBucketsRandomAsEveryScore: on random fleets (up to a few hundred
// ranks, so that many ranks are reached) whose
// ranks cache random prefixes and carry random loads, every placement,
// its ties and draw land where scoring every candidate puts them: a rank
// reached by both walks counted once, the reached members of a decode
// group left out of its count, the ties found in candidate order. Some
// seeds make prefill so heavy that every decode group ties; some predict
// on route, so that the overlaps come from two indexes.
func TestBucketsRandomAsEveryScore(t *testing.T) {
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 35))
		cfg := protocol.DefaultConfig()
		cfg.Seed = seed
		cfg.OverlapScoreCredit = float64(rng.IntN(2))
		if seed%5 == 4 {
			cfg.PrefillLoadScale, cfg.BlockSize = 1<<53, 1
		}
		if seed%3 == 2 { // the predicted index's ranks join the walk's
			cfg.PredictedTTLMS = ptrTo(1e9)
		}
		workers := 1 + rng.IntN(200)
		prefixes := make([][]protocol.LocalBlockHash, 1+rng.IntN(6))
		for i := range prefixes {
			for range 1 + rng.IntN(8) {
				prefixes[i] = append(prefixes[i], protocol.LocalBlockHash(1+rng.Uint64N(1<<40)))
			}
		}
		prompt := func() []protocol.LocalBlockHash {
			local := slices.Clone(prefixes[rng.IntN(len(prefixes))])
			local = local[:rng.IntN(len(local)+1)]
			for range rng.IntN(4) {
				local = append(local, protocol.LocalBlockHash(1+rng.Uint64N(1<<40)))
			}
			return local
		}
		sameAsEveryScore(t, cfg, func(apply func(*protocol.Command)) {
			worker := func() *uint64 { return ptrTo(uint64(1 + rng.IntN(workers))) }
			for w := range uint64(workers) {
				apply(&protocol.Command{Op: protocol.OpWorkerReady, WorkerID: ptrTo(w + 1), DPSize: ptrTo(uint32(1 + rng.IntN(3)))})
			}
			var inFlight []string
			eventID := uint64(0)
			for i := range 400 {
				switch k := rng.IntN(20); {
				case k < 4: // a worker caches a prefix
					local := prompt()
					if len(local) == 0 {
						continue
					}
					seq := kvindex.SequenceHashes(local)
					var st protocol.Stored
					for j := range local {
						st.Blocks = append(st.Blocks, protocol.StoredBlock{BlockHash: seq[j], TokensHash: local[j]})
					}
					eventID++
					ev := protocol.KVEvent{WorkerID: *worker(), StorageTier: "device", EventID: eventID, Data: st}
					apply(&protocol.Command{Op: protocol.OpObserve, Events: []protocol.KVEvent{ev}})
				case k < 14: // a placement, now and then pinned
					id := fmt.Sprint("r", i)
					local := prompt()
					c := &protocol.Command{Op: protocol.OpPlace, RequestID: id, InputTokens: ptrTo(uint64(16*len(local) + rng.IntN(16))), BlockHashes: local}
					if rng.IntN(8) == 0 {
						c.WorkerID = worker()
					}
					apply(c)
					inFlight = append(inFlight, id)
				case k < 17 && len(inFlight) > 0:
					apply(&protocol.Command{Op: protocol.OpPrefillCompleted, RequestID: inFlight[rng.IntN(len(inFlight))]})
				case k < 19 && len(inFlight) > 0:
					j := rng.IntN(len(inFlight))
					apply(&protocol.Command{Op: protocol.OpRequestTerminal, RequestID: inFlight[j]})
					inFlight = slices.Delete(inFlight, j, j+1)
				case k == 19: // the ready list is rebuilt
					w := worker()
					apply(&protocol.Command{Op: protocol.OpWorkerDraining, WorkerID: w})
					apply(&protocol.Command{Op: protocol.OpWorkerReady, WorkerID: w, DPSize: ptrTo(uint32(1 + rng.IntN(3)))})
				}
			}
		})
	}
}
