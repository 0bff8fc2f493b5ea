package sweep

import (
	"fmt"
	"io"
	"strings"
)

// A sweep beyond one machine runs on a job engine that exists: each of N
// shards is one task of a Slurm job array or one index of a Kubernetes
// Indexed Job (kubernetes.go), running `sweep --shard I/N` into a shared
// folder; `sweep merge` then reads that folder. Nothing here schedules.

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
