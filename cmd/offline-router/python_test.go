package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-json"
	"github.com/google/go-cmp/cmp"
)

func python(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the Python driver is not tested")
	}
	return py
}

// TestPythonDriver exercises scripts/offline_router.py against the binary:
// commands, exact u64, the error path, pipelining, a process that dies at
// start, and clean shutdown.
func TestPythonDriver(t *testing.T) {
	py := python(t)
	script := fmt.Sprintf(`
import sys
sys.path.insert(0, "../../scripts")
from offline_router import OfflineRouter, RouterError, RouterDied, RouterClosed
BIN = %q
with OfflineRouter(BIN, config={"evidence": "none", "queue_threshold": 1}) as r:
    r.worker_ready(1, max_num_batched_tokens=64)
    r.worker_ready(2, max_num_batched_tokens=64)
    r.observe([{"worker_id": 2, "event": {"event_id": 18446744073709551615, "data": {"stored": {"parent_hash": None,
        "blocks": [{"block_hash": 18446744073709551615, "tokens_hash": 9007199254740993}]}}}}])
    p = r.place("a", input_tokens=16, block_hashes=[9007199254740993], now_ms=1.5)["placements"][0]
    assert p["worker_id"] == 2 and p["overlap_blocks"] == 1, p
    assert r.inspect()["workers"][1]["ranks"][0]["last_event_id"] == 2**64 - 1
    try:
        r.place("a", input_tokens=16)
        raise AssertionError("duplicate accepted")
    except RouterError as e:
        assert e.code == "duplicate_request" and '"a"' in e.message, e
    r.dispatch_committed("a")
    resp = r.place("big", input_tokens=500, worker_id=1)
    assert resp["pending_count"] == 0
    assert r.place("waits", input_tokens=16, worker_id=1)["pending_count"] == 1
    assert r.cancel_pending("waits")["cancelled"] is True
    many = [{"op": "place", "request_id": "m%%d" %% i, "input_tokens": 16, "worker_id": 2} for i in range(3000)]
    many += [{"op": "request_terminal", "request_id": "m%%d" %% i} for i in range(3000)]
    out = r.send_many(many)
    assert len(out) == 6000 and all(o["ok"] for o in out)
    bad = r.send_many([{"op": "inspect"}, {"op": "nope"}], check=False)
    assert bad[1]["error"]["code"] == "unknown_op"
    r.prefill_completed("a"); r.request_terminal("a"); r.prefill_completed("big"); r.request_terminal("big")
    r.advance_clock(10); r.worker_draining(1); r.worker_removed(1); r.topology_settled()
import glob, os, tempfile
before = set(glob.glob(os.path.join(tempfile.gettempdir(), "offline-router-*")))
try:
    with OfflineRouter(BIN, config={"no_such_key": 1}) as r:
        r.inspect()
    raise AssertionError("bad config accepted")
except RouterError as e:
    assert e.code == "unknown_field" and "no_such_key" in e.message, e
try:
    with OfflineRouter(BIN, config={"block_size": 32}) as r:
        assert r.config["block_size"] == 32 and r.commands_sent == 0, (r.config, r.commands_sent)
        try:
            r.send_many([{"op": "inspect"}, {"op": "place", "request_id": object()}])
            raise AssertionError("an unwritable command was sent")
        except TypeError:
            pass
        assert r.commands_sent == 0 and r.inspect()["workers"] == [] and r.commands_sent == 1
        raise KeyError("the with body fails")
except KeyError:
    pass
assert set(glob.glob(os.path.join(tempfile.gettempdir(), "offline-router-*"))) == before, "a temporary file was left"
r = OfflineRouter(BIN)
r.close()
try:
    r.inspect()
    raise AssertionError("a command after close was sent")
except RouterClosed:
    pass
r.close()  # twice is fine
try:
    with OfflineRouter(BIN, args=("--fail-fast",)) as ff:
        ff.send_many([{"op": "inspect"}, {"op": "nope"}, {"op": "inspect"}])
    raise AssertionError("--fail-fast went on")
except RouterDied as e:  # with what was answered before, the error last
    assert [o["ok"] for o in e.responses] == [True, False], e.responses
    assert e.responses[1]["error"]["code"] == "unknown_op", e.responses
cut = OfflineRouter("sh", args=("-c", "printf '{\"seq\":1'; exit 3"))
try:
    cut.inspect()
    raise AssertionError("a cut line was parsed")
except RouterDied as e:
    assert e.returncode == 3 and "cut short" in e.stderr, e
print("PY-OK")
`, binary)
	out, err := exec.Command(py, "-c", script).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PY-OK") {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestPythonReplayMatchesGo: scripts/replay_mooncake.py, a plain host loop
// on the driver, reports the same headline numbers as offline-router replay
// for the same trace and settings.
func TestPythonReplayMatchesGo(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	var b bytes.Buffer
	for i := range 300 {
		prefix := i % 7
		ids := []int{1000 + prefix, 2000 + prefix}
		for k := range i % 5 {
			ids = append(ids, 10000+i*10+k)
		}
		if i%3 == 0 && i > 0 {
			fmt.Fprintf(&b, `{"input_length": %d, "output_length": %d, "hash_ids": %s, "session_id": "s%d", "delay_ms": %d}`+"\n",
				len(ids)*512-100, 20+i%50, jsonInts(ids), (i-1)%11, 50+i%70) // line i-1 started that session
		} else {
			fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": %s, "session_id": "s%d"}`+"\n",
				i*37, len(ids)*512-100, 20+i%50, jsonInts(ids), i%11)
		}
	}
	if err := os.WriteFile(trace, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// Small caches (evictions) and a small batch budget (the backlog limit binds).
	cluster := []string{"--workers", "4", "--worker-kv-blocks", "40", "--worker-max-num-seqs", "6", "--worker-max-num-batched-tokens", "2048"}
	read := func(path string) map[string]any {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	// The same numbers with events, in approximate mode, when busy
	// thresholds turn requests away, and with a queue and its timeout.
	for name, config := range map[string]string{
		"events":      `{}`,
		"approximate": `{"kv_events": false}`,
		"busy":        `{"active_decode_blocks_threshold": 0.05}`,
		"queue":       `{"queue_threshold": 0, "queue_timeout_ms": 20}`,
	} {
		cfgFile := filepath.Join(dir, name+".json")
		os.WriteFile(cfgFile, []byte(config), 0o644)
		goReport, pyReport := filepath.Join(dir, name+"-go.json"), filepath.Join(dir, name+"-py.json")
		// The Python host has the simple worker model only.
		if _, stderr, code := run(t, "", append([]string{"replay", trace, "-q", "--engine", "simple", "--config", cfgFile, "--report", goReport}, cluster...)...); code != 0 {
			t.Fatalf("%s: go replay: %s", name, stderr)
		}
		cmd := exec.Command(py, append([]string{"../../scripts/replay_mooncake.py", trace, "--binary", binary, "--config", cfgFile, "--report", pyReport}, cluster...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: python replay: %v\n%s", name, err, out)
		}
		g, p := read(goReport)["deterministic"].(map[string]any)["policies"].([]any)[0].(map[string]any), read(pyReport)
		keys := []string{"requests", "completed", "rejected", "rejected_by_reason", "duration", "prefix_hit_rate", "router_overlap_rate",
			"mean_overlap_regret_blocks", "worker_requests", "worker_share_cv", "router_commands"}
		for _, stat := range []string{"mean", "median", "std", "p90", "p99"} {
			keys = append(keys, stat+"_ttft_ms", stat+"_queue_wait_ms")
		}
		for _, k := range keys {
			if diff := cmp.Diff(g[k], p[k]); diff != "" {
				t.Errorf("%s: %s differs (-go +python):\n%s", name, k, diff)
			}
		}
		if g["prefix_hit_rate"].(float64) == 0 {
			t.Errorf("%s: nothing was cached: the comparison proves little", name)
		}
		if name == "busy" && g["rejected"].(float64) == 0 || name == "queue" && g["rejected_by_reason"].(map[string]any)["queue_timeout"] == nil {
			t.Errorf("%s: nothing was rejected: the comparison proves little (%v)", name, g["rejected_by_reason"])
		}
	}
}

// TestPythonReplayRefusesLoRA: the Python host does not salt an
// adapter's hash_ids (no XXH3 in Python's standard library), so it refuses
// a LoRA trace, naming the line and field, rather than report numbers that
// share blocks across adapters.
func TestPythonReplayRefusesLoRA(t *testing.T) {
	py := python(t)
	trace := filepath.Join(t.TempDir(), "lora.jsonl")
	line := `{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}` + "\n"
	os.WriteFile(trace, []byte(line+`{"timestamp": 1, "input_length": 600, "output_length": 4, "hash_ids": [1, 2], "lora_name": "a"}`+"\n"), 0o644)
	out, err := exec.Command(py, "../../scripts/replay_mooncake.py", trace, "--binary", binary).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `lora.jsonl:2: field "lora_name"`) {
		t.Fatalf("want a refusal naming line 2's lora_name, got %v:\n%s", err, out)
	}
}

func jsonInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// TestPythonPolicy runs the unittest suite of scripts/offline_router_policy.py,
// AISimulate's policy bridge adapter, and of the driver's process handling,
// against the binary. The driver's timeout turns a hang into a failure.
func TestPythonPolicy(t *testing.T) {
	py := python(t)
	cmd := exec.Command(py, "-m", "unittest", "test_offline_router_policy")
	cmd.Dir = "../../scripts"
	cmd.Env = append(os.Environ(), "OFFLINE_ROUTER_BIN="+binary, "OFFLINE_ROUTER_TIMEOUT_S=60", "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
