package sweep

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/costtest"
)

func mustParse(t *testing.T, spec string) *Spec {
	t.Helper()
	s, err := Parse([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const objective = `"objective":{"minimize":"p99_ttft_ms"}`

// TestPointsExpansion: the spec's flags come first, each block's
// combinations in order with its last flag fastest, values as written, a
// comment key ignored; IDs are stable digests of workload and flags.
func TestPointsExpansion(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte("{}\n"), 0o644)
	s := mustParse(t, `{"workloads":["builtin","t.jsonl"],"flags":{"comment":"x","workers":8},
		"grid":[{"policy":"kv","prefill-load-scale":[1,0.50],"temperature":[0,"0.5"]},{"policy":["round_robin","llmd"]}],`+objective+`}`)
	s.dir = dir
	points, err := s.Points()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range points {
		got = append(got, p.Workload+": "+strings.Join(p.Flags, " "))
	}
	var want []string
	for _, w := range []string{"builtin", "t.jsonl"} {
		for _, v := range []string{
			"--policy=kv --prefill-load-scale=1 --temperature=0", "--policy=kv --prefill-load-scale=1 --temperature=0.5",
			"--policy=kv --prefill-load-scale=0.50 --temperature=0", "--policy=kv --prefill-load-scale=0.50 --temperature=0.5",
			"--policy=round_robin", "--policy=llmd"} {
			want = append(want, w+": --workers=8 "+v)
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("points (-want +got):\n%s", d)
	}
	if args := points[6].Args(); args[0] != filepath.Join(dir, "t.jsonl") || slices.Contains(points[0].Args(), "builtin") {
		t.Errorf("a trace is opened beside the spec, builtin is no argument: %q, %q", args, points[0].Args())
	}
	ids := map[string]bool{}
	for _, p := range points {
		ids[p.ID] = true
	}
	again, _ := s.Points()
	if len(ids) != len(points) || again[3].ID != points[3].ID || points[3].ID != pointID("builtin", "", points[3].Flags) {
		t.Errorf("IDs are not unique digests of the point: %d distinct of %d", len(ids), len(points))
	}
	// A point keeps its ID whatever else the spec holds: a report is found
	// again after the grid grew.
	grown := mustParse(t, `{"workloads":["builtin"],"flags":{"workers":8},"grid":[{"policy":["least_loaded","round_robin"]}],`+objective+`}`)
	gp, _ := grown.Points()
	if gp[1].ID != points[4].ID {
		t.Errorf("the same point got another ID in another spec: %s, %s", gp[1].ID, points[4].ID)
	}
	if p, _ := mustParse(t, `{"workloads":["builtin"],`+objective+`}`).Points(); len(p) != 1 || len(p[0].Flags) != 0 {
		t.Errorf("a spec without grid or flags is one plain point: %+v", p)
	}
	// A trace edited in place gives new points: its old reports are not
	// taken for the new trace's.
	os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte("{}\n{}\n"), 0o644)
	edited, _ := s.Points()
	if edited[6].ID == points[6].ID || edited[0].ID != points[0].ID || edited[6].TraceSHA256 == points[6].TraceSHA256 {
		t.Errorf("an edited trace kept its points' IDs: %s", edited[6].ID)
	}
}

// TestSpecRefusals: what a spec may not say is refused, naming it.
func TestSpecRefusals(t *testing.T) {
	for spec, want := range map[string]string{
		`{"workloads":["builtin"],"objective":{"minimize":"p99_ttft_ms"},"grids":[]}`:                           `unknown field "grids"`,
		`{"description":"a\ud800b","workloads":["builtin"],` + objective + `}`:                                  `byte 17: a string holds a lone surrogate escape (\ud800)`,
		`{"workloads":["\udc00.jsonl"],` + objective + `}`:                                                      `lone surrogate escape (\udc00)`,
		`{"workloads":["builtin"],"flags":{"policy":"\ud83d"},` + objective + `}`:                               `lone surrogate escape (\ud83d)`,
		"{\"description\":\"\xff\",\"workloads\":[\"builtin\"]," + objective + `}`:                              `byte 16: the spec is not UTF-8`,
		`{"workloads":[],` + objective + `}`:                                                                    `"workloads"`,
		`{"workloads":[""],` + objective + `}`:                                                                  `"workloads"[0]`,
		`{"workloads":["builtin"],"flags":{"report":"x.json"},` + objective + `}`:                               `flag "report": the sweep writes`,
		`{"workloads":["builtin"],"scenario":["workers"],"grid":[{"policy":["kv"]}],` + objective + `}`:         `"scenario"[0]: no grid block varies workers`,
		`{"workloads":["builtin"],"scenario":["--workers"],"grid":[{"workers":[4,8]}],` + objective + `}`:       `"scenario"[0]: "--workers": name a grid flag without its dashes`,
		`{"workloads":["builtin"],"scenario":["workers","workers"],"grid":[{"workers":[4]}],` + objective + `}`: `"scenario"[1]: workers is given twice`,
		`{"workloads":["builtin"],"grid":[{"policy":"kv","seed":[0,1]}],` + objective + `}`:                     `"grid"[0].seed: a grid of seeds makes the sweep recommend a seed`,
		`{"workloads":["builtin"],"grid":[{"policy":"kv","repeats":[2,5]}],` + objective + `}`:                  `"grid"[0].repeats: points compare pair by pair only over the same repeats`,
		`{"workloads":["builtin"],"grid":[{"compare":true}],` + objective + `}`:                                 `flag "compare": a point is one contender`,
		`{"workloads":["builtin"],"grid":[{"--workers":[1]}],` + objective + `}`:                                `without their dashes`,
		`{"workloads":["builtin"],"flags":{"workers":[1,2]},` + objective + `}`:                                 `"flags".workers: one value`,
		`{"workloads":["builtin"],"flags":{"workers":8},"grid":[{"workers":[1,2]}],` + objective + `}`:          `"grid"[0].workers: also in "flags"`,
		`{"workloads":["builtin"],"grid":[{"workers":[]}],` + objective + `}`:                                   `"grid"[0].workers: no values`,
		`{"workloads":["builtin"],"grid":[{"workers":[1],"workers":[2]}],` + objective + `}`:                    `in grid[0], key "workers" appears twice`,
		`{"workloads":["builtin"],"grid":[{},{"x":[1,{"k":1,"k":2}]}],` + objective + `}`:                       `in grid[1].x[1], key "k" appears twice`,
		`{"workloads":["builtin"],"objective":{"minimize":"p99_ttft_ms","subject_to":{"m":{"min":1,"min":2}}}}`: `in objective.subject_to.m, key "min" appears twice`,
		`{"workloads":["builtin"],"workloads":["builtin"],` + objective + `}`:                                   `key "workloads" appears twice`,
		`{"workloads":["builtin"],"grid":[{"workers":[{}]}],` + objective + `}`:                                 `not a number, string or boolean`,
		`{"workloads":["builtin"],"objective":{}}`:                                                              `give one of "minimize" and "maximize"`,
		`{"workloads":["builtin"],"objective":{"minimize":"p99_ttf_ms"}}`:                                       `"p99_ttf_ms" is not a metric`,
		`{"workloads":["builtin"],"objective":{"minimize":"p99_ttft_ms","subject_to":{"worker_share_cv":{}}}}`:  `give "min", "max" or both`,
		`{"workloads":["builtin"],` + objective + `} {}`:                                                        `follows the spec`,
		`{"workloads":["builtin"],"grid":[{"policy":"kv"},{"policy":["kv"]}],` + objective + `}`:                `grid blocks repeat a point`,
	} {
		s, err := Parse([]byte(spec))
		if err == nil {
			_, err = s.Points()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", spec, err, want)
		}
	}
}

// TestDeepSpec: a spec nested past MaxDepth is refused naming the bound,
// and one at the bound is read (the decoder then says what is wrong with
// it); at 100,000 levels the refusal costs a few bytes per byte of the
// spec (the eager path per level of the recursive walk allocated 2 GB at
// 30,000). The walk itself, unbounded, is linear: a repeated key at depth
// 10,000 is found, with its path, in a small multiple of the input (the
// recursive walk allocated 8,000 times the input there), on a stack of at
// most 1 MB (a walk that recursed per level would overflow it).
func TestDeepSpec(t *testing.T) {
	nested := func(n int, inner string) []byte {
		return []byte(`{"description":` + strings.Repeat("[", n) + inner + strings.Repeat("]", n) + `}`)
	}
	_, err := Parse(nested(MaxDepth, ""))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("nests deeper than %d levels", MaxDepth)) || !strings.Contains(err.Error(), `under "description"`) {
		t.Errorf("%d levels (the object and %d arrays): %v", MaxDepth+1, MaxDepth, err)
	}
	if _, err := Parse(nested(MaxDepth-1, "")); err == nil || strings.Contains(err.Error(), "nests deeper") {
		t.Errorf("%d levels are read, and refused as no string: %v", MaxDepth, err)
	}
	deep := nested(100000, "")
	if alloc := costtest.Allocated(func() { _, err = Parse(deep) }); err == nil || !strings.Contains(err.Error(), "nests deeper") || alloc > 16*uint64(len(deep)) {
		t.Errorf("100,000 levels: %v, %d bytes allocated for %d bytes of spec", err, alloc, len(deep))
	}
	deep = nested(10000, `{"k":1,"k":2}`)
	alloc := costtest.Allocated(func() { costtest.Shallow(func() { err = noRepeatedKeys(deep, math.MaxInt) }) })
	if want := `in description` + strings.Repeat("[0]", 10000) + `, key "k" appears twice`; err == nil || err.Error() != want {
		t.Errorf("unbounded walk at depth 10,000: %.80v", err)
	}
	if alloc > 500*uint64(len(deep)) {
		t.Errorf("unbounded walk at depth 10,000 allocated %d bytes for %d bytes of spec", alloc, len(deep))
	}
}

// TestShardsCoverEveryPointOnce: shards 1..N of any number of points hold
// each point exactly once, in sizes that differ by one at most.
func TestShardsCoverEveryPointOnce(t *testing.T) {
	for n := 0; n <= 23; n++ {
		points := make([]Point, n)
		for i := range points {
			points[i].ID = fmt.Sprint(i)
		}
		for shards := 1; shards <= 9; shards++ {
			seen := map[string]int{}
			lo, hi := n, 0
			for i := 1; i <= shards; i++ {
				mine := Shard{i, shards}.Of(points)
				lo, hi = min(lo, len(mine)), max(hi, len(mine))
				for _, p := range mine {
					seen[p.ID]++
				}
			}
			for _, p := range points {
				if seen[p.ID] != 1 {
					t.Fatalf("%d points in %d shards: point %s is in %d", n, shards, p.ID, seen[p.ID])
				}
			}
			if hi-lo > 1 {
				t.Fatalf("%d points in %d shards: sizes from %d to %d", n, shards, lo, hi)
			}
		}
	}
	for _, bad := range []string{"0/3", "4/3", "1", "a/b", "1/0", "-1/2"} {
		if _, err := ParseShard(bad); err == nil {
			t.Errorf("--shard %s accepted", bad)
		}
	}
	if s, err := ParseShard("2/8"); err != nil || s != (Shard{2, 8}) {
		t.Errorf("2/8: %v %v", s, err)
	}
}

// TestPolicyClassesThroughAContender: a point's router gets policy classes
// (a list of objects, which no replay flag of its own takes, and the
// sweep reserves --config) through a contender's settings, whose JSON
// value the spec passes to the flag as written, commas, quotes and all.
// Catches a string value unescaped short of JSON, or split at its commas.
func TestPolicyClassesThroughAContender(t *testing.T) {
	const classes = `policy_classes=[{"name":"premium","slo_ms":600000,"quantum":512},{"name":"regular","slo_ms":600000,"quantum":128}]`
	s := mustParse(t, `{"workloads":["builtin"],"grid":[{"contender":["premium4x=kv:default_policy_class=regular,`+
		strings.ReplaceAll(classes, `"`, `\"`)+`","round_robin"]}],`+objective+`}`)
	points, err := s.Points()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"--contender=premium4x=kv:default_policy_class=regular," + classes}, {"--contender=round_robin"}}
	for i, p := range points {
		if d := cmp.Diff(want[i], p.Flags); d != "" {
			t.Errorf("point %d (-want +got):\n%s", i, d)
		}
	}
}
