package sweep

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
