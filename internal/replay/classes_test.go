package replay

import (
	"bytes"
	"cmp"
	"encoding/json"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
)

// withClasses is cfg with the classes premium and regular, regular the
// default, neither with a threshold or a limit: every request takes the
// direct path, as without classes, so only the labels differ.
func withClasses(cfg protocol.Config) protocol.Config {
	cfg.DefaultPolicyClass = "regular"
	cfg.PolicyClasses = []protocol.PolicyClass{{Name: "premium", SLOMS: 600000, Quantum: 512}, {Name: "regular", SLOMS: 600000, Quantum: 128}}
	return cfg
}

// TestTraceClassesAreCheckedBeforeTheRun: a trace line naming a class that
// a contender's config does not have is refused as the trace is loaded, by
// its line and the contender, before anything runs; a contender without
// classes takes any name (Dynamo ignores it), and "" is the default class.
// Catches no check (the router's unknown_policy_class mid-run, with no
// line), a check against a contender without classes, a line counted
// without the comment and blank lines, and "" taken for a name.
func TestTraceClassesAreCheckedBeforeTheRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	trace := "# a comment\n" +
		`{"timestamp": 0, "input_length": 10, "output_length": 1, "policy_class": "premium"}` + "\n\n" +
		`{"timestamp": 1, "input_length": 10, "output_length": 1, "policy_class": ""}` + "\n" +
		`{"timestamp": 2, "input_length": 10, "output_length": 1, "policy_class": "gold"}` + "\n"
	if err := os.WriteFile(path, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	plain := routerConfig(protocol.PolicyKV)
	e := &Experiment{TracePath: path, MaxLineBytes: 1 << 20, Router: plain, Workload: Workload{ArrivalSpeedupRatio: 1},
		Contenders: []Contender{{Name: "kv", Router: plain}, {Name: "kv-classes", Router: withClasses(plain)}}}
	_, _, err := e.Load()
	want := `trace line 5: field "policy_class": contender kv-classes: "gold" is not one of the router's policy classes (premium, regular)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
	e.Contenders = e.Contenders[:1]
	reqs, _, err := e.Load()
	if err != nil {
		t.Fatalf("a contender without classes refused the trace: %v", err)
	}
	if got := []string{reqs[0].PolicyClass, reqs[1].PolicyClass, reqs[2].PolicyClass}; strings.Join(got, ",") != "premium,,gold" {
		t.Fatalf("classes read as %q", got)
	}
}

// TestRunRefusesAnUnknownClass: Run, given requests directly, refuses one
// whose class the config has not, naming it. Catches a class index of -1
// taken on (a panic, or a request counted in no class).
func TestRunRefusesAnUnknownClass(t *testing.T) {
	_, err := Run([]Request{{ID: "a", InputTokens: 10, OutputTokens: 1}, {ID: "b", InputTokens: 10, OutputTokens: 1, PolicyClass: "gold"}},
		Options{Cluster: cluster.Simple(1), Router: withClasses(routerConfig(protocol.PolicyKV))})
	if err == nil || !strings.Contains(err.Error(), `request b: field "policy_class": "gold" is not one of`) {
		t.Fatalf("got %v", err)
	}
}

// TestClassMetricsSplitTheRun: with classes, each class's figures are
// those of its requests (an unnamed one in the default class), in the
// config's order: its counts add up to the run's, its TTFT is its
// records', its goodput its share of the run's. A request the router
// could not place (role decode on aggregated workers) is rejected and not
// placed; one placed that no worker could hold (exceeds_kv_cache) is
// placed and rejected. Catches an unnamed request in no class or the
// first, classes in trace order, placed counted as completed or as
// requests, TTFT or goodput over the wrong requests.
func TestClassMetricsSplitTheRun(t *testing.T) {
	cc := iterCluster(40, 8, 4096, cluster.StepModel{BaseMS: 1, PerPrefillTokenMS: 0.01})
	router := withClasses(routerConfig(protocol.PolicyKV))
	router.BlockSize = cc.BlockSize
	classes := []string{"", "premium", "regular", "premium", "", "premium", "regular", ""}
	var trace []Request
	for i, c := range classes {
		trace = append(trace, Request{ID: string(rune('a' + i)), Arrival: float64(3 * i), InputTokens: uint64(20 + 10*i),
			OutputTokens: 3, PolicyClass: c})
	}
	trace[3].Role = protocol.RoleDecode // no decode worker: no_eligible_worker at its place
	trace[6].InputTokens = 1000         // more blocks than the worker has: exceeds_kv_cache once placed
	slo := SLO{TTFTMS: 5}
	res, err := Run(trace, Options{Cluster: cc, Router: router, Goodput: slo, Records: true})
	if err != nil {
		t.Fatal(err)
	}
	m := &res.Metrics
	if len(m.Classes) != 2 || m.Classes[0].Class != "premium" || m.Classes[1].Class != "regular" {
		t.Fatalf("classes %+v, want premium then regular (the config's order)", m.Classes)
	}
	premium, regular := &m.Classes[0], &m.Classes[1]
	for name, v := range map[string][2]int{
		"premium requests": {premium.Requests, 3}, "regular requests": {regular.Requests, 5},
		"premium placed": {premium.Placed, 2}, "regular placed": {regular.Placed, 5},
		"premium rejected": {premium.Rejected, 1}, "regular rejected": {regular.Rejected, 1},
		"premium no_eligible_worker": {premium.RejectedByReason[string(protocol.CodeNoEligibleWorker)], 1},
		"regular exceeds_kv_cache":   {regular.RejectedByReason[string(tooLongForCache)], 1},
		"completed":                  {premium.Completed + regular.Completed, m.Completed},
	} {
		if v[0] != v[1] {
			t.Errorf("%s: %d, want %d", name, v[0], v[1])
		}
	}
	recs := res.Records()
	for k, class := range []string{"premium", "regular"} {
		var ttft []sample
		good := 0
		for i := range recs {
			if c := cmp.Or(classes[i], "regular"); c != class || recs[i].Rejected != "" {
				continue
			}
			ttft = append(ttft, sample{recs[i].TTFTMS, 1})
			if slo.Meets(&recs[i]) {
				good++
			}
		}
		s, c := summarize(ttft), &m.Classes[k]
		if c.MeanTTFTMS != s.mean || c.P99TTFTMS != s.p99 || c.MeanTTFTMS == 0 {
			t.Errorf("%s: TTFT mean %v p99 %v, its records give %v and %v", class, c.MeanTTFTMS, c.P99TTFTMS, s.mean, s.p99)
		}
		if want := float64(good) / m.Duration; c.RequestGoodput == nil || *c.RequestGoodput != want {
			t.Errorf("%s: goodput %v, want %v", class, c.RequestGoodput, want)
		}
	}
	if sum := *premium.RequestGoodput + *regular.RequestGoodput; math.Abs(sum-*m.RequestGoodput) > 1e-9 {
		t.Errorf("the classes' goodput sums to %v, the run's is %v", sum, *m.RequestGoodput)
	}
}

// TestNoClassesNoClassFigures: without classes the report holds no class
// figures at all, so that a report of a config without them is the bytes
// it was before there were classes. Catches a synthetic "default" class
// reported, or the fields written empty rather than left out.
func TestNoClassesNoClassFigures(t *testing.T) {
	rep := runExperiment(t, experiment(10, 2, "", policy("kv", protocol.PolicyKV)))
	data, err := rep.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"classes"`, `"class_summary"`} {
		if bytes.Contains(data, []byte(key)) {
			t.Errorf("a report without classes holds %s", key)
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(table.String(), "class ") {
		t.Errorf("a table without classes has class rows:\n%s", table.String())
	}
}

// TestClassRowsInTheTable: the table has each class's rows, under the
// class's name, for the contenders whose config has it (empty for one
// without): with repeats, means and intervals from class_summary. Catches
// rows taken from the first contender only, a class-less contender given
// another's figures, and a summary missing from the report.
func TestClassRowsInTheTable(t *testing.T) {
	e := experiment(10, 2, "", policy("kv", protocol.PolicyKV), policy("round_robin", protocol.PolicyRoundRobin))
	e.Contenders[0].Router = withClasses(e.Contenders[0].Router)
	rep := runExperiment(t, e)
	d := &rep.Deterministic
	if len(d.Policies[0].Classes) != 2 || d.Policies[1].Classes != nil {
		t.Fatalf("classes: kv %+v, round_robin %+v", d.Policies[0].Classes, d.Policies[1].Classes)
	}
	var xs []float64
	for _, m := range d.Contenders[0].Repeats {
		if m.Classes[1].Requests != m.Requests { // every request is regular
			t.Fatalf("a repeat's regular requests %d of %d", m.Classes[1].Requests, m.Requests)
		}
		xs = append(xs, float64(m.Classes[1].Requests))
	}
	sum, want := d.Contenders[0].ClassSummary["regular"]["requests"], MeanInterval(xs)
	if sum.CI95 == nil || sum.Mean != want.Mean || *sum.CI95 != *want.CI95 {
		t.Fatalf("regular's summary %+v, its repeats give %+v", sum, want)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(table.String(), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "class regular: requests") {
			continue
		}
		cells := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "class regular: requests"))
		if want := meanCell("%.0f", sum); strings.Join(cells, " ") != want {
			t.Fatalf("row %q: want kv's %q and nothing for round_robin", line, want)
		}
		return
	}
	t.Fatalf("no class regular rows:\n%s", table.String())
}

// TestClassFiguresInTheReportJSON: a class's figures are in the report
// under their schema names, goodput null without levels. Catches a field
// renamed without the schema, and goodput written 0 when no level is set.
func TestClassFiguresInTheReportJSON(t *testing.T) {
	res, err := Run([]Request{{ID: "a", InputTokens: 10, OutputTokens: 1, PolicyClass: "premium"}},
		Options{Cluster: cluster.Simple(1), Router: withClasses(routerConfig(protocol.PolicyKV))})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(res.Metrics.Classes[0])
	if err != nil {
		t.Fatal(err)
	}
	want := `{"class":"premium","requests":1,"placed":1,"completed":1,"rejected":0,"rejected_by_reason":{},"mean_ttft_ms":0.5,"p99_ttft_ms":0.5,"request_goodput":null}`
	if string(data) != want {
		t.Fatalf("got  %s\nwant %s", data, want)
	}
}

// TestPlaceCarriesTheClass: the row's policy_class is on its place
// command, and a row without one sends none (a trace without classes sends
// what it always did). Catches the field dropped, or sent empty.
func TestPlaceCarriesTheClass(t *testing.T) {
	var cmds bytes.Buffer
	_, err := Run([]Request{{ID: "a", InputTokens: 10, OutputTokens: 1, PolicyClass: "premium"}, {ID: "b", Arrival: 1, InputTokens: 10, OutputTokens: 1}},
		Options{Cluster: cluster.Simple(1), Router: withClasses(routerConfig(protocol.PolicyKV)), Commands: &cmds})
	if err != nil {
		t.Fatal(err)
	}
	var places []string
	for _, line := range strings.Split(cmds.String(), "\n") {
		if strings.Contains(line, `"op":"place"`) {
			places = append(places, line)
		}
	}
	if len(places) != 2 || !strings.Contains(places[0], `"policy_class":"premium"`) || strings.Contains(places[1], "policy_class") {
		t.Fatalf("places:\n%s", strings.Join(places, "\n"))
	}
}

// TestPolicyClassRoundTrips: WriteMooncake writes a row's class as
// ReadMooncake reads it. Catches the class left out of the written line.
func TestPolicyClassRoundTrips(t *testing.T) {
	readsBack(t, []Request{{InputTokens: 10, OutputTokens: 1, PolicyClass: "premium"}, {Arrival: 1, InputTokens: 10, OutputTokens: 1}}, 512)
}

// TestClassRejectionsByReason: Dynamo's slo_rejection case (its
// tests/router/configs/policy_class/slo_rejection.yaml, research32 §10 C)
// through a replay, with a queue limit beside it. One worker; both classes
// are busy above 0 active prefill tokens (prefill_busy_threshold 0). A
// standard blocker of 4096 tokens goes direct (the worker is idle) and
// prefills for 204.8 ms; latency request a, at 1 ms, finds the worker busy
// and waits (deadline 1 + 50 ms); latency b, at 2 ms, finds latency's
// queue at its limit (1 request per worker, 1 worker: current 1 >= 1) and
// is refused, queue_rejected; a is past its deadline when the queue is
// next polled (by the blocker's prefill, or a wakeup at the deadline), so
// is refused, queue_deadline_exceeded; the standard request after it, at
// 300 ms, finds the worker idle. Needs the engine's flow control (classes,
// limits, slo_ms expiry). Catches a class's rejections counted in another
// class or placed, and a reason dropped.
func TestClassRejectionsByReason(t *testing.T) {
	router := routerConfig(protocol.PolicyKV)
	zero, one := uint64(0), uint64(1)
	router.DefaultPolicyClass = "standard"
	router.PolicyClasses = []protocol.PolicyClass{
		{Name: "standard", SLOMS: 30000, Quantum: 512, PrefillBusyThreshold: &zero},
		{Name: "latency", SLOMS: 50, Quantum: 512, PrefillBusyThreshold: &zero, RequestQueueLimitPerWorker: &one},
	}
	res, err := Run([]Request{
		{ID: "blocker", InputTokens: 4096, OutputTokens: 1},
		{ID: "a", Arrival: 1, InputTokens: 32, OutputTokens: 1, PolicyClass: "latency"},
		{ID: "b", Arrival: 2, InputTokens: 32, OutputTokens: 1, PolicyClass: "latency"},
		{ID: "after", Arrival: 300, InputTokens: 32, OutputTokens: 1, PolicyClass: "standard"},
	}, Options{Cluster: cluster.Simple(1), Router: router})
	if err != nil {
		t.Fatal(err)
	}
	standard, latency := res.Metrics.Classes[0], res.Metrics.Classes[1]
	if standard.Requests != 2 || standard.Completed != 2 || standard.Rejected != 0 {
		t.Errorf("standard: %+v, want both completed", standard)
	}
	want := map[string]int{string(protocol.CodeQueueRejected): 1, string(protocol.CodeQueueDeadlineExceeded): 1}
	if latency.Requests != 2 || latency.Placed != 0 || latency.Rejected != 2 || !maps.Equal(latency.RejectedByReason, want) {
		t.Errorf("latency: %+v, want none placed, rejected %v", latency, want)
	}
}
