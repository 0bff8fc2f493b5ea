package sweep

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/yaml"
)

// fakeBinary is a stand-in for offline-router that prints its arguments.
func fakeBinary(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "offline-router")
	os.WriteFile(path, []byte("#!/bin/sh\necho \"$@\"\n"), 0o755)
	return path
}

// TestSlurmScript: the array runs tasks 1..N, and task I runs shard I/N.
func TestSlurmScript(t *testing.T) {
	var b bytes.Buffer
	bin := fakeBinary(t)
	if err := WriteSlurm(&b, SlurmJob{Binary: bin, Spec: "/s/spec.json", Out: "/o", Shards: 5, CPUs: 2}); err != nil {
		t.Fatal(err)
	}
	script := b.String()
	for _, want := range []string{"#SBATCH --array=1-5\n", "#SBATCH --cpus-per-task=2\n", "#SBATCH --output=/o/slurm-%A_%a.out\n"} {
		if !strings.Contains(script, want) {
			t.Errorf("no %q in\n%s", want, script)
		}
	}
	path := filepath.Join(t.TempDir(), "job.sh")
	os.WriteFile(path, b.Bytes(), 0o755)
	cmd := exec.Command("bash", path)
	cmd.Env = append(os.Environ(), "SLURM_ARRAY_TASK_ID=3", "SLURM_CPUS_PER_TASK=2")
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "sweep /s/spec.json --out /o --jobs 2 --shard 3/5 --quiet\n" {
		t.Errorf("task 3 ran %q: %v", out, err)
	}
	if err := WriteSlurm(&b, SlurmJob{Binary: bin, Spec: "/my specs/s.json", Out: "/o", Shards: 1, CPUs: 1}); err == nil {
		t.Error("a path with a blank was written into #SBATCH lines")
	}
}

// TestKubernetesManifest parses the manifest as a batch/v1 Job of
// completion mode Indexed and checks the fields the sweep relies on, then
// runs its container's command with JOB_COMPLETION_INDEX 0 and N-1.
func TestKubernetesManifest(t *testing.T) {
	var b bytes.Buffer
	err := WriteKubernetes(&b, KubernetesJob{Name: "sw", Image: "reg/or:1", Claim: "c", Spec: "spec.json", Out: "out",
		Shards: 4, CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Kubernetes' own types, decoded strictly: a field batch/v1 does not
	// have, or of the wrong type, fails here as kubectl would refuse it.
	var job batchv1.Job
	if err := yaml.UnmarshalStrict(b.Bytes(), &job); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	s, pod := job.Spec, job.Spec.Template.Spec
	if job.APIVersion != "batch/v1" || job.Kind != "Job" || job.Name != "sw" || s.CompletionMode == nil ||
		*s.CompletionMode != batchv1.IndexedCompletion || s.Completions == nil || *s.Completions != 4 ||
		s.Parallelism == nil || *s.Parallelism != 4 || pod.RestartPolicy != "Never" || len(pod.Containers) != 1 {
		t.Fatalf("not an Indexed batch/v1 Job of 4: %+v", job)
	}
	c := pod.Containers[0]
	if c.Image != "reg/or:1" || c.WorkingDir != "/sweep" || len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/sweep" ||
		len(pod.Volumes) != 1 || pod.Volumes[0].Name != c.VolumeMounts[0].Name || pod.Volumes[0].PersistentVolumeClaim == nil ||
		pod.Volumes[0].PersistentVolumeClaim.ClaimName != "c" {
		t.Fatalf("container or volume: %+v %+v", c, pod.Volumes)
	}
	bin := fakeBinary(t)
	for index, shard := range map[string]string{"0": "1/4", "3": "4/4"} {
		script := strings.Replace(strings.Join(c.Args, " "), "exec offline-router", "exec "+bin, 1)
		cmd := exec.Command(c.Command[0], append(c.Command[1:], script)...)
		cmd.Env = append(os.Environ(), "JOB_COMPLETION_INDEX="+index)
		out, err := cmd.CombinedOutput()
		if err != nil || !regexp.MustCompile(`^sweep spec.json --out out --jobs 1 --shard `+shard+` --quiet\n$`).Match(out) {
			t.Errorf("index %s ran %q: %v", index, out, err)
		}
	}
}
