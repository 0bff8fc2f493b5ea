package wire

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/offline-router/offline-router/internal/protocol"
)

// TestAppendCommandRoundTrips: every command written by AppendCommand
// decodes back to itself.
func TestAppendCommandRoundTrips(t *testing.T) {
	u64 := func(v uint64) *uint64 { return &v }
	u32 := func(v uint32) *uint32 { return &v }
	f := func(v float64) *float64 { return &v }
	s := func(v string) *string { return &v }
	i64 := func(v int64) *int64 { return &v }
	b := func(v bool) *bool { return &v }
	parent := protocol.SequenceHash(1<<64 - 1)
	cmds := []protocol.Command{
		{Op: protocol.OpWorkerReady, ID: []byte(`"w"`), NowMS: f(0.1 + 0.2), WorkerID: u64(3), Role: protocol.RolePrefill, DPSize: u32(2), DPStart: u32(4),
			TotalKVBlocks: u64(10), MaxNumBatchedTokens: u64(8192), MaxNumSeqs: u64(64)},
		{Op: protocol.OpPlace, RequestID: "r \"quoted\" é", NowMS: f(1e15 + 0.5), InputTokens: u64(40), OutputTokens: u64(9),
			BlockHashes: []protocol.LocalBlockHash{1<<53 + 1, 2}, SequenceHashes: []protocol.SequenceHash{5, 6}, AllowedWorkers: []uint64{1},
			SessionID: s("s"), ParentSessionID: s("p"), Priority: f(-0.25), StrictPriority: i64(-3), PolicyClass: s("latency \"q\""), WorkerID: u64(1), DPRank: u32(0)},
		// An empty class name is a name given ("": the default class),
		// not one left out.
		{Op: protocol.OpPlace, RequestID: "e", InputTokens: u64(1), PolicyClass: s("")},
		{Op: protocol.OpPlace, RequestID: "l", Tokens: []uint32{1, 2}, LoRAName: s("adapter-a"), CacheNamespace: s("tenant \"t\"")},
		{Op: protocol.OpPlace, RequestID: "t", Tokens: []uint32{1, 1<<32 - 1}},
		{Op: protocol.OpObserve, Events: []protocol.KVEvent{
			{WorkerID: 1, StorageTier: "device", EventID: 7, DPRank: 1, Data: protocol.Stored{ParentHash: &parent, Blocks: []protocol.StoredBlock{{BlockHash: 1, TokensHash: 2}, {BlockHash: 3, TokensHash: 4}}}},
			{WorkerID: 1, StorageTier: "device", EventID: 8, Data: protocol.Stored{Blocks: []protocol.StoredBlock{}}},
			{WorkerID: 2, StorageTier: "host_pinned", EventID: 9, Data: protocol.Removed{BlockHashes: []protocol.SequenceHash{11}}},
			{WorkerID: 2, StorageTier: "device", EventID: 10, Data: protocol.Cleared{}},
		}},
		{Op: protocol.OpAdvanceClock, NowMS: f(12.5)},
		{Op: protocol.OpConfig, ID: []byte(`7`), Config: func() *protocol.ConfigUpdate {
			c := protocol.DefaultConfig()
			c.Affinity.Mode, c.QueueThreshold, c.Affinity.TTLMS = protocol.AffinityHard, f(0.5), 10
			return &protocol.ConfigUpdate{Config: c, Keys: []string{"queue_threshold", "affinity.mode", "affinity.ttl_ms"}}
		}()},
		// The list keys travel whole, one key each, and come back the same.
		{Op: protocol.OpConfig, Config: func() *protocol.ConfigUpdate {
			c := classesConfig()
			return &protocol.ConfigUpdate{Config: c, Keys: []string{"default_policy_class", "policy_classes", "worker_selection.default", "worker_selection.instances"}}
		}()},
		// Every key, as replay opens its streams: the lists empty.
		{Op: protocol.OpConfig, Config: ConfigCommand(protocol.DefaultConfig())},
		{Op: protocol.OpRequestTerminal, RequestID: "r"},
		{Op: protocol.OpWorkerReady, WorkerID: u64(4), DeviceType: protocol.DeviceCPU},
		{Op: protocol.OpWorkerReady, WorkerID: u64(5), LoRAAdapters: []string{"a", "b \"q\""}, MaxGPULoRACount: u32(8)},
		{Op: protocol.OpObserve, Events: []protocol.KVEvent{{WorkerID: 1, StorageTier: "device", Data: protocol.Stored{
			Blocks:   []protocol.StoredBlock{{BlockHash: 1, TokensHash: 2}, {BlockHash: 3}},
			Unhashed: []protocol.UnhashedBlock{{Index: 1, TokenIDs: []uint32{5, 1<<32 - 1}}}, LoRAName: "a", CacheNamespace: "n"}}}},
		{Op: protocol.OpPlace, RequestID: "o", InputTokens: u64(4), RouterConfigOverride: &protocol.RouterConfigOverride{
			OverlapScoreCredit: f(1.5), PrefillLoadScale: f(0.1 + 0.2), RouterTemperature: f(1e-6), AssumeKVReuse: b(true),
			TrackPrefillTokens: b(true), SharedCacheMultiplier: f(5e-324)}},
		// An empty override is one given, which changes nothing.
		{Op: protocol.OpPlace, RequestID: "p", InputTokens: u64(4), RouterConfigOverride: &protocol.RouterConfigOverride{}},
		{Op: protocol.OpPlace, RequestID: "q", InputTokens: u64(4), RouterConfigOverride: &protocol.RouterConfigOverride{PrefillLoadScale: f(2)}},
		// Characters Go's strconv.Quote would write as non-JSON escapes.
		{Op: protocol.OpPlace, RequestID: "del\x7f ctl\x01 ls\u2028 \U0001F600 back\\slash", SessionID: s("\x1f"), InputTokens: u64(1)},
	}
	for _, c := range cmds {
		line := AppendCommand(nil, &c)
		var d Decoded
		Decode(line, &d)
		if d.Err != nil {
			t.Fatalf("%s: %v", line, d.Err)
		}
		if diff := cmp.Diff(c, d.Cmd, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", line, diff)
		}
	}
}
