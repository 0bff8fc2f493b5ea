package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/scenario"
	"github.com/offline-router/offline-router/internal/wire"
)

// fuzzConfigs are the configurations the engine fuzzer picks from by the
// input's first byte: plain, the queue with decay and timeouts, hard and
// soft affinity (with deduplicated event ids), approximate mode with busy
// thresholds, and the peer policies (sglang_cache_aware trimming its tree
// often, under a queue; llmd).
func fuzzConfigs() []protocol.Config {
	plain := protocol.DefaultConfig()
	queue := protocol.DefaultConfig()
	queue.QueueThreshold, queue.QueueTimeoutMS = ptrTo(1.0), ptrTo(50.0)
	queue.PrefillLoadModel, queue.PrefillTokensPerMS = "linear", ptrTo(2.0)
	hard := queue
	hard.Affinity.Mode, hard.Affinity.TTLMS = "hard", 30
	soft := protocol.DefaultConfig()
	soft.Affinity.Mode, soft.Affinity.Key, soft.Temperature = "soft", "sibling_group", 0.5
	soft.DedupeEventIDs = true
	approx := protocol.DefaultConfig()
	approx.KVEvents, approx.ApproxTTLMS = false, 40
	approx.ActivePrefillTokensThreshold, approx.Evidence = ptrTo(64.0), protocol.EvidenceFull
	sglang := queue
	sglang.Policy, sglang.SGLang.EvictionIntervalMS, sglang.SGLang.MaxTreeSize = protocol.PolicySGLang, 20, 3
	sglang.SGLang.BalanceAbsThreshold = 1
	llmd := protocol.DefaultConfig()
	llmd.Policy = protocol.PolicyLLMD
	return []protocol.Config{plain, queue, hard, soft, approx, sglang, llmd}
}

// FuzzEngine runs any byte stream as a command stream and checks, after
// every command, the engine's invariants, and that a rejected command left
// inspect unchanged. Seeds: every golden scenario.
func FuzzEngine(f *testing.F) {
	files, err := scenario.Files(filepath.Join("..", ".."))
	if err != nil {
		f.Fatal(err)
	}
	for i, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(i), data)
	}
	configs := fuzzConfigs()
	f.Fuzz(func(t *testing.T, pick byte, stream []byte) {
		e, err := New(configs[int(pick)%len(configs)])
		if err != nil {
			t.Fatal(err)
		}
		var d wire.Decoded
		for _, line := range bytes.Split(stream, []byte("\n")) {
			if wire.IsComment(line) {
				continue
			}
			wire.Decode(line, &d)
			if d.Err != nil {
				continue
			}
			before := e.inspect()
			var resp protocol.Response
			e.Apply(&d.Cmd, &resp)
			if resp.Error != nil {
				if diff := cmp.Diff(before, e.inspect()); diff != "" {
					t.Fatalf("%s failed (%s) but changed the state:\n%s", line, resp.Error.Message, diff)
				}
				continue
			}
			if err := invariants(e, &d.Cmd, &resp); err != nil {
				t.Fatalf("after %s: %v", line, err)
			}
		}
	})
}
