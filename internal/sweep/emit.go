package sweep

import (
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"
)

// A sweep beyond one machine runs on a job engine that exists: each of N
// shards is one task of a Slurm job array or one index of a Kubernetes
// Indexed Job, running `sweep --shard I/N` into a shared folder; `sweep
// merge` then reads that folder. Nothing here schedules.

// SlurmJob is a job-array script's settings.
type SlurmJob struct {
	Binary string // the offline-router the tasks run, an absolute path
	Spec   string // absolute
	Out    string // absolute, on storage every node sees
	Shards int
	CPUs   int // per task, and so --jobs
}

// WriteSlurm writes the job-array script: task I of 1..N runs shard I/N.
func WriteSlurm(w io.Writer, j SlurmJob) error {
	for _, p := range []string{j.Binary, j.Spec, j.Out} {
		if strings.ContainsAny(p, " \t\n\"'\\$`%") {
			return fmt.Errorf("%q: a path in a Slurm script must not hold blanks, quotes, $, ` or %%; move it", p)
		}
	}
	_, err := fmt.Fprintf(w, `#!/bin/bash
# The sweep %[2]s as a Slurm job array: task I of 1..%[4]d runs shard I/%[4]d
# into %[3]s (which every node must see). Submit, wait and merge:
#   sbatch --wait THIS_FILE
#   %[1]s sweep merge %[3]s --report %[3]s/sweep.json --plot %[3]s/sweep.png
# sbatch options given on its command line (-p PARTITION, -t TIME, ...)
# override the ones below. A task that fails can be resubmitted alone
# (sbatch --array=I THIS_FILE); a shard skips the points it already has.
#SBATCH --job-name=offline-router-sweep
#SBATCH --array=1-%[4]d
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=%[5]d
#SBATCH --output=%[3]s/slurm-%%A_%%a.out
set -euo pipefail
exec %[1]s sweep %[2]s --out %[3]s --jobs "${SLURM_CPUS_PER_TASK:-%[5]d}" --shard "${SLURM_ARRAY_TASK_ID}/%[4]d" --quiet
`, j.Binary, j.Spec, j.Out, j.Shards, j.CPUs)
	return err
}

// KubernetesJob is an Indexed Job's settings.
type KubernetesJob struct {
	Name   string
	Image  string // holds offline-router on its PATH
	Claim  string // a PersistentVolumeClaim holding the spec's folder
	Spec   string // the spec's path inside the volume
	Out    string // the sweep's folder inside the volume
	Shards int
	CPUs   int
}

// kubeWorkDir is where the pod mounts the volume and works.
const kubeWorkDir = "/sweep"

// The manifest's parts, with the fields of batch/v1 Job that it sets.
type (
	kubeJob struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Metadata   kubeMeta `json:"metadata"`
		Spec       struct {
			CompletionMode       string       `json:"completionMode"`
			Completions          int          `json:"completions"`
			Parallelism          int          `json:"parallelism"`
			BackoffLimitPerIndex int          `json:"backoffLimitPerIndex"`
			Template             kubeTemplate `json:"template"`
		} `json:"spec"`
	}
	kubeMeta struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	}
	kubeTemplate struct {
		Spec struct {
			RestartPolicy string          `json:"restartPolicy"`
			Containers    []kubeContainer `json:"containers"`
			Volumes       []kubeVolume    `json:"volumes"`
		} `json:"spec"`
	}
	kubeContainer struct {
		Name         string        `json:"name"`
		Image        string        `json:"image"`
		WorkingDir   string        `json:"workingDir"`
		Command      []string      `json:"command"`
		Args         []string      `json:"args"`
		Resources    kubeResources `json:"resources"`
		VolumeMounts []kubeMount   `json:"volumeMounts"`
	}
	kubeResources struct {
		Requests map[string]string `json:"requests"`
	}
	kubeMount struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	}
	kubeVolume struct {
		Name string `json:"name"`
		PVC  struct {
			ClaimName string `json:"claimName"`
		} `json:"persistentVolumeClaim"`
	}
)

// WriteKubernetes writes the Indexed Job: the pod of completion index k
// (0-based, JOB_COMPLETION_INDEX) runs shard k+1 of N.
func WriteKubernetes(w io.Writer, j KubernetesJob) error {
	var job kubeJob
	job.APIVersion, job.Kind = "batch/v1", "Job"
	job.Metadata = kubeMeta{Name: j.Name, Labels: map[string]string{"app.kubernetes.io/name": "offline-router-sweep"}}
	job.Spec.CompletionMode, job.Spec.Completions, job.Spec.Parallelism = "Indexed", j.Shards, j.Shards
	job.Spec.BackoffLimitPerIndex = 2
	t := &job.Spec.Template.Spec
	t.RestartPolicy = "Never"
	t.Containers = []kubeContainer{{
		Name: "sweep", Image: j.Image, WorkingDir: kubeWorkDir, Command: []string{"/bin/sh", "-c"},
		Args: []string{fmt.Sprintf(`exec offline-router sweep %s --out %s --jobs %d --shard "$((JOB_COMPLETION_INDEX + 1))/%d" --quiet`,
			shellQuote(j.Spec), shellQuote(j.Out), j.CPUs, j.Shards)},
		Resources:    kubeResources{Requests: map[string]string{"cpu": fmt.Sprint(j.CPUs), "memory": "1Gi"}},
		VolumeMounts: []kubeMount{{Name: "sweep", MountPath: kubeWorkDir}},
	}}
	v := kubeVolume{Name: "sweep"}
	v.PVC.ClaimName = j.Claim
	t.Volumes = []kubeVolume{v}
	data, err := yaml.Marshal(job)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, `# The sweep as a Kubernetes Indexed Job: the pod of completion index k
# (0 to %[1]d) runs shard k+1 of %[2]d. The volume %[3]q must hold the spec
# at %[4]s and its traces at their relative paths; the reports land in
# %[5]s on it. Apply, wait, copy the folder out and merge:
#   kubectl apply -f THIS_FILE
#   kubectl wait --for=condition=complete job/%[6]s --timeout=24h
#   (copy %[5]s from the volume, e.g. kubectl cp from a pod that mounts it)
#   offline-router sweep merge OUT --report OUT/sweep.json --plot OUT/sweep.png
%[7]s`, j.Shards-1, j.Shards, j.Claim, j.Spec, j.Out, j.Name, data)
	return err
}

// shellQuote quotes s for sh: one single-quoted word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellWord is s as one word for sh: as it is when it holds nothing sh
// would read, else single-quoted.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,:/+@%") == "" {
		return s
	}
	return shellQuote(s)
}
