package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/goccy/go-json"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
)

// TestReplayCompareAndReport: one report shape for one policy or four,
// with the run's identity, and the table's rows.
func TestReplayCompareAndReport(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	stdout, stderr, code := run(t, "", "replay", "--compare", "--sessions", "60", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"prefix hit rate", "round_robin", "least_loaded", "P99 TTFT (ms)", "mean TPOT (ms)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
	four := readReport(t, report)
	if len(four.Deterministic.Policies) != 4 || len(four.Run.Policies) != 4 {
		t.Fatalf("--compare: %d policies", len(four.Deterministic.Policies))
	}
	if _, stderr, code := run(t, "", "replay", "--sessions", "60", "--report", report); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	one := readReport(t, report)
	if one.SchemaVersion != 1 || one.Deterministic.ProtocolVersion != 1 || one.Run.ToolVersion == "" ||
		one.Deterministic.Trace.Source != "builtin" || one.Deterministic.Trace.Requests != 251 ||
		one.Deterministic.Router.BlockSize != 512 || len(one.Deterministic.Policies) != 1 ||
		one.Deterministic.Cluster.Engine != "iteration" || one.Deterministic.Cluster.Profile == nil {
		t.Fatalf("one policy: %+v", one)
	}
	if diff := cmp.Diff(one.Deterministic.Policies[0], four.Deterministic.Policies[0]); diff != "" {
		t.Fatalf("kv alone and kv among four differ:\n%s", diff)
	}
}

// TestReplayReportsAdapters: with adapters, the table's first line and the
// report say how many requests ran under how many, and the report the
// capacity given; without, neither says a word of them (reports made
// before adapters stay as they were).
func TestReplayReportsAdapters(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.json")
	stdout, stderr, code := run(t, "", "replay", "--sessions", "60", "--builtin-lora-adapters", "3", "--max-gpu-lora-count", "2", "-q", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rep := readReport(t, report)
	tr := rep.Deterministic.Trace
	if tr.LoRARequests == 0 || tr.LoRARequests >= tr.Requests || tr.LoRAAdapters != 3 ||
		rep.Deterministic.Workload.BuiltinLoRAAdapters != 3 || rep.Deterministic.Cluster.MaxGPULoRACount == nil || *rep.Deterministic.Cluster.MaxGPULoRACount != 2 {
		t.Fatalf("trace %+v, workload %+v, cluster capacity %v", tr, rep.Deterministic.Workload, rep.Deterministic.Cluster.MaxGPULoRACount)
	}
	if want := fmt.Sprintf("%d requests (%d under 3 LoRA adapters)", tr.Requests, tr.LoRARequests); !strings.Contains(stdout, want) {
		t.Errorf("the table does not say %q:\n%s", want, stdout)
	}
	if _, stderr, code := run(t, "", "replay", "--sessions", "60", "-q", "--report", report); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if data, _ := os.ReadFile(report); bytes.Contains(data, []byte("lora")) {
		t.Errorf("a report without adapters speaks of them:\n%s", data)
	}
}

func readReport(t *testing.T, path string) *replay.Report {
	t.Helper()
	return readStrict[replay.Report](t, path)
}

// readStrict reads a JSON file the command wrote into a T, refusing a
// field T does not have: a renamed field fails the test.
func readStrict[T any](t *testing.T, path string) *T {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v T
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &v
}

// TestDeterministicReportIsByteIdentical: the same trace from two folders,
// with reports written to two folders, gives the same deterministic bytes;
// only the run part (the trace path here) differs.
func TestDeterministicReportIsByteIdentical(t *testing.T) {
	trace := "{\"timestamp\": 0, \"input_length\": 1500, \"output_length\": 10, \"hash_ids\": [1, 2, 3]}\n" +
		"{\"timestamp\": 5, \"input_length\": 1024, \"output_length\": 10, \"hash_ids\": [1, 2]}\n"
	var parts [2][]byte
	var paths [2]string
	for i := range parts {
		dir := t.TempDir()
		paths[i] = filepath.Join(dir, "trace.jsonl")
		os.WriteFile(paths[i], []byte(trace), 0o644)
		report := filepath.Join(dir, "r.json")
		if _, stderr, code := run(t, "", "replay", paths[i], "--compare", "-q", "--report", report); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var raw struct {
			Deterministic json.RawMessage `json:"deterministic"`
			Run           struct {
				TracePath string `json:"trace_path"`
			} `json:"run"`
		}
		data, _ := os.ReadFile(report)
		if err := json.Unmarshal(data, &raw); err != nil || raw.Run.TracePath != paths[i] {
			t.Fatalf("%v, trace_path %q", err, raw.Run.TracePath)
		}
		parts[i] = raw.Deterministic
	}
	if !bytes.Equal(parts[0], parts[1]) {
		t.Fatalf("the deterministic parts differ:\n%s\n%s", parts[0], parts[1])
	}
	if !bytes.Contains(parts[0], []byte(`"sha256": "`)) || bytes.Contains(parts[0], []byte("wall")) {
		t.Fatalf("deterministic part: %s", parts[0])
	}
}

// TestReportToStdout: --report - writes the report to stdout, alone, and
// the table to stderr.
func TestReportToStdout(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(binary, "replay", "--sessions", "10", "--report", "-")
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	var rep replay.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || rep.SchemaVersion != 1 {
		t.Fatalf("stdout is not the report: %v\n%s", err, stdout.String())
	}
	if !strings.Contains(stderr.String(), "prefix hit rate") {
		t.Fatalf("the table is not on stderr: %s", stderr.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("--report - wrote a file: %v", entries)
	}
}

// TestReplayEmitThenServe: the emitted stream, piped into the binary with
// no flags, gets byte for byte the responses the replay itself got,
// placements included.
func TestReplayEmitThenServe(t *testing.T) {
	dir := t.TempDir()
	cmds, resps := filepath.Join(dir, "cmds.jsonl"), filepath.Join(dir, "resps.jsonl")
	args := []string{"--affinity-mode", "soft", "--temperature", "0.2", "--seed", "3"}
	if _, stderr, code := run(t, "", append([]string{"replay", "--sessions", "40", "--emit-commands", cmds, "--emit-responses", resps}, args...)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	stream, err := os.ReadFile(cmds)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(resps)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(want), `"reason":"affinity"`) || strings.Contains(string(want), `"ok":false`) {
		t.Fatal("the replay's own responses should hold affinity placements and no error")
	}
	// No flags: the stream carries its config.
	got, _, code := run(t, string(stream))
	if code != 0 {
		t.Fatalf("serving the emitted stream: exit %d", code)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Fatalf("serve answers the emitted stream unlike the replay (-replay +serve):\n%s", diff)
	}
}

// TestReplayRefusesClashingOutputs: two streams into one file, a one-run
// output with --compare, or values a run could not go through, are refused
// before anything runs or prints.
func TestReplayRefusesClashingOutputs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "both.jsonl")
	for args, want := range map[string]string{
		"--emit-commands " + path + " --emit-responses " + path: "is also --emit-commands: give each output its own file",
		"--compare --emit-responses " + path:                    "--emit-responses writes the stream of one policy",
		"--policies kv,random --emit-commands " + path:          "--emit-commands writes the stream of one policy",
		// Values the simulated cluster would take past the router's times.
		"--engine simple --worker-decode-ms-per-token NaN":      "--worker-decode-ms-per-token NaN: expected a finite number",
		"--engine simple --worker-decode-ms-per-token 1e300":    "--worker-decode-ms-per-token 1e+300",
		"--engine simple --worker-prefill-tokens-per-ms 1e-300": "--worker-prefill-tokens-per-ms 1e-300: expected 1e-6 to 2^53",
		"--plot " + path + ".jpg":                               "must end in .png, .svg or .pdf",
		"--temperature NaN":                                     "--temperature (config temperature): expected a finite number",
		"--plot /no/such/folder/x.png":                          "--plot /no/such/folder/x.png: writing /no/such/folder/x.png: no such file or directory",
		"--report /no/such/folder/x.json":                       "--report /no/such/folder/x.json: writing /no/such/folder/x.json: no such file or directory",
		"--report " + path + ".txt":                             "must end in .json (or be - for stdout)",
		"--policies kv,nope":                                    `--policies: "nope" is not a policy`,
		"--compare --policies kv":                               "--compare is --policies",
		"--replay-concurrency 2 --arrival-speedup-ratio 2":      "--replay-concurrency runs a closed loop",
		"--arrival-speedup-ratio 0":                             "--arrival-speedup-ratio 0: expected a number from 1e-9 to 1e9",
		"--input-tokens 100 --request-count 3":                  "--sessions sizes the built-in workload",
		"--goodput ttft:x":                                      `--goodput "ttft:x"`,
	} {
		stdout, stderr, code := run(t, "", append([]string{"replay", "--sessions", "5"}, strings.Fields(args)...)...)
		if code != 2 || !strings.Contains(stderr, want) || stdout != "" {
			t.Errorf("%s: exit %d, stdout %q: %s", args, code, stdout, stderr)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a refused replay wrote %s", path)
	}
}

func TestReplayBadTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(path, []byte(`{"timestamp":0,"input_length":10,"output_length":1,"hash_ids":[1,2]}`+"\n"), 0o644)
	_, stderr, code := run(t, "", "replay", path)
	if code != 2 || !strings.Contains(stderr, "line 1") || !strings.Contains(stderr, "--block-size") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if _, stderr, code := run(t, "", "replay", "/no/such/trace.jsonl"); code != 2 || !strings.Contains(stderr, "no such file") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for trace, want := range map[string]string{
		`{"timestamp":-5,"input_length":10,"output_length":1}`:    `trace line 1: field "timestamp": expected a time from 0 to`,
		`{"timestamp":1e300,"input_length":10,"output_length":1}`: `trace line 1: field "timestamp": expected a time from 0 to`,
		`{"timestamp":0,"input_length":10,"output_length":1,"session_id":"s"}` + "\n" +
			`{"delay_ms":-1,"input_length":10,"output_length":1,"session_id":"s"}`: `trace line 2: field "delay_ms": expected a delay from 0`,
		`{"timestamp":0,"input_length":18446744073709551617,"output_length":1}`: `field "input_length": expected an unsigned 64-bit integer`,
		`{"timestamp":0,"input_length":1,"output_length":1,"INPUT_LENGTH":1}`:   `"INPUT_LENGTH"`,
		`{"timestamp":0,"input_length":1,"output_length":1,"output_length":2}`:  `"output_length"`,
	} {
		os.WriteFile(path, []byte(trace+"\n"), 0o644)
		if _, stderr, code := run(t, "", "replay", path); code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("%s: exit %d: %s", trace, code, stderr)
		}
	}
	if _, stderr, code := run(t, "", "replay", "--sessions", "-5"); code != 2 || !strings.Contains(stderr, "--sessions -5") {
		t.Errorf("--sessions -5: exit %d: %s", code, stderr)
	}
	if _, stderr, code := run(t, "", "replay", "--input-tokens", "100", "--output-tokens", "5"); code != 2 || !strings.Contains(stderr, "--request-count 0: expected 1 to 2000000") {
		t.Errorf("a synthetic workload without --request-count: exit %d: %s", code, stderr)
	}
	// A flag the chosen workload would ignore is refused.
	os.WriteFile(path, []byte(`{"timestamp":0,"input_length":10,"output_length":1}`+"\n"), 0o644)
	for _, args := range [][]string{{"--sessions", "5"}, {"--input-tokens", "5"}, {"--builtin-lora-adapters", "2"}} {
		if _, stderr, code := run(t, "", append([]string{"replay", path}, args...)...); code != 2 || !strings.Contains(stderr, "trace") {
			t.Errorf("%v with a trace: exit %d: %s", args, code, stderr)
		}
	}
}

// TestReplayUnderEveryRouterFlag: replay runs to its end, without a panic
// or an error, under each router flag (and each Dynamo alias) with a value
// that changes behaviour; busy thresholds without a queue reject, with
// reasons. A flag added without a case here fails the test.
func TestReplayUnderEveryRouterFlag(t *testing.T) {
	if raceBuild {
		t.Skip("replays in one goroutine: nothing for -race to check, at ten times the cost")
	}
	values := map[string][]string{
		"policy":                                  {"round_robin", "random", "least_loaded", "power_of_two", "device_aware_weighted", "session_hash", "sglang_cache_aware", "llmd"},
		"block_size":                              {"256"},
		"seed":                                    {"7"},
		"temperature":                             {"0.5"},
		"overlap_score_credit":                    {"2"},
		"prefill_load_scale":                      {"4"},
		"overlap_score_credit_decay":              {"1"},
		"host_cache_hit_weight":                   {"0", "1"},
		"disk_cache_hit_weight":                   {"1"},
		"decode_active_request_weight":            {"8"},
		"predicted_ttl_ms":                        {"0", "500"},
		"encoder_cuda_to_cpu_ratio":               {"1"},
		"kv_events":                               {"false"},
		"dedupe_event_ids":                        {"true"},
		"approx_ttl_ms":                           {"50"},
		"active_decode_blocks_threshold":          {"0.001"},
		"active_prefill_tokens_threshold":         {"100"},
		"active_prefill_tokens_threshold_frac":    {"0.01"},
		"evidence":                                {"none", "full"},
		"queue_threshold":                         {"0"},
		"queue_policy":                            {"wspt", "lcfs"},
		"queue_timeout_ms":                        {"1"},
		"prefill_load_model":                      {"linear"},
		"prefill_tokens_per_ms":                   {"20"},
		"affinity.mode":                           {"hard", "soft"},
		"affinity.ttl_ms":                         {"10"},
		"affinity.key":                            {"sibling_group"},
		"sglang.cache_threshold":                  {"0.9"},
		"sglang.balance_abs_threshold":            {"0"},
		"sglang.balance_rel_threshold":            {"1"},
		"sglang.eviction_interval_ms":             {"1000"},
		"sglang.max_tree_size":                    {"10"},
		"llmd.prefix_cache_scorer_weight":         {"0"},
		"llmd.queue_scorer_weight":                {"10"},
		"llmd.kv_cache_utilization_scorer_weight": {"0"},
	}
	// Some values need their partner flags to be a valid config.
	partners := map[string][]string{
		"queue_policy":                            {"--queue-threshold", "0.5"},
		"queue_timeout_ms":                        {"--queue-threshold", "0"},
		"prefill_load_model":                      {"--prefill-tokens-per-ms", "20"},
		"prefill_tokens_per_ms":                   {"--prefill-load-model", "linear"},
		"affinity.ttl_ms":                         {"--affinity-mode", "hard"},
		"affinity.key":                            {"--affinity-mode", "hard"},
		"approx_ttl_ms":                           {"--kv-events=false"},
		"encoder_cuda_to_cpu_ratio":               {"--policy", "device_aware_weighted"},
		"sglang.cache_threshold":                  {"--policy", "sglang_cache_aware"},
		"sglang.balance_abs_threshold":            {"--policy", "sglang_cache_aware"},
		"sglang.balance_rel_threshold":            {"--policy", "sglang_cache_aware"},
		"sglang.eviction_interval_ms":             {"--policy", "sglang_cache_aware", "--sglang-max-tree-size", "5"},
		"sglang.max_tree_size":                    {"--policy", "sglang_cache_aware", "--sglang-eviction-interval-ms", "500"},
		"llmd.prefix_cache_scorer_weight":         {"--policy", "llmd"},
		"llmd.queue_scorer_weight":                {"--policy", "llmd"},
		"llmd.kv_cache_utilization_scorer_weight": {"--policy", "llmd"},
	}
	var cases [][]string
	for _, cf := range configFlags {
		vs, ok := values[cf.key]
		if !ok {
			t.Errorf("no case for --%s", flagName(cf.key))
		}
		for _, v := range vs {
			cases = append(cases, append([]string{"--" + flagName(cf.key) + "=" + v}, partners[cf.key]...))
		}
	}
	for _, d := range dynamoFlags {
		if d.refuse != "" {
			continue
		}
		v := map[string]string{"float": "2", "uint": "256", "bool": "true", "string": "round-robin"}[d.kind]
		switch d.name {
		case "router-queue-policy":
			v = "wspt"
		case "router-prefill-load-model":
			v = "none"
		case "router-session-affinity-mode":
			v = "soft"
		case "router-approximate-cache-policy":
			v = "ttl"
		case "router-host-cache-hit-weight", "router-disk-cache-hit-weight":
			v = "0.5" // a fraction
		case "router-track-output-blocks", "track-output-blocks":
			v = "false" // Dynamo's default; true is refused
		}
		cases = append(cases, []string{"--" + d.name + "=" + v})
	}
	dir := t.TempDir()
	for _, args := range cases {
		report := filepath.Join(dir, "r.json")
		_, stderr, code := run(t, "", append([]string{"replay", "--sessions", "20", "--workers", "2", "-q", "--report", report}, args...)...)
		if code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
			continue
		}
		m := readReport(t, report).Deterministic.Policies[0]
		if m.Completed+m.Rejected != m.Requests {
			t.Errorf("%v: %d completed and %d rejected of %d", args, m.Completed, m.Rejected, m.Requests)
		}
		if strings.HasPrefix(args[0], "--active-") && m.RejectedByReason["all_workers_busy"] == 0 {
			t.Errorf("%v: no request was turned away as busy", args)
		}
		if strings.HasPrefix(args[0], "--kv-events=false") && (m.EventsApplied != 0 || m.Mode != "approximate") {
			t.Errorf("%v: approximate mode applied %d events (mode %s)", args, m.EventsApplied, m.Mode)
		}
	}
}

// TestDynamoFlagNames: Dynamo's names set the same keys, converted; one
// without an equivalent is refused naming what to use; a key set by both
// names is refused.
func TestDynamoFlagNames(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	args := []string{"replay", "--sessions", "5", "-q", "--report", report, "--router-temperature", "0.25", "--kv-cache-block-size", "64",
		"--no-kv-events", "--router-ttl-secs", "3", "--kv-overlap-score-weight", "0", "--router-mode", "least-loaded",
		"--router-session-affinity-ttl-secs", "2"}
	if _, stderr, code := run(t, "", args...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	c := readReport(t, report).Deterministic.Router
	if c.Temperature != 0.25 || c.BlockSize != 64 || c.KVEvents || c.ApproxTTLMS != 3000 || c.PrefillLoadScale != 0 ||
		c.OverlapScoreCredit != 0 || c.Policy != "least_loaded" || c.Affinity.TTLMS != 2000 || c.Affinity.Mode != "hard" {
		t.Fatalf("config %+v", c)
	}
	for args, want := range map[string]string{
		"--busy-threshold 0.9":                               "use those",
		"--router-replica-sync":                              "is replay's --router-replicas N",
		"--temperature 0.1 --router-temperature 0.2":         "--temperature and --router-temperature both set temperature",
		"--kv-overlap-score-weight 2 --prefill-load-scale 1": "both set prefill_load_scale",
	} {
		if _, stderr, code := run(t, "", append([]string{"replay", "--sessions", "5"}, strings.Fields(args)...)...); code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("%s: exit %d: %s", args, code, stderr)
		}
	}
}

// TestReplayRefusesBeforeRunning: what the run would ignore, could not
// write, or would write over is refused before anything runs, naming the
// flag; nothing is written.
func TestReplayRefusesBeforeRunning(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	os.WriteFile(trace, []byte(`{"timestamp":0,"input_length":10,"output_length":1}`+"\n"), 0o644)
	defaults := filepath.Join(dir, "wd.json")
	os.WriteFile(defaults, []byte(`{"worker_defaults":{"dp_size":4}}`), 0o644)
	os.Mkdir(filepath.Join(dir, "folder.json"), 0o755)
	decodeDirect := filepath.Join(dir, "decode-direct.json")
	os.WriteFile(decodeDirect, []byte(`{"worker_selection":{"decode":"pin","instances":[{"name":"pin","type":"direct"}]}}`), 0o644)
	out := filepath.Join(dir, "out.jsonl")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", defaults}, "config worker_defaults: replay announces its own workers"},
		{[]string{"--compare", "--policy", "random"}, "--policy picks one policy"},
		{[]string{"--policies", "kv", "--router-mode", "random"}, "--policy picks one policy"},
		{[]string{"--report", filepath.Join(dir, "folder.json")}, "is a folder"},
		// direct sends a request to the worker it names; a trace names none.
		{[]string{"--policy", "direct"}, "contender direct: policy direct needs each request's worker_id, which replay traces do not carry; use --contender NAME=kv:... or another policy"},
		{[]string{"--router-mode", "direct"}, "contender direct: policy direct needs each request's worker_id"},
		{[]string{"--contender", "pin=direct", "--contender", "kv"}, "contender pin: policy direct needs each request's worker_id"},
		{[]string{"--policies", "kv,direct"}, "contender direct: policy direct needs each request's worker_id"},
		{[]string{"--config", decodeDirect, "--prefill-workers", "1", "--decode-workers", "1"}, "contender kv places decode requests with a worker_selection instance of type direct: policy direct needs each request's worker_id"},
		{[]string{"--emit-commands", "-"}, "--emit-commands -: give a file"},
		{[]string{"--emit-commands", out, "--emit-responses", filepath.Join(dir, ".", "out.jsonl")}, "is also --emit-commands"},
		{[]string{trace, "--emit-responses", trace}, "is also the trace"},
		{[]string{trace, "--report", linkTo(t, trace, "link.json")}, "is also the trace"},
		{[]string{trace, "--emit-commands", hardLinkTo(t, trace, "hard.jsonl")}, "is also the trace"},
		{[]string{"--sessions", "300000"}, "--sessions 300000: at most"},
		{[]string{"--engine", "vllm"}, `--engine "vllm": expected iteration or simple`},
		{[]string{"--dp-size", "0"}, "--dp-size 0: expected 1 to"},
		{[]string{"--dp-size", "1025"}, "--dp-size 1025: expected 1 to 1024"},
		{[]string{"--goodput", ""}, "--goodput is given no level"},
		{[]string{"-", "--engine-profile", "/dev/stdin"}, "--engine-profile /dev/stdin is stdin, from which the trace (-) is read"},
		{[]string{"-", "--config", "/dev/stdin"}, "--config /dev/stdin is stdin, from which the trace (-) is read"},
		{[]string{"--prefill-workers", "2"}, "--prefill-workers and --decode-workers go together"},
		{[]string{"--prefill-workers", "2", "--decode-workers", "2", "--workers", "4"}, "replace --workers"},
		{[]string{"--prefill-workers", "2", "--decode-workers", "2", "--engine", "simple"}, "disaggregated serving runs the iteration engine"},
		{[]string{"--kv-transfer-gbps", "10"}, "give --prefill-workers and --decode-workers too"},
		{[]string{"--replica-sync-rate", "0.5"}, "give --router-replicas too"},
		{[]string{"--router-replicas", "2", "--replica-assign", "hash"}, `--replica-assign "hash"`},
		{[]string{"--router-replicas", "2", "--emit-commands", out}, "write one router's stream"},
		{[]string{"--worker-max-num-batched-tokens", "0"}, "a step must compute at least one token"},
		{[]string{"--engine", "simple", "--engine-profile", defaults}, "--engine-profile times the iteration engine"},
		{[]string{"--worker-decode-ms-per-token", "3"}, "--worker-decode-ms-per-token sets the simple engine's speed"},
		{[]string{"--engine-profile", defaults}, `is not a profile key`},
		{[]string{"--input-tokens", "1", "--output-tokens", "1", "--request-count", "1000000000"}, "--request-count 1000000000: expected 1 to"},
		{[]string{"--input-tokens", "1099511627776", "--output-tokens", "1", "--request-count", "1"}, "input tokens in all"},
	} {
		args := append([]string{"replay", "-q"}, c.args...)
		stdout, stderr, code := run(t, "", args...)
		if code != 2 || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %s", c.args, code, stdout, stderr)
		}
	}
	if data, _ := os.ReadFile(trace); !strings.HasPrefix(string(data), `{"timestamp":0`) {
		t.Fatal("the trace was written over")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatal("a refused replay wrote its stream")
	}
}

// TestReplayDirectRefusedOnlyWhereItPlaces: an instance of type direct
// that no role of the cluster places with runs (aggregated workers place
// with worker_selection.default, not .decode); policy direct itself is
// refused (TestReplayRefusesBeforeRunning).
func TestReplayDirectRefusedOnlyWhereItPlaces(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "decode-direct.json")
	os.WriteFile(cfg, []byte(`{"worker_selection":{"decode":"pin","instances":[{"name":"pin","type":"direct"}]}}`), 0o644)
	if _, stderr, code := run(t, "", "replay", "--sessions", "3", "-q", "--config", cfg); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// TestReplayTimeOverflow: a trace whose delays take simulated time past the
// router's clock stops with a message saying so, and the streams written
// so far are kept, to see how it came.
func TestReplayTimeOverflow(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "chain.jsonl")
	line := `{"input_length":100,"output_length":1,"hash_ids":[1],"session_id":"a",`
	os.WriteFile(trace, []byte(line+`"timestamp":4000000000000000}`+"\n"+line+`"delay_ms":4000000000000000}`+"\n"+
		line+`"delay_ms":4000000000000000}`+"\n"+line+`"delay_ms":4000000000000000}`+"\n"), 0o644)
	cmds := filepath.Join(dir, "c.jsonl")
	_, stderr, code := run(t, "", "replay", trace, "-q", "--emit-commands", cmds)
	if code != 1 || !strings.Contains(stderr, "past the router's clock") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if data, _ := os.ReadFile(cmds); !strings.Contains(string(data), `"op":"place"`) {
		t.Fatalf("the stream so far was lost: %q", data)
	}
}

// TestAffinityTTLAliasKeepsTheFilesMode: Dynamo's TTL flag turns affinity on
// (hard) only where nothing else set a mode.
func TestAffinityTTLAliasKeepsTheFilesMode(t *testing.T) {
	dir := t.TempDir()
	soft := filepath.Join(dir, "soft.json")
	os.WriteFile(soft, []byte(`{"affinity":{"mode":"soft"}}`), 0o644)
	report := filepath.Join(dir, "r.json")
	for cfg, want := range map[string]string{soft: "soft", "": "hard"} {
		args := []string{"replay", "--sessions", "5", "-q", "--report", report, "--router-session-affinity-ttl-secs", "5"}
		if cfg != "" {
			args = append(args, "--config", cfg)
		}
		if _, stderr, code := run(t, "", args...); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if a := readReport(t, report).Deterministic.Router.Affinity; a.Mode != protocol.AffinityMode(want) || a.TTLMS != 5000 {
			t.Errorf("config %q: affinity %+v, want mode %s", cfg, a, want)
		}
	}
}

// TestReplayWorkloadFlags: a synthetic workload with shared prefixes runs
// and says so in the report; the closed loop and the speed-up reach the
// run (they change its simulated time) and are recorded.
func TestReplayWorkloadFlags(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	replayReport := func(args ...string) *replay.Report {
		t.Helper()
		if _, stderr, code := run(t, "", append([]string{"replay", "-q", "--report", report}, args...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		return readReport(t, report)
	}
	syn := []string{"--input-tokens", "2048", "--output-tokens", "4", "--request-count", "40", "--shared-prefix-ratio", "0.5", "--num-prefix-groups", "2"}
	d := replayReport(append(syn, "--arrival-interval-ms", "10")...).Deterministic
	m := d.Policies[0]
	if d.Trace.Source != "synthetic" || d.Trace.Requests != 40 || d.Workload.Synthetic == nil || d.Workload.BuiltinSessions != 0 ||
		m.PrefixHitRate < 0.25 || m.Completed != 40 {
		t.Fatalf("synthetic: %+v %+v, hit rate %v", d.Trace, d.Workload, m.PrefixHitRate)
	}
	open := replayReport("--sessions", "20").Deterministic
	closed := replayReport("--sessions", "20", "--replay-concurrency", "1").Deterministic
	fast := replayReport("--sessions", "20", "--arrival-speedup-ratio", "4").Deterministic
	if closed.Workload.ReplayConcurrency != 1 || closed.Policies[0].Duration <= open.Policies[0].Duration {
		t.Fatalf("one session at a time takes %v s, open loop %v s", closed.Policies[0].Duration, open.Policies[0].Duration)
	}
	if fast.Workload.ArrivalSpeedupRatio != 4 || fast.Policies[0].Duration >= open.Policies[0].Duration {
		t.Fatalf("four times the arrival rate takes %v s, against %v s", fast.Policies[0].Duration, open.Policies[0].Duration)
	}
}

// linkTo makes a symbolic link to target beside it.
func linkTo(t *testing.T, target, name string) string {
	link := filepath.Join(filepath.Dir(target), name)
	if err := os.Symlink(target, link); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	return link
}

// hardLinkTo makes a hard link to target beside it.
func hardLinkTo(t *testing.T, target, name string) string {
	link := filepath.Join(filepath.Dir(target), name)
	if err := os.Link(target, link); err != nil {
		t.Skip("no hard links here:", err)
	}
	return link
}

// TestReplayDisaggregated: the shared trace replays on prefill and decode
// pools; the report has both pools; each role's stream, piped into the
// binary with no flags, gives back its responses byte for byte.
func TestReplayDisaggregated(t *testing.T) {
	dir := t.TempDir()
	cmds, resps, report := filepath.Join(dir, "c.jsonl"), filepath.Join(dir, "r.jsonl"), filepath.Join(dir, "rep.json")
	stdout, stderr, code := run(t, "", "replay", "--sessions", "40", "-q", "--prefill-workers", "2", "--decode-workers", "3",
		"--emit-commands", cmds, "--emit-responses", resps, "--report", report)
	if code != 0 || !strings.Contains(stdout, "2 prefill and 3 decode workers") {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	m := readReport(t, report).Deterministic.Policies[0]
	if len(m.Pools) != 2 || len(m.Pools[1].WorkerRequests) != 3 || m.Completed != m.Requests {
		t.Fatalf("pools %+v, completed %d of %d", m.Pools, m.Completed, m.Requests)
	}
	for _, role := range []string{"prefill", "decode"} {
		stream, _ := os.ReadFile(cmds + "." + role)
		want, _ := os.ReadFile(resps + "." + role)
		got, _, code := run(t, string(stream))
		if code != 0 || got != string(want) || len(want) == 0 {
			t.Fatalf("the %s stream does not replay alone (exit %d)", role, code)
		}
	}
}

// TestReplayRouterReplicas: several replicas replay to the end, and the
// report sets one router's figures beside theirs.
func TestReplayRouterReplicas(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.json")
	stdout, stderr, code := run(t, "", "replay", "--sessions", "40", "-q", "--router-replicas", "3", "--replica-assign", "session",
		"--replica-sync-delay-ms", "5", "--replica-sync-rate", "0.5", "--report", report)
	if code != 0 || !strings.Contains(stdout, "one router: P99 TTFT (ms)") || !strings.Contains(stdout, "3 router replicas") {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	d := readReport(t, report).Deterministic
	if m := d.Policies[0]; m.OneRouter == nil || m.Completed != m.Requests || d.Replicas.Count != 3 {
		t.Fatalf("one router %+v, completed %d of %d, replicas %+v", m.OneRouter, m.Completed, m.Requests, d.Replicas)
	}
}

// TestRequestsOut: --requests-out writes one row per request per policy,
// led by contender and repeat, under the documented header; CSV and JSONL
// hold the same values; each policy's mean TTFT and completed count come
// back exactly from its rows; a second run writes the same bytes. It
// catches a renamed or reordered column, rows of one policy written under
// another, numbers that do not read back to the report's bits, and
// anything run-dependent in the rows.
func TestRequestsOut(t *testing.T) {
	dir := t.TempDir()
	csvPath, jsonlPath, report := filepath.Join(dir, "rows.csv"), filepath.Join(dir, "rows.jsonl"), filepath.Join(dir, "rep.json")
	args := []string{"replay", "--compare", "--sessions", "30", "-q", "--worker-kv-blocks", "40", "--report", report}
	if _, stderr, code := run(t, "", append(args, "--requests-out", csvPath)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	first, _ := os.ReadFile(csvPath)
	if _, stderr, code := run(t, "", append(args, "--requests-out", jsonlPath)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if _, stderr, code := run(t, "", append(args, "--requests-out", csvPath)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if again, _ := os.ReadFile(csvPath); !bytes.Equal(first, again) {
		t.Fatal("two runs wrote different rows")
	}
	rows, err := csv.NewReader(bytes.NewReader(first)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	header := "contender,repeat,request_id,session_id,arrival_ms,pool,worker_id,dp_rank,prefill_worker_id,prefill_dp_rank," +
		"input_tokens,cached_tokens,output_tokens,queue_wait_ms,ttft_ms,tpot_ms,e2el_ms,preemptions,rejection_reason,play_id,conversation_id,request_kind"
	if got := strings.Join(rows[0], ","); got != header {
		t.Fatalf("header %s, want %s", got, header)
	}
	rep := readReport(t, report)
	ms := rep.Deterministic.Policies
	n := ms[0].Requests
	if len(rows) != 1+len(ms)*n {
		t.Fatalf("%d rows for %d policies of %d requests", len(rows)-1, len(ms), n)
	}
	lines := bytes.Split(bytes.TrimSuffix(readFile(t, jsonlPath), []byte("\n")), []byte("\n"))
	if len(lines) != len(rows)-1 {
		t.Fatalf("%d JSON lines, %d CSV rows", len(lines), len(rows)-1)
	}
	for p, m := range ms {
		sum, completed := 0.0, 0
		for i, row := range rows[1+p*n : 1+(p+1)*n] {
			if row[0] != m.Policy || row[1] != "0" {
				t.Fatalf("row %d of %s is led by %s, repeat %s", i, m.Policy, row[0], row[1])
			}
			var obj map[string]any
			dec := json.NewDecoder(bytes.NewReader(lines[p*n+i]))
			dec.UseNumber() // numbers as written
			if err := dec.Decode(&obj); err != nil {
				t.Fatal(err)
			}
			for c, name := range rows[0] {
				if got := fmt.Sprint(obj[name]); got != row[c] {
					t.Fatalf("%s row %d: %s is %s in CSV, %s in JSONL", m.Policy, i, name, row[c], got)
				}
			}
			if row[18] == "" {
				ttft, err := strconv.ParseFloat(row[14], 64)
				if err != nil {
					t.Fatal(err)
				}
				sum += ttft
				completed++
			}
		}
		if completed != m.Completed || sum/float64(completed) != m.MeanTTFTMS {
			t.Errorf("%s: rows give %d completed, mean TTFT %v; the report %d, %v", m.Policy, completed, sum/float64(completed), m.Completed, m.MeanTTFTMS)
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestContenderRefusals: a contender that would crash or mislead is
// refused before anything runs, naming it: a key a flag sets for all, the
// workers replay announces, a repeated name, a baseline not run. Catches
// each check dropped (worker_defaults crashed the run).
func TestContenderRefusals(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--contender", "k=kv:prefill_load_scale=2", "--prefill-load-scale", "3"}, "sets prefill_load_scale, which --prefill-load-scale sets for every contender"},
		{[]string{"--contender", "k=kv:worker_defaults.dp_size=2"}, "replay announces its own workers"},
		{[]string{"--policies", "kv", "--contender", "kv"}, "a contender is already named kv"},
		{[]string{"--contender", "a=kv", "--contender", "b=random", "--baseline", "c"}, `--baseline "c": not a contender of this run (a, b)`},
	} {
		dir := t.TempDir()
		report := filepath.Join(dir, "r.json")
		_, stderr, code := run(t, "", append([]string{"replay", "--sessions", "3", "-q", "--report", report}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, %s; want exit 2 and %q", c.args, code, stderr, c.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%q left %d files", c.args, len(entries))
		}
	}
}

// TestReplayDeviceAwareWeightedIsLeastLoaded: replay announces no
// device_type, so every worker is an accelerator, one device class, whose
// least loaded worker Dynamo's picker takes: device_aware_weighted places
// as least_loaded does, request for request, as docs/replay.md says. A
// picker that with one class drew its ties otherwise, or weighed the empty
// CPU class against it, differs here.
func TestReplayDeviceAwareWeightedIsLeastLoaded(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.json")
	if _, stderr, code := run(t, "", "replay", "--sessions", "40", "--workers", "4", "-q", "--report", report,
		"--policies", "least_loaded,device_aware_weighted", "--encoder-cuda-to-cpu-ratio", "1"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	p := readReport(t, report).Deterministic.Policies
	if len(p) != 2 || p[1].Policy != "device_aware_weighted" {
		t.Fatalf("policies %+v", p)
	}
	if d := cmp.Diff(p[0], p[1], cmpopts.IgnoreFields(replay.Metrics{}, "Policy", "Contender")); d != "" {
		t.Errorf("least_loaded (-) and device_aware_weighted (+) differ:\n%s", d)
	}
}

// TestCPUProfile: serve's and replay's --cpuprofile each write a profile
// pprof reads (a gzipped protobuf), and a bad path is exit 2 before
// anything runs.
func TestCPUProfile(t *testing.T) {
	dir := t.TempDir()
	for name, args := range map[string][]string{
		"serve":  {"--cpuprofile", filepath.Join(dir, "serve.prof")},
		"replay": {"replay", "--sessions", "5", "-q", "--cpuprofile", filepath.Join(dir, "replay.prof")},
	} {
		if _, stderr, code := run(t, `{"op":"worker_ready","worker_id":1}`+"\n", args...); code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, stderr)
		}
		data, err := os.ReadFile(args[len(args)-1])
		if err != nil || len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
			t.Errorf("%s: not a gzipped profile (%v, %d bytes)", name, err, len(data))
		}
	}
	if _, stderr, code := run(t, "", "replay", "--sessions", "5", "-q", "--cpuprofile", filepath.Join(dir, "no", "such", "dir", "p")); code != 2 || !strings.Contains(stderr, "--cpuprofile") {
		t.Errorf("a bad profile path: exit %d, %s", code, stderr)
	}
}

// TestReplayAgenticWorkload: --workload agentic runs the built-in agentic
// workload of --plays plays (with --subagent-context fresh, fresh-context
// subagents), said so in the table's first line and the report; its flags are refused where they would be ignored, and the chat
// workload's where the agentic one runs. (Catches --plays not reaching the
// generator, the chat workload run instead, and a flag silently dropped.)
func TestReplayAgenticWorkload(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.json")
	stdout, stderr, code := run(t, "", "replay", "--workload", "agentic", "--plays", "4", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "the built-in agentic workload (4 plays)") || !strings.Contains(stdout, "agent plays") {
		t.Errorf("the table:\n%s", stdout)
	}
	rep := readReport(t, report)
	if a := rep.Deterministic.Policies[0].Agentic; rep.Deterministic.Workload.BuiltinPlays != 4 || a == nil || a.Plays != 4 {
		t.Errorf("workload %+v, agentic figures %+v; want 4 plays", rep.Deterministic.Workload, a)
	}
	stdout, stderr, code = run(t, "", "replay", "--workload", "agentic", "--plays", "4", "--subagent-context", "fresh", "--report", report)
	if code != 0 || !strings.Contains(stdout, "(4 plays, fresh-context subagents)") || !readReport(t, report).Deterministic.Workload.BuiltinFreshSubagents {
		t.Errorf("--subagent-context fresh: exit %d: %s\n%s", code, stderr, stdout)
	}
	for args, want := range map[string]string{
		"--plays 5":                                    "--plays and --subagent-context shape the built-in agentic workload: give --workload agentic too",
		"--workload agentic --sessions 5":              "--sessions and --builtin-lora-adapters shape the built-in chat workload",
		"--workload agentic --builtin-lora-adapters 2": "--sessions and --builtin-lora-adapters shape the built-in chat workload",
		"--workload agentic --input-tokens 9 --output-tokens 2 --request-count 3": "--workload, --plays and --subagent-context pick and shape the built-in workload",
		"--workload agentic --plays 5001":                                         "--plays 5001: expected 1 to 5000",
		"--subagent-context fresh":                                                "give --workload agentic too",
		"--workload agentic --subagent-context forked":                            `--subagent-context "forked": expected fork or fresh`,
		"--workload Agentic":                                                      `--workload "Agentic": expected chat or agentic`,
	} {
		if stdout, stderr, code := run(t, "", append([]string{"replay"}, strings.Fields(args)...)...); code != 2 || !strings.Contains(stderr, want) || stdout != "" {
			t.Errorf("%s: exit %d, stdout %q: %s", args, code, stdout, stderr)
		}
	}
}

// TestReplayBenchmarkDuration: --benchmark-duration recycles a closed
// loop's plays, more requests completing than one pass holds, said so in
// the table's first line and the report, and no baseline measured
// against; it is refused without a closed loop and with what pairs runs
// request by request. (Catches the flag not reaching the run, a default
// baseline paired over different requests, a bound not checked.)
func TestReplayBenchmarkDuration(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.json")
	stdout, stderr, code := run(t, "", "replay", "--workload", "agentic", "--plays", "3", "--replay-concurrency", "2", "--benchmark-duration", "900",
		"--policies", "kv,round_robin", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rep := readReport(t, report)
	if !strings.Contains(stdout, "a pass, recycled for 900 s by 2 lanes") || rep.Deterministic.Workload.BenchmarkDurationS != 900 ||
		rep.Deterministic.Baseline != "" || len(rep.Deterministic.Verdicts) != 0 {
		t.Fatalf("the table:\n%s\nbaseline %q, verdicts %v", stdout, rep.Deterministic.Baseline, rep.Deterministic.Verdicts)
	}
	if m := rep.Deterministic.Policies[0]; m.Agentic.Plays <= 3 || m.Requests <= rep.Deterministic.Trace.Requests {
		t.Errorf("%d plays, %d requests: none recycled (a pass is %d requests)", m.Agentic.Plays, m.Requests, rep.Deterministic.Trace.Requests)
	}
	for args, want := range map[string]string{
		"--benchmark-duration 10": "give --replay-concurrency N too",
		"--replay-concurrency 2 --benchmark-duration 10 --compare --baseline kv": "drop --baseline, --robustness and --capacity",
		"--replay-concurrency 2 --benchmark-duration 10 --robustness":            "drop --baseline, --robustness and --capacity",
		"--replay-concurrency 2 --benchmark-duration NaN":                        "--benchmark-duration NaN: expected seconds above 0",
		"--replay-concurrency 2 --benchmark-duration 1e300":                      "--benchmark-duration 1e+300: expected seconds above 0",
	} {
		if stdout, stderr, code := run(t, "", append([]string{"replay", "--sessions", "4"}, strings.Fields(args)...)...); code != 2 || !strings.Contains(stderr, want) || stdout != "" {
			t.Errorf("%s: exit %d, stdout %q: %s", args, code, stdout, stderr)
		}
	}
}
