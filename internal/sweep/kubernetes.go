package sweep

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"

	"github.com/distribution/reference"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// A sweep on Kubernetes is three objects: a ReadWriteMany claim (the pods
// of one Job run on several nodes and write one folder), a staging pod
// that mounts it (inputs go in and reports come out through it, by tar),
// and the Indexed Job. The spec and its traces are staged at the paths
// they have here under the folder that holds them all, so the spec's
// relative trace paths, and with them the points' IDs (which digest the
// workload as the spec gives it), are those of a local run: the reports
// merge with a local run's.

// KubeUser is the pods' numeric user and group, distroless's nonroot, that
// the Dockerfile's USER names too: a numeric user lets the kubelet check
// runAsNonRoot before starting the container.
const KubeUser = 65532

const (
	// kubeWorkDir is where the pods mount the volume and work.
	kubeWorkDir = "/sweep"
	// kubeIndexEnv holds the pod's completion index (from 0), for the
	// kubelet to substitute into the args as $(SHARD_INDEX).
	kubeIndexEnv = "SHARD_INDEX"
	// kubeStageImage is the staging pod's: tar and sleep, pinned by version
	// (pin it by digest where you mirror it).
	kubeStageImage = "docker.io/library/busybox:1.37.0"
	// kubeReportBytes is room for a point's report in the volume: a report
	// of 8 workers is about 7 KB.
	kubeReportBytes = 256 << 10
)

// KubernetesJob is an Indexed Job's settings.
type KubernetesJob struct {
	Name     string  // the Job's (--job-name); the staging pod is Name-stage
	Image    string  // holds offline-router on its PATH (--image)
	Claim    string  // the volume's PersistentVolumeClaim (--volume-claim)
	SpecPath string  // the spec file, as this machine opens it
	Points   []Point // the plan's: their traces are staged with the spec
	Out      string  // the sweep's folder inside the volume, relative to its root (--out)
	Shards   int
	CPUs     int
}

// staging is what the pods read, as this machine has it.
type staging struct {
	root  string   // the folder here that holds the spec and every trace
	files []string // each one's path under root (slash-separated): the spec, then the traces in spec order
	bytes int64    // their size
	out   string   // the sweep's folder under the volume's root, cleaned
}

// Check refuses, before anything is written, what Kubernetes would refuse
// at apply time or what could not run in the pods, naming the flag and
// the rule.
func (j KubernetesJob) Check() error {
	_, err := j.check()
	return err
}

func (j KubernetesJob) check() (staging, error) {
	if !filepath.IsLocal(j.Out) {
		return staging{}, fmt.Errorf("--out %q: with --emit kubernetes, a folder inside the volume, relative to its root (e.g. out)", j.Out)
	}
	// The paths reach the commands in the manifest's comment, where a
	// newline would end the comment and start YAML.
	if strings.ContainsFunc(j.Out, unicode.IsControl) {
		return staging{}, fmt.Errorf("--out %q: must not hold a newline or another control character", j.Out)
	}
	if msgs := validation.IsDNS1123Label(j.Name); len(msgs) > 0 {
		return staging{}, fmt.Errorf("--job-name %q: a Job's name is a DNS-1123 label: %s", j.Name, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(j.Claim); len(msgs) > 0 {
		return staging{}, fmt.Errorf("--volume-claim %q: a PersistentVolumeClaim's name is a DNS-1123 subdomain: %s", j.Claim, strings.Join(msgs, "; "))
	}
	if err := checkImage(j.Image); err != nil {
		return staging{}, err
	}
	st, err := j.stage()
	if err != nil {
		return staging{}, err
	}
	for _, f := range st.files {
		if st.out == f || strings.HasPrefix(st.out, f+"/") {
			return staging{}, fmt.Errorf("--out %q: the staged file %s is there in the volume", j.Out, f)
		}
	}
	for _, p := range append([]string{st.root}, st.files...) {
		if strings.ContainsFunc(p, unicode.IsControl) {
			return staging{}, fmt.Errorf("%q: a path the Job stages must not hold a newline or another control character", p)
		}
	}
	return st, nil
}

// checkImage requires one build: a tag other than latest, or a digest.
// An untagged or :latest image is pulled anew by every node (pods of one
// sweep could run different builds) and names no build anyone can rerun.
func checkImage(image string) error {
	if image == "" {
		return errors.New("--image: required with --emit kubernetes: the image built from the Dockerfile and pushed where the cluster pulls from, by version or digest, e.g. registry.example.com/offline-router:v1.2.0 (docs/sweep.md)")
	}
	ref, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return fmt.Errorf("--image %q: not an image reference (lowercase registry/repository, then :tag or @sha256:digest): %v", image, err)
	}
	_, digested := ref.(reference.Digested)
	tagged, hasTag := ref.(reference.Tagged)
	if !digested && (!hasTag || tagged.Tag() == "latest") {
		return fmt.Errorf("--image %q: name one build, by a version tag or a digest (@sha256:...): every pod must run the same one, and an untagged or :latest image is pulled anew by each node", image)
	}
	return nil
}

// stage lays out the spec and the traces for the volume: each at its path
// under the deepest folder holding them all, which keeps every trace's
// path relative to the spec, .. and all.
func (j KubernetesJob) stage() (staging, error) {
	spec, err := filepath.Abs(j.SpecPath)
	if err != nil {
		return staging{}, err
	}
	local, seen := []string{spec}, map[string]bool{}
	for _, p := range j.Points {
		if p.trace == "" || seen[p.trace] {
			continue
		}
		seen[p.trace] = true
		if filepath.IsAbs(p.Workload) {
			return staging{}, fmt.Errorf("workload %s: an absolute path is not in the pods' volume, and a point's ID holds the path as the spec gives it: give the trace relative to the spec's folder (.. is fine)", p.Workload)
		}
		abs, err := filepath.Abs(p.trace)
		if err != nil {
			return staging{}, err
		}
		local = append(local, abs)
	}
	st := staging{root: filepath.Dir(spec), out: filepath.ToSlash(filepath.Clean(j.Out))}
	for _, f := range local[1:] {
		for !within(st.root, f) {
			st.root = filepath.Dir(st.root)
		}
	}
	for _, f := range local {
		info, err := os.Stat(f)
		if err != nil {
			return staging{}, err
		}
		rel, err := filepath.Rel(st.root, f)
		if err != nil {
			return staging{}, err
		}
		st.files, st.bytes = append(st.files, filepath.ToSlash(rel)), st.bytes+info.Size()
	}
	return st, nil
}

// within says whether path lies under dir, both absolute and clean.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && filepath.IsLocal(rel)
}

// WriteKubernetes writes the claim, the staging pod and the Indexed Job,
// headed by the commands that stage, run and collect the sweep: the pod of
// completion index k (from 0) runs shard k+1 of N.
func WriteKubernetes(w io.Writer, j KubernetesJob) error {
	st, err := j.check()
	if err != nil {
		return err
	}
	gib := (st.bytes + int64(len(j.Points))*kubeReportBytes + 1<<30 - 1) >> 30
	size := resource.MustParse(strconv.FormatInt(gib, 10) + "Gi")
	stageName := j.Name + "-stage"
	var docs []any
	docs = append(docs, corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: j.Claim, Labels: j.labels("volume")},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	})
	docs = append(docs, corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: stageName, Labels: j.labels("stage")},
		Spec: j.podSpec(corev1.Container{
			Name: "stage", Image: kubeStageImage, Command: []string{"sleep", "infinity"},
			Resources: requests("100m", "64Mi"),
		}, corev1.PodSpec{
			// sleep, as PID 1, ignores SIGTERM, and the pod holds nothing
			// of its own: deleted, it need not wait 30 s to be killed.
			TerminationGracePeriodSeconds: new(int64(1)),
		}),
	})
	shards := int32(j.Shards)
	docs = append(docs, batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: j.Name, Labels: j.labels("sweep")},
		Spec: batchv1.JobSpec{
			CompletionMode: new(batchv1.IndexedCompletion), Completions: &shards, Parallelism: &shards,
			BackoffLimitPerIndex: new(int32(2)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: j.labels("sweep")},
				Spec: j.podSpec(corev1.Container{
					Name: "sweep", Image: j.Image,
					// The image holds the router alone, no shell: the
					// kubelet puts the index into the args, and
					// --shard-index takes it from 0.
					Command: []string{"offline-router"},
					Args: []string{"sweep", kubeArg(st.files[0]), "--out", kubeArg(st.out), "--jobs", strconv.Itoa(j.CPUs),
						"--shard-index", "$(" + kubeIndexEnv + ")/" + strconv.Itoa(j.Shards), "--quiet"},
					Env: []corev1.EnvVar{{Name: kubeIndexEnv, ValueFrom: &corev1.EnvVarSource{
						FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + batchv1.JobCompletionIndexAnnotation + "']"},
					}}},
					Resources: requests(strconv.Itoa(j.CPUs), "1Gi"),
				}, corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever}),
			},
		},
	})
	var b bytes.Buffer
	fmt.Fprintf(&b, `# The sweep %[1]s on Kubernetes, in three objects
# (labelled app.kubernetes.io/component): the volume, a ReadWriteMany claim
# the pods share across nodes; a staging pod that mounts it, with tar, for
# data in and out; and an Indexed Job whose pod of completion index k
# (from 0) runs shard k+1 of %[2]d. The spec and its traces are staged at the
# paths they have under %[3]s here, so the points' IDs are those of a local
# run. From the folder the reports should land in:
#   kubectl apply -f THIS_FILE -l app.kubernetes.io/component!=sweep
#   kubectl wait --for=condition=Ready pod/%[4]s --timeout=10m
#   tar -chf - -C %[5]s | kubectl exec -i %[4]s -- tar -xf - -C %[6]s
#   kubectl apply -f THIS_FILE -l app.kubernetes.io/component=sweep
#   kubectl wait --for=condition=Complete job/%[7]s --timeout=24h
#   kubectl exec %[4]s -- tar -cf - -C %[6]s %[8]s | tar -xf -
#   offline-router sweep merge %[8]s --report %[8]s/sweep.json --plot %[8]s/sweep.png
#   kubectl delete -f THIS_FILE    # the claim too, and the reports in it
# docs/sweep.md says more: the image, a claim of your own, a cluster
# without ReadWriteMany.
`, shellWord(st.files[0]), j.Shards, shellWord(st.root), stageName,
		strings.Join(append([]string{shellWord(st.root)}, shellWords(st.files)...), " "), kubeWorkDir, j.Name, shellWord(st.out))
	for _, d := range docs {
		data, err := kubeYAML(d)
		if err != nil {
			return err
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	_, err = w.Write(b.Bytes())
	return err
}

// labels are an object's: the sweep's name and the object's part in it,
// by which the commands apply the parts one after another.
func (j KubernetesJob) labels(component string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "offline-router-sweep", "app.kubernetes.io/instance": j.Name,
		"app.kubernetes.io/component": component}
}

// podSpec is spec with c as its one container, both under the "restricted"
// Pod Security Standard, and the volume mounted at kubeWorkDir, c's
// working folder. The root filesystem is read-only: the router writes only
// into the volume (a file beside its target, then renamed), and the
// staging pod's tar only there.
func (j KubernetesJob) podSpec(c corev1.Container, spec corev1.PodSpec) corev1.PodSpec {
	c.ImagePullPolicy = corev1.PullIfNotPresent
	c.WorkingDir = kubeWorkDir
	c.VolumeMounts = []corev1.VolumeMount{{Name: "sweep", MountPath: kubeWorkDir}}
	c.SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: new(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		ReadOnlyRootFilesystem:   new(true),
	}
	spec.Containers = []corev1.Container{c}
	spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot: new(true), RunAsUser: new(int64(KubeUser)), RunAsGroup: new(int64(KubeUser)),
		// The volume's group, so that user KubeUser may write it; checked
		// at its root only, not chowned through on every pod's start.
		FSGroup: new(int64(KubeUser)), FSGroupChangePolicy: new(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	spec.Volumes = []corev1.Volume{{Name: "sweep", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: j.Claim},
	}}}
	return spec
}

func requests(cpu, memory string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory),
	}}
}

// kubeYAML is an object as a person writes it: without the status only
// the server writes, and without the creationTimestamp: null that
// metav1.Time gives an unset time (omitempty cannot omit a struct). The
// keys are sorted, as kubectl prints them.
func kubeYAML(object any) ([]byte, error) {
	data, err := json.Marshal(object)
	if err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var tree map[string]any
	if err := d.Decode(&tree); err != nil {
		return nil, err
	}
	delete(tree, "status")
	dropUnsetTimes(tree)
	return yaml.Marshal(tree)
}

// dropUnsetTimes removes every creationTimestamp: null. The manifest's
// depth is fixed by the types above, not by any input.
func dropUnsetTimes(v any) {
	switch v := v.(type) {
	case map[string]any:
		if t, ok := v["creationTimestamp"]; ok && t == nil {
			delete(v, "creationTimestamp")
		}
		for _, e := range v {
			dropUnsetTimes(e)
		}
	case []any:
		for _, e := range v {
			dropUnsetTimes(e)
		}
	}
}

// kubeArg escapes s for a container's args, where the kubelet would read
// $(NAME) as a variable.
func kubeArg(s string) string { return strings.ReplaceAll(s, "$", "$$") }

func shellWords(s []string) []string {
	out := make([]string, len(s))
	for i, w := range s {
		out[i] = shellWord(w)
	}
	return out
}

// IndexShard is the flag --shard-index K/N: shard K+1 of N, with K counted
// from 0 as a Kubernetes Indexed Job's completion index is. It sets the
// --shard string it points at. (The Job's pods have no shell to add the 1,
// and the kubelet substitutes $(NAME) in args but does no arithmetic.)
type IndexShard struct{ Shard *string }

func (f IndexShard) Set(s string) error {
	k, n, ok := strings.Cut(s, "/")
	ki, err1 := strconv.Atoi(k)
	ni, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || ni < 1 || ki < 0 || ki >= ni {
		return fmt.Errorf("expected K/N with 0 <= K < N, e.g. 0/8 (a completion index, counted from 0)")
	}
	*f.Shard = fmt.Sprintf("%d/%d", ki+1, ni)
	return nil
}

// String is empty: the flag has no default of its own (--shard's is 1/1).
func (IndexShard) String() string { return "" }

func (IndexShard) Type() string { return "K/N" }
