package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
)

// fakeRun writes a report whose figures follow from the point's flags, as
// a replay's would, and counts the points it ran.
type fakeRun struct {
	mu   sync.Mutex
	runs map[string]int
	fail string // the ID of a point that fails
}

func (f *fakeRun) run(_ context.Context, p *Point, path string) error {
	f.mu.Lock()
	if f.runs == nil {
		f.runs = map[string]int{}
	}
	f.runs[p.ID]++
	f.mu.Unlock()
	if p.ID == f.fail {
		return errors.New("the replay broke") // and, as RunPoint promises, wrote nothing
	}
	var n int
	fmt.Sscanf(p.Flags[len(p.Flags)-1], "--workers=%d", &n)
	rep := replay.Report{SchemaVersion: protocol.ReportSchemaVersion, Deterministic: replay.Deterministic{
		Policies: []replay.Metrics{{Policy: "kv", PrefixHitRate: float64(n) / 20, P99TTFTMS: float64(100 - n), WorkerShareCV: float64(n) / 100}}}}
	data, _ := json.Marshal(rep)
	return os.WriteFile(path, data, 0o644)
}

func testPlan(t *testing.T, n int) *Plan {
	workers := make([]string, n)
	for i := range workers {
		workers[i] = fmt.Sprint(i + 1)
	}
	s := mustParse(t, `{"workloads":["builtin"],"grid":[{"workers":[`+strings.Join(workers, ",")+`]}],"objective":{"minimize":"p99_ttft_ms","subject_to":{"worker_share_cv":{"max":0.05}}}}`)
	points, err := s.Points()
	if err != nil {
		t.Fatal(err)
	}
	return &Plan{Objective: s.Objective, Points: points}
}

// TestRunAnyPoolSizeAndResume: the table does not depend on how many
// points ran at once; an interrupted sweep leaves only whole reports, and
// run again replays only the points without one.
func TestRunAnyPoolSizeAndResume(t *testing.T) {
	plan := testPlan(t, 12)
	var tables []TableResult
	for _, jobs := range []int{1, 5} {
		dir := t.TempDir()
		f := &fakeRun{}
		ran, resumed, err := Run(context.Background(), plan, Options{Out: dir, Jobs: jobs, Shard: All}, f.run)
		if err != nil || ran != 12 || resumed != 0 {
			t.Fatalf("jobs %d: ran %d, resumed %d: %v", jobs, ran, resumed, err)
		}
		tab, err := Merge(dir)
		if err != nil {
			t.Fatal(err)
		}
		tables = append(tables, tab.Deterministic)
	}
	if d := cmp.Diff(tables[0], tables[1], cmp.AllowUnexported(Point{})); d != "" {
		t.Fatalf("--jobs 1 and 5 differ:\n%s", d)
	}

	dir := t.TempDir()
	f := &fakeRun{fail: plan.Points[5].ID}
	_, _, err := Run(context.Background(), plan, Options{Out: dir, Jobs: 1, Shard: All}, f.run)
	var pe *PointError
	if !errors.As(err, &pe) || pe.Point.ID != plan.Points[5].ID || !strings.Contains(err.Error(), "--workers=6") {
		t.Fatalf("the failing point is not named: %v", err)
	}
	files, _ := os.ReadDir(filepath.Join(dir, PointsDir))
	if len(files) != 5 {
		t.Fatalf("after the failure at point 6 of 12 (one at a time): %d files, want the 5 whole reports", len(files))
	}
	if _, err := Merge(dir); err == nil || !strings.Contains(err.Error(), "7 of 12 points have no report yet") {
		t.Fatalf("merge of an unfinished sweep: %v", err)
	}
	f.fail = ""
	ran, resumed, err := Run(context.Background(), plan, Options{Out: dir, Jobs: 3, Shard: All}, f.run)
	if err != nil || ran != 7 || resumed != 5 {
		t.Fatalf("resumed: ran %d, found %d: %v", ran, resumed, err)
	}
	for _, p := range plan.Points {
		if f.runs[p.ID] != 1 && p.ID != plan.Points[5].ID {
			t.Errorf("point %s ran %d times", p.ID, f.runs[p.ID])
		}
	}
	tab, err := Merge(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(tables[0], tab.Deterministic, cmp.AllowUnexported(Point{})); d != "" {
		t.Fatalf("a resumed sweep differs:\n%s", d)
	}
	// Another sweep's plan in the same folder is refused.
	if _, _, err := Run(context.Background(), testPlan(t, 3), Options{Out: dir, Jobs: 1, Shard: All}, f.run); err == nil || !strings.Contains(err.Error(), "another sweep") {
		t.Fatalf("two sweeps in one folder: %v", err)
	}
	if _, err := Merge(dir, t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a sweep's folder") {
		t.Fatalf("merge of a folder that is no sweep's: %v", err)
	}
}

// TestShardsMerge: shards run into separate folders merge into the table
// of the whole sweep run at once.
func TestShardsMerge(t *testing.T) {
	plan := testPlan(t, 7)
	whole := t.TempDir()
	if _, _, err := Run(context.Background(), plan, Options{Out: whole, Jobs: 2, Shard: All}, (&fakeRun{}).run); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for i := 1; i <= 3; i++ {
		dirs = append(dirs, t.TempDir())
		ran, _, err := Run(context.Background(), plan, Options{Out: dirs[i-1], Jobs: 2, Shard: Shard{i, 3}}, (&fakeRun{}).run)
		if err != nil || ran != len(Shard{i, 3}.Of(plan.Points)) {
			t.Fatalf("shard %d/3: ran %d: %v", i, ran, err)
		}
	}
	a, err := Merge(whole)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Merge(dirs...)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(a.Deterministic, b.Deterministic, cmp.AllowUnexported(Point{})); d != "" {
		t.Fatalf("shards merged differ from the whole:\n%s", d)
	}
}

// TestStopEndsThePointsUnderWay: a sweep told to stop ends the points
// under way (a RunPoint returns early when its context ends), starts no
// more, and returns the context's error.
func TestStopEndsThePointsUnderWay(t *testing.T) {
	plan := testPlan(t, 4)
	dir := t.TempDir()
	ctx, stop := context.WithCancel(context.Background())
	started := make(chan struct{}, 4)
	var calls sync.WaitGroup
	slow := func(ctx context.Context, p *Point, path string) error {
		calls.Add(1)
		defer calls.Done()
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	result := make(chan error)
	go func() {
		_, _, err := Run(ctx, plan, Options{Out: dir, Jobs: 2, Shard: All}, slow)
		result <- err
	}()
	<-started
	<-started
	stop()
	if err := <-result; !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped: %v", err)
	}
	calls.Wait()
	if len(started) != 0 {
		t.Errorf("%d points started after the stop", len(started))
	}
	if files, _ := os.ReadDir(filepath.Join(dir, PointsDir)); len(files) != 0 {
		t.Errorf("a stopped sweep left %d files", len(files))
	}
}

// TestResumeReplaysWhatIsNotAWholeReport: a point's file counts as done
// only when it is that point's whole report; a file cut short, one of an
// older schema, of another policy or of another trace is replayed again,
// replacing it, and named to Redo.
func TestResumeReplaysWhatIsNotAWholeReport(t *testing.T) {
	plan := testPlan(t, 6)
	for i := range plan.Points {
		plan.Points[i].Policy = "kv"
	}
	dir := t.TempDir()
	if _, _, err := Run(context.Background(), plan, Options{Out: dir, Jobs: 2, Shard: All}, (&fakeRun{}).run); err != nil {
		t.Fatal(err)
	}
	path := func(i int) string { return filepath.Join(dir, PointsDir, plan.Points[i].ID+".json") }
	whole, _ := os.ReadFile(path(0))
	var rep replay.Report
	json.Unmarshal(whole, &rep)
	broken := map[int][]byte{1: whole[:len(whole)/2], 4: []byte("")}
	rep.SchemaVersion = protocol.ReportSchemaVersion - 1
	broken[2], _ = json.Marshal(rep)
	rep.SchemaVersion, rep.Deterministic.Policies[0].Policy = protocol.ReportSchemaVersion, "round_robin"
	broken[3], _ = json.Marshal(rep)
	rep.Deterministic.Policies[0].Policy, rep.Deterministic.Trace = "kv", replay.TraceInfo{Source: "file", SHA256: "ab"}
	broken[5], _ = json.Marshal(rep)
	for i, data := range broken {
		os.WriteFile(path(i), data, 0o644)
	}
	var named []string
	f := &fakeRun{}
	ran, resumed, err := Run(context.Background(), plan, Options{Out: dir, Jobs: 2, Shard: All,
		Redo: func(p string, why error) { named = append(named, p+": "+why.Error()) }}, f.run)
	if err != nil || ran != len(broken) || resumed != 1 {
		t.Fatalf("ran %d, found %d: %v", ran, resumed, err)
	}
	for i := range broken {
		if f.runs[plan.Points[i].ID] != 1 {
			t.Errorf("point %d, whose file was broken, ran %d times", i, f.runs[plan.Points[i].ID])
		}
		if !strings.Contains(strings.Join(named, "\n"), path(i)) {
			t.Errorf("Redo did not name %s: %q", path(i), named)
		}
	}
	if _, err := Merge(dir); err != nil {
		t.Fatalf("after the replays: %v", err)
	}
}

// TestAPlanIsRecognised: a folder whose plan.json was written over by
// another JSON object (a table, a report) is not a sweep's folder.
func TestAPlanIsRecognised(t *testing.T) {
	plan := testPlan(t, 2)
	dir := t.TempDir()
	if _, _, err := Run(context.Background(), plan, Options{Out: dir, Jobs: 1, Shard: All}, (&fakeRun{}).run); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{`{"schema_version":1,"deterministic":{},"run":[]}`, `{}`, `{"points":[]}`, `[]`} {
		os.WriteFile(filepath.Join(dir, PlanFile), []byte(other), 0o644)
		if _, err := Merge(dir); err == nil || !strings.Contains(err.Error(), "is not a sweep's plan") {
			t.Errorf("merge of a folder whose plan reads %s: %v", other, err)
		}
		if _, _, err := Run(context.Background(), plan, Options{Out: dir, Jobs: 1, Shard: All}, (&fakeRun{}).run); err == nil {
			t.Errorf("a sweep into a folder whose plan reads %s ran", other)
		}
	}
}

// TestObjectiveMayChange: a folder keeps its points, not its objective.
func TestObjectiveMayChange(t *testing.T) {
	plan := testPlan(t, 3)
	dir := t.TempDir()
	if _, _, err := Run(context.Background(), plan, Options{Out: dir, Jobs: 1, Shard: All}, (&fakeRun{}).run); err != nil {
		t.Fatal(err)
	}
	other := *plan
	other.Objective = Objective{Maximize: "prefix_hit_rate"}
	other.Description = "again"
	ran, resumed, err := Run(context.Background(), &other, Options{Out: dir, Jobs: 1, Shard: All}, (&fakeRun{}).run)
	if err != nil || ran != 0 || resumed != 3 {
		t.Fatalf("a new objective on the same points: ran %d, found %d: %v", ran, resumed, err)
	}
	tab, err := Merge(dir)
	if err != nil || tab.Deterministic.Description != "again" || tab.Deterministic.Objective.Maximize != "prefix_hit_rate" {
		t.Fatalf("the plan kept its old objective: %+v %v", tab.Deterministic.Objective, err)
	}
}

// TestLeftoversOfAKillAreIgnored: the temporary files a SIGKILL leaves
// (a half report, a half plan) are neither a point's report nor the plan:
// the sweep resumes and merges as if they were not there.
func TestLeftoversOfAKillAreIgnored(t *testing.T) {
	plan := testPlan(t, 3)
	dir := t.TempDir()
	if _, _, err := Run(context.Background(), plan, Options{Out: dir, Jobs: 1, Shard: All}, (&fakeRun{}).run); err != nil {
		t.Fatal(err)
	}
	for i, p := range plan.Points {
		os.Remove(filepath.Join(dir, PointsDir, p.ID+".json"))
		os.WriteFile(filepath.Join(dir, PointsDir, fmt.Sprintf(".%s.json.tmp-1-%08x", p.ID, i)), []byte(`{"half`), 0o644)
	}
	os.WriteFile(filepath.Join(dir, "."+PlanFile+".tmp-1-0000000a"), []byte(`{"half`), 0o644)
	f := &fakeRun{}
	ran, resumed, err := Run(context.Background(), plan, Options{Out: dir, Jobs: 2, Shard: All}, f.run)
	if err != nil || ran != 3 || resumed != 0 {
		t.Fatalf("ran %d, found %d: %v", ran, resumed, err)
	}
	if _, err := Merge(dir); err != nil {
		t.Fatal(err)
	}
}
