package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/yaml"

	"github.com/offline-router/offline-router/internal/sweep"
)

// TestSweepEmitKubernetesRefusals: a claim name Kubernetes would refuse
// at apply time, and an image that is missing or names no one build, are
// refused with exit 2 before anything is printed, naming the flag and the
// rule.
func TestSweepEmitKubernetesRefusals(t *testing.T) {
	spec := writeSpec(t, smallSpec)
	for _, tc := range []struct{ args, want string }{
		{"--volume-claim=Sweeps", "--volume-claim \"Sweeps\": a PersistentVolumeClaim's name is a DNS-1123 subdomain"},
		{"--volume-claim=my sweeps", "--volume-claim \"my sweeps\""},
		{"--volume-claim=a\nb", `--volume-claim "a\nb"`},
		{"--volume-claim=", "--volume-claim \"\""},
		{"--volume-claim=-x", "must start and end with an alphanumeric character"},
		{"--volume-claim=" + strings.Repeat("a", 254), "must be no more than 253 characters"},
		{"--job-name=a.b", "--job-name \"a.b\": a Job's name is a DNS-1123 label"},
		{"--image=", "--image: required with --emit kubernetes"},
		{"--image=offline-router:latest", "name one build"},
		{"--image=offline-router", "name one build"},
	} {
		args := []string{"sweep", spec, "--out", "out", "--emit", "kubernetes", "--image=reg.example.com/or:1", tc.args}
		stdout, stderr, code := run(t, "", args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%q: exit %d, stdout %q: %s", tc.args, code, stdout, stderr)
		}
	}
	if _, stderr, code := run(t, "", "sweep", spec, "--out", "out", "--emit", "kubernetes"); code != 2 || !strings.Contains(stderr, "--image: required") {
		t.Errorf("no --image: exit %d: %s", code, stderr)
	}
}

// TestSweepEmitsTheBakeoff: the README's bake-off spec, whose trace lies
// outside the repository (../../shared/traces/...), emits: the spec and
// the trace are staged at their paths under the folder holding both.
func TestSweepEmitsTheBakeoff(t *testing.T) {
	if _, err := os.Stat(filepath.Join("..", "..", "..", "shared", "traces", "synthetic_trace.jsonl")); err != nil {
		t.Skip("the shared trace is not here (../shared/traces/synthetic_trace.jsonl beside the repository):", err)
	}
	spec := filepath.Join("..", "..", "examples", "bakeoff.json")
	manifest, stderr, code := run(t, "", "sweep", spec, "--out", "out", "--emit", "kubernetes", "--image", "reg.example.com/or:1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	root, _ := filepath.Abs(filepath.Join("..", "..", ".."))
	repo := filepath.Base(filepath.Dir(filepath.Dir(mustAbs(t, spec))))
	want := fmt.Sprintf("tar -chf - -C %s %s/examples/bakeoff.json shared/traces/synthetic_trace.jsonl |", root, repo)
	job := manifestJob(t, manifest)
	if !strings.Contains(manifest, want) || job.Spec.Template.Spec.Containers[0].Args[1] != repo+"/examples/bakeoff.json" {
		t.Fatalf("want %q and the spec at %s/examples/bakeoff.json:\n%s", want, repo, manifest)
	}
}

func mustAbs(t *testing.T, path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// manifestJob is the manifest's Job, its last object.
func manifestJob(t *testing.T, manifest string) batchv1.Job {
	t.Helper()
	parts := strings.Split(manifest, "\n---\n")
	var job batchv1.Job
	if err := yaml.UnmarshalStrict([]byte(parts[len(parts)-1]), &job); err != nil {
		t.Fatalf("%v\n%s", err, manifest)
	}
	return job
}

// fakeKubectl stands in for kubectl on a cluster whose volume is the
// folder $VOLUME: exec runs its command here with /sweep read as $VOLUME
// (the staging pod), anything else (apply, wait, delete) succeeds.
const fakeKubectl = `#!/usr/bin/env bash
set -euo pipefail
[ "$1" = exec ] || exit 0
shift
[ "$1" = -i ] && shift
shift 2 # the pod and --
args=()
for a in "$@"; do
  [ "$a" = /sweep ] && a=$VOLUME
  args+=("$a")
done
exec "${args[@]}"
`

// TestSweepOnKubernetesOnPaper runs the emitted manifest's commands, as
// its comment gives them, against a stand-in cluster: kubectl's exec runs
// on a folder standing for the volume, and the Job's pods are this binary
// run there with the container's args, $(SHARD_INDEX) set as the kubelet
// sets it. The spec's trace lies outside its folder (../data, as the
// bake-off's). The reports copied out merge into the table of a local run
// of the same spec, point IDs and all.
func TestSweepOnKubernetesOnPaper(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar here")
	}
	home := t.TempDir()
	for _, dir := range []string{"specs", "data", "volume", "here", "bin"} {
		os.MkdirAll(filepath.Join(home, dir), 0o755)
	}
	var trace strings.Builder
	for i := range 40 {
		fmt.Fprintf(&trace, `{"timestamp": %d, "input_length": 600, "output_length": 4, "hash_ids": [%d, %d]}`+"\n", i*20, i%3, 100+i)
	}
	os.WriteFile(filepath.Join(home, "data", "chat.jsonl"), []byte(trace.String()), 0o644)
	spec := filepath.Join(home, "specs", "s.json")
	os.WriteFile(spec, []byte(`{"workloads": ["../data/chat.jsonl"], "flags": {"engine": "simple"},
	  "grid": [{"policy": ["kv", "round_robin", "least_loaded", "session_hash"]}], "objective": {"minimize": "p99_ttft_ms"}}`), 0o644)
	here, volume, bin := filepath.Join(home, "here"), filepath.Join(home, "volume"), filepath.Join(home, "bin")
	os.WriteFile(filepath.Join(bin, "kubectl"), []byte(fakeKubectl), 0o755)
	os.Symlink(binary, filepath.Join(bin, "offline-router"))
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "VOLUME="+volume)

	manifest, stderr, code := run(t, "", "sweep", spec, "--out", "out", "--emit", "kubernetes", "--image", "reg.example.com/or:1", "--shards", "3")
	if code != 0 {
		t.Fatalf("emit: exit %d: %s", code, stderr)
	}
	file := filepath.Join(home, "sweep.yaml")
	os.WriteFile(file, []byte(manifest), 0o644)
	job := manifestJob(t, manifest)
	c := job.Spec.Template.Spec.Containers[0]
	commands := regexp.MustCompile(`(?m)^#   (.*)$`).FindAllStringSubmatch(manifest, -1)
	if len(commands) != 8 {
		t.Fatalf("%d commands, want 8:\n%s", len(commands), manifest)
	}
	for _, line := range commands {
		command := strings.ReplaceAll(line[1], "THIS_FILE", file)
		if strings.Contains(command, "kubectl apply") && strings.Contains(command, "component=sweep") {
			// The Job: its pods, one per completion index, in the volume.
			for k := range int(*job.Spec.Completions) {
				args := strings.ReplaceAll(strings.Join(c.Args, "\x00"), "$("+c.Env[0].Name+")", fmt.Sprint(k))
				pod := exec.Command(filepath.Join(bin, c.Command[0]), strings.Split(args, "\x00")...)
				pod.Dir, pod.Env = volume, env
				if out, err := pod.CombinedOutput(); err != nil {
					t.Fatalf("pod %d: %v\n%s", k, err, out)
				}
			}
			continue
		}
		sh := exec.Command("bash", "-euo", "pipefail", "-c", command)
		sh.Dir, sh.Env = here, env
		if out, err := sh.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", command, err, out)
		}
	}
	local := filepath.Join(home, "local")
	if _, stderr, code := run(t, "", "sweep", spec, "--out", local, "-q"); code != 0 {
		t.Fatalf("local: exit %d: %s", code, stderr)
	}
	a, b := readTable(t, filepath.Join(local, sweep.TableFile)), readTable(t, filepath.Join(here, "out", sweep.TableFile))
	if d := cmp.Diff(a.Deterministic, b.Deterministic, samePoints); d != "" {
		t.Fatalf("the Job's table differs from a local run's:\n%s", d)
	}
	if _, err := os.Stat(filepath.Join(here, "out", "sweep.png")); err != nil {
		t.Error(err)
	}
}
