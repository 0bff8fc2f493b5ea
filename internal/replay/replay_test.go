package replay

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/engine"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

func routerConfig(policy protocol.Policy) protocol.Config {
	cfg := protocol.DefaultConfig()
	cfg.BlockSize, cfg.Policy = 512, policy
	return cfg
}

// TestKVBeatsRoundRobinOnTheBuiltinWorkload: the point of KV-aware routing.
func TestKVBeatsRoundRobinOnTheBuiltinWorkload(t *testing.T) {
	trace := Builtin(7, 200, 0, 512)
	run := func(policy protocol.Policy) *Metrics {
		res, err := Run(append([]Request(nil), trace...), Options{Cluster: cluster.Default(8), Router: routerConfig(policy)})
		if err != nil {
			t.Fatal(err)
		}
		rep := &res.Metrics
		if rep.Completed != rep.Requests || rep.Rejected != 0 {
			t.Fatalf("%s: %d of %d requests completed", policy, rep.Completed, rep.Requests)
		}
		return rep
	}
	kv, rr := run(protocol.PolicyKV), run(protocol.PolicyRoundRobin)
	if kv.PrefixHitRate <= rr.PrefixHitRate+0.05 {
		t.Fatalf("kv prefix hit rate %.3f does not beat round_robin's %.3f", kv.PrefixHitRate, rr.PrefixHitRate)
	}
	if kv.MeanOverlapRegretBlocks >= rr.MeanOverlapRegretBlocks {
		t.Fatalf("kv regret %.2f not below round_robin's %.2f", kv.MeanOverlapRegretBlocks, rr.MeanOverlapRegretBlocks)
	}
	if rr.WorkerShareCV > 0.01 {
		t.Fatalf("round_robin spreads requests evenly, CV %.3f", rr.WorkerShareCV)
	}
}

// TestEmittedCommandsReplayByteForByte: the stream the host sent, piped
// into serve with no config of its own, gives the same responses, byte for
// byte, with affinity, a queue and linear decay in play: the stream opens
// with its config.
func TestEmittedCommandsReplayByteForByte(t *testing.T) {
	cfg := routerConfig(protocol.PolicyKV)
	cfg.Affinity.Mode = "hard"
	cfg.QueueThreshold = ptr(1.0)
	cfg.PrefillLoadModel, cfg.PrefillTokensPerMS = "linear", ptr(20.0)
	cfg.Temperature, cfg.Seed = 0.3, 5
	var cmds, resps bytes.Buffer
	cc := cluster.Default(4)
	cc.TotalKVBlocks = 200        // small caches: evictions, removed events
	cc.MaxNumBatchedTokens = 2048 // busy from 2048 prefill tokens: the queue fills
	if _, err := Run(Builtin(3, 80, 0, 512), Options{Cluster: cc, Router: cfg, Commands: &cmds, Responses: &resps}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"removed"`, `"op":"advance_clock"`, `"session_id"`} {
		if !bytes.Contains(cmds.Bytes(), []byte(want)) {
			t.Errorf("the stream has no %s: the test does not cover what it should", want)
		}
	}
	if !bytes.Contains(resps.Bytes(), []byte(`"queued":[`)) {
		t.Error("nothing ever waited in the queue")
	}
	if !bytes.HasPrefix(cmds.Bytes(), []byte(`{"op":"config","policy":"kv","block_size":512,`)) {
		t.Fatalf("the stream does not open with its config: %.80s", cmds.String())
	}
	servesAlike(t, &cmds, &resps)
}

// servesAlike: the command stream a replay emitted, piped into serve with
// no config of its own, gives its responses byte for byte.
func servesAlike(t *testing.T, cmds, resps *bytes.Buffer) {
	t.Helper()
	eng, err := engine.New(protocol.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var served bytes.Buffer
	configure := wire.ConfigSource{}.Configure(func(c protocol.Config) (wire.Stepper, error) { return engine.New(c) })
	if _, err := wire.Serve(bytes.NewReader(cmds.Bytes()), &served, eng, wire.ServeOptions{Configure: configure}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(served.Bytes(), resps.Bytes()) {
		a, b := strings.Split(served.String(), "\n"), strings.Split(resps.String(), "\n")
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("line %d differs:\nserve:  %s\nreplay: %s", i+1, a[i], b[i])
			}
		}
		t.Fatalf("serve gave %d lines, replay %d", len(a), len(b))
	}
}

// TestSmallMooncakeTrace: a hand-made trace with sessions and delays.
func TestSmallMooncakeTrace(t *testing.T) {
	trace := `{"timestamp": 0, "input_length": 1500, "output_length": 10, "hash_ids": [1, 2, 3]}
{"timestamp": 5, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2], "extra": "ignored"}
{"timestamp": 10, "input_length": 600, "output_length": 20, "hash_ids": [7, 8], "session_id": 42}
{"input_length": 1200, "output_length": 5, "hash_ids": [7, 8, 9], "session_id": 42, "delay_ms": 100}
{"timestamp": 20, "input_length": 100, "output_length": 1, "hash_ids": []}
`
	reqs, err := ReadMooncake(strings.NewReader(trace), 512)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[3].Session != "42" || *reqs[3].DelayMS != 100 {
		t.Fatalf("the later turn: %+v", reqs[3])
	}
	res, err := Run(reqs, Options{Cluster: cluster.Default(2), Router: routerConfig(protocol.PolicyKV)})
	if err != nil {
		t.Fatal(err)
	}
	if rep := res.Metrics; rep.Completed != 5 || rep.PrefixHitRate == 0 {
		t.Fatalf("report %+v", rep)
	}
	// The later turn arrived 100 ms after its session's first turn ended,
	// not at timestamp 0.
	if reqs[3].Arrival < 110 {
		t.Fatalf("the later turn arrived at %v", reqs[3].Arrival)
	}
}

func TestMooncakeErrorsSayWhere(t *testing.T) {
	for trace, want := range map[string]string{
		`{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1, 2]}`: "line 1: 2 hash_ids for input_length 512",
		"\n" + `{"timestamp": 0, "output_length": 1, "hash_ids": []}`:                   "line 2: input_length is missing",
		`{"timestamp": "x"}`: "line 1",
		`{"input_length": 5, "output_length": 1, "delay_ms": 3}`: "delay_ms needs a session_id",
		``: "no requests",
	} {
		_, err := ReadMooncake(strings.NewReader(trace), 512)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", trace, err, want)
		}
	}
}

// TestSharedTraceReplays runs the real Mooncake trace when it is present.
func TestSharedTraceReplays(t *testing.T) {
	path := filepath.Join("..", "..", "..", "shared", "traces", "synthetic_trace.jsonl")
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		t.Skip("../shared/traces is absent")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, err := ReadMooncake(f, 512)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(reqs, Options{Cluster: cluster.Default(16), Router: routerConfig(protocol.PolicyKV)})
	if err != nil {
		t.Fatal(err)
	}
	if rep := res.Metrics; rep.Requests != 3993 || rep.Completed != rep.Requests || rep.PrefixHitRate <= 0 {
		t.Fatalf("report %+v", rep)
	}
}
