package sweep

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

// kubeFixture is the job for a spec whose trace lies outside its folder
// (../../data/t.jsonl, as examples/bakeoff.json's does), with 4 points in
// 3 shards, and the folder holding both.
func kubeFixture(t *testing.T) (KubernetesJob, string) {
	t.Helper()
	root := t.TempDir()
	for _, dir := range []string{"proj/specs", "data"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "data", "t.jsonl"), []byte(`{"timestamp":0,"input_length":10,"output_length":1,"hash_ids":[1]}`+"\n"), 0o644)
	spec := filepath.Join(root, "proj", "specs", "s.json")
	os.WriteFile(spec, []byte(`{"workloads":["../../data/t.jsonl","builtin"],"grid":[{"policy":["kv","llmd"]}],"objective":{"minimize":"p99_ttft_ms"}}`), 0o644)
	s, err := Load(spec)
	if err != nil {
		t.Fatal(err)
	}
	points, err := s.Points()
	if err != nil {
		t.Fatal(err)
	}
	return KubernetesJob{Name: "sw", Image: "registry.example.com/or:1.0", Claim: "c", SpecPath: spec, Points: points,
		Out: "out", Shards: 3, CPUs: 2}, root
}

// kubeManifest is the manifest's comment and its three objects, each
// decoded strictly into Kubernetes' own types: a field the API does not
// have, or of the wrong type, fails here as the API server would refuse it.
type kubeManifest struct {
	header string
	claim  corev1.PersistentVolumeClaim
	stage  corev1.Pod
	job    batchv1.Job
}

func writeManifest(t *testing.T, j KubernetesJob) (string, kubeManifest) {
	t.Helper()
	var b bytes.Buffer
	if err := WriteKubernetes(&b, j); err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(b.String(), "\n---\n")
	if len(parts) != 4 {
		t.Fatalf("%d parts, want the comment and 3 objects:\n%s", len(parts), b.String())
	}
	var m kubeManifest
	m.header = parts[0]
	for i, into := range []any{&m.claim, &m.stage, &m.job} {
		if err := yaml.UnmarshalStrict([]byte(parts[i+1]), into); err != nil {
			t.Fatalf("object %d: %v\n%s", i+1, err, parts[i+1])
		}
	}
	return b.String(), m
}

// TestKubernetesManifest: a ReadWriteMany claim, a staging pod and an
// Indexed Job of 3 sharing it; the pod of index k runs shard k+1/3 of the
// spec at the path it has under the folder holding it and its trace, and
// the comment's tar stages the spec and the trace at those paths.
func TestKubernetesManifest(t *testing.T) {
	j, root := kubeFixture(t)
	_, m := writeManifest(t, j)
	if m.claim.Kind != "PersistentVolumeClaim" || m.claim.Name != "c" ||
		!slices.Equal(m.claim.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) ||
		m.claim.Spec.Resources.Requests.Storage().String() != "1Gi" {
		t.Fatalf("claim: %+v", m.claim)
	}
	s, pod := m.job.Spec, m.job.Spec.Template.Spec
	if m.job.APIVersion != "batch/v1" || m.job.Kind != "Job" || m.job.Name != "sw" || s.CompletionMode == nil ||
		*s.CompletionMode != batchv1.IndexedCompletion || s.Completions == nil || *s.Completions != 3 ||
		s.Parallelism == nil || *s.Parallelism != 3 || pod.RestartPolicy != "Never" || len(pod.Containers) != 1 {
		t.Fatalf("not an Indexed batch/v1 Job of 3: %+v", m.job)
	}
	for name, spec := range map[string]corev1.PodSpec{"stage": m.stage.Spec, "job": pod} {
		c := spec.Containers[0]
		if c.WorkingDir != "/sweep" || len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/sweep" || len(spec.Volumes) != 1 ||
			spec.Volumes[0].Name != c.VolumeMounts[0].Name || spec.Volumes[0].PersistentVolumeClaim == nil ||
			spec.Volumes[0].PersistentVolumeClaim.ClaimName != "c" {
			t.Errorf("%s: container or volume: %+v %+v", name, c, spec.Volumes)
		}
	}
	c := pod.Containers[0]
	if c.Image != j.Image || c.ImagePullPolicy != corev1.PullIfNotPresent || !slices.Equal(c.Command, []string{"offline-router"}) {
		t.Fatalf("container: %+v", c)
	}
	// The kubelet sets each $(NAME) of the args from the container's env.
	if len(c.Env) != 1 || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef == nil ||
		c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
		t.Fatalf("env: %+v", c.Env)
	}
	for index, shard := range map[int]string{0: "1/3", 2: "3/3"} {
		args := strings.Join(c.Args, " ")
		args = strings.ReplaceAll(args, "$("+c.Env[0].Name+")", strconv.Itoa(index))
		want := "sweep proj/specs/s.json --out out --jobs 2 --shard-index " + strconv.Itoa(index) + "/3 --quiet"
		if args != want {
			t.Fatalf("index %d runs %q, want %q", index, args, want)
		}
		var got string
		if err := (IndexShard{&got}).Set(strings.Fields(args)[7]); err != nil || got != shard {
			t.Errorf("index %d: --shard %s (%v), want %s", index, got, err, shard)
		}
	}
	stage := regexp.MustCompile(`(?m)^#   tar -chf - -C (\S+) (.*) \| kubectl exec -i sw-stage -- tar -xf - -C /sweep$`).FindStringSubmatch(m.header)
	if stage == nil || stage[1] != root || stage[2] != "proj/specs/s.json data/t.jsonl" {
		t.Fatalf("staged %q, want proj/specs/s.json data/t.jsonl from %s:\n%s", stage, root, m.header)
	}
}

// TestKubernetesArgsKeepDollars: a $ in a path reaches the pod as a $,
// not as a variable of the kubelet's ($$ is its escape).
func TestKubernetesArgsKeepDollars(t *testing.T) {
	j, _ := kubeFixture(t)
	j.Out = "o$(HOME)"
	_, m := writeManifest(t, j)
	if args := m.job.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "o$$(HOME)") {
		t.Errorf("args %q", args)
	}
}

// TestKubernetesManifestIsClean: no field the server writes or a person
// would leave out (creationTimestamp: null, status: {}, an empty
// resources: {}), and the same bytes twice.
func TestKubernetesManifestIsClean(t *testing.T) {
	j, _ := kubeFixture(t)
	text, _ := writeManifest(t, j)
	for _, noise := range []string{"null", "{}", "creationTimestamp", "status:"} {
		if strings.Contains(text, noise) {
			t.Errorf("%q in\n%s", noise, text)
		}
	}
	if again, _ := writeManifest(t, j); again != text {
		t.Error("two manifests of one sweep differ")
	}
}

// TestKubernetesPodsAreRestricted: both pods pass the Pod Security
// Standard "restricted" as the API server's admission evaluates it, run
// as KubeUser (the Dockerfile's USER) with the volume in its group, and
// write nothing outside the volume.
func TestKubernetesPodsAreRestricted(t *testing.T) {
	j, _ := kubeFixture(t)
	_, m := writeManifest(t, j)
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	for name, pod := range map[string]*corev1.PodTemplateSpec{
		"stage": {ObjectMeta: m.stage.ObjectMeta, Spec: m.stage.Spec},
		"job":   &m.job.Spec.Template,
	} {
		spec := &pod.Spec
		if r := policy.AggregateCheckResults(eval.EvaluatePod(restricted, &pod.ObjectMeta, spec)); !r.Allowed {
			t.Errorf("%s: restricted refuses it: %s", name, r.ForbiddenDetail())
		}
		sc, c := spec.SecurityContext, spec.Containers[0].SecurityContext
		if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != KubeUser || sc.RunAsGroup == nil || *sc.RunAsGroup != KubeUser ||
			sc.FSGroup == nil || *sc.FSGroup != KubeUser {
			t.Errorf("%s: not user, group and volume group %d: %+v", name, KubeUser, sc)
		}
		if c == nil || c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem {
			t.Errorf("%s: the root filesystem is writable: %+v", name, c)
		}
	}
}

// TestKubernetesRefusals: each name as Kubernetes would refuse it at apply
// time, an image that names no one build, and paths the pods could not
// use, refused by Check, naming the flag.
func TestKubernetesRefusals(t *testing.T) {
	good, root := kubeFixture(t)
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 254)
	newline := filepath.Join(root, "proj", "specs", "s\nkind: Pod.json")
	if data, err := os.ReadFile(good.SpecPath); err != nil || os.WriteFile(newline, data, 0o644) != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		edit func(*KubernetesJob)
		want string
	}{
		{func(j *KubernetesJob) { j.Claim = "Bad" }, "--volume-claim"},
		{func(j *KubernetesJob) { j.Claim = "a b" }, "--volume-claim"},
		{func(j *KubernetesJob) { j.Claim = "a\nb" }, "--volume-claim"},
		{func(j *KubernetesJob) { j.Claim = "" }, "--volume-claim"},
		{func(j *KubernetesJob) { j.Claim = "-a" }, "--volume-claim"},
		{func(j *KubernetesJob) { j.Claim = long }, "no more than 253"},
		{func(j *KubernetesJob) { j.Name = "Bad_Name" }, "--job-name"},
		{func(j *KubernetesJob) { j.Name = "a.b" }, "--job-name"}, // a subdomain, not a label
		{func(j *KubernetesJob) { j.Name = long[:64] }, "no more than 63"},
		{func(j *KubernetesJob) { j.Image = "" }, "--image: required"},
		{func(j *KubernetesJob) { j.Image = "offline-router" }, "--image"},
		{func(j *KubernetesJob) { j.Image = "offline-router:latest" }, "--image"},
		{func(j *KubernetesJob) { j.Image = "Registry/Offline-Router:1" }, "--image"},
		{func(j *KubernetesJob) { j.Image = "or:1 --privileged" }, "--image"},
		{func(j *KubernetesJob) { j.Out = "/abs" }, "--out"},
		{func(j *KubernetesJob) { j.Out = "../up" }, "--out"},
		{func(j *KubernetesJob) { j.Out = "" }, "--out"},
		{func(j *KubernetesJob) { j.Out = "data/t.jsonl/x" }, "--out"},
		{func(j *KubernetesJob) { j.Out = "o\nkind: Pod" }, "control character"},
		{func(j *KubernetesJob) { j.Points[0].Workload = filepath.Join(root, "data", "t.jsonl") }, "workload"},
		{func(j *KubernetesJob) { j.SpecPath = newline }, "control character"},
	} {
		j := good
		j.Points = slices.Clone(good.Points)
		tc.edit(&j)
		if err := j.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", j, err, tc.want)
		}
	}
	for _, edit := range []func(*KubernetesJob){
		func(j *KubernetesJob) { j.Claim = "team.sweeps-1" },
		func(j *KubernetesJob) { j.Image = "or:1" },
		func(j *KubernetesJob) { j.Image = "reg:5000/team/or@sha256:" + strings.Repeat("ab", 32) },
		func(j *KubernetesJob) { j.Out = "runs/a/../b" },
	} {
		j := good
		edit(&j)
		if err := j.Check(); err != nil {
			t.Errorf("%+v refused: %v", j, err)
		}
	}
}

// TestIndexShard: --shard-index K/N is --shard K+1/N, K from 0 to N-1.
func TestIndexShard(t *testing.T) {
	for in, want := range map[string]string{"0/4": "1/4", "3/4": "4/4", "0/1": "1/1"} {
		var got string
		if err := (IndexShard{&got}).Set(in); err != nil || got != want {
			t.Errorf("%s: %q %v, want %s", in, got, err, want)
		}
		if _, err := ParseShard(got); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
	for _, in := range []string{"4/4", "-1/4", "0/0", "1", "a/4", "1/b", ""} {
		got := "unset"
		if err := (IndexShard{&got}).Set(in); err == nil || got != "unset" {
			t.Errorf("%q taken as %q", in, got)
		}
	}
}

// distrolessPath is the PATH of gcr.io/distroless images, where the Job's
// command "offline-router" is looked up.
var distrolessPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// TestDockerfileMatchesTheJob: no Docker engine runs here to build the
// image, so the Dockerfile is held to what the Job and go.mod need: a Go
// builder of go.mod's language version, a static build of the router, a
// base pinned to one version, the binary on the PATH under the name the
// Job runs, and the numeric user the pods run as.
func TestDockerfileMatchesTheJob(t *testing.T) {
	stages := dockerfile(t, filepath.Join("..", "..", "Dockerfile"))
	mod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)\.(\d+)$`).FindSubmatch(mod)
	if goLine == nil || len(stages) != 2 {
		t.Fatalf("go.mod's go line %q; %d stages, want a builder and the image", goLine, len(stages))
	}
	builder := regexp.MustCompile(`^golang:(\d+\.\d+)\.(\d+)(-[a-z]+)?(@sha256:[0-9a-f]{64})? AS (\w+)$`).FindStringSubmatch(stages[0].from)
	if builder == nil || builder[1] != string(goLine[1]) || atoi(t, builder[2]) < atoi(t, string(goLine[2])) {
		t.Fatalf("builder %q: want golang:%s.N (N >= %s) by exact tag, as go.mod's go line", stages[0].from, goLine[1], goLine[2])
	}
	build := strings.Join(stages[0].get("RUN"), "\n")
	if !regexp.MustCompile(`(?m)^CGO_ENABLED=0 go build -trimpath .*-o (\S+) \./cmd/offline-router$`).MatchString(build) {
		t.Errorf("no static, trimmed build of ./cmd/offline-router in\n%s", build)
	}
	built := regexp.MustCompile(`-o (\S+) \./cmd/offline-router`).FindStringSubmatch(build)
	if !regexp.MustCompile(`^gcr\.io/distroless/static-debian\d+:nonroot(@sha256:[0-9a-f]{64})?$`).MatchString(stages[1].from) {
		t.Errorf("base %q: want distroless static, nonroot, by tag", stages[1].from)
	}
	entry := stages[1].get("ENTRYPOINT")
	copied := stages[1].get("COPY")
	if len(entry) != 1 || len(copied) != 1 || built == nil {
		t.Fatalf("ENTRYPOINT %q, COPY %q, built %q", entry, copied, built)
	}
	bin := regexp.MustCompile(`^\["([^"]+)"\]$`).FindStringSubmatch(entry[0])
	if bin == nil || copied[0] != "--from="+builder[5]+" "+built[1]+" "+bin[1] || filepath.Base(bin[1]) != "offline-router" ||
		!slices.Contains(distrolessPath, filepath.Dir(bin[1])) {
		t.Errorf("ENTRYPOINT %q, COPY %q: the built binary, as offline-router on the PATH", entry, copied)
	}
	if user := stages[1].get("USER"); len(user) != 1 || user[0] != strconv.Itoa(KubeUser)+":"+strconv.Itoa(KubeUser) {
		t.Errorf("USER %q, want %d:%d, the pods' runAsUser and runAsGroup", user, KubeUser, KubeUser)
	}
}

// dockerStage is one FROM of a Dockerfile and its instructions.
type dockerStage struct {
	from         string
	instructions [][2]string // keyword, arguments
}

func (s dockerStage) get(keyword string) []string {
	var args []string
	for _, in := range s.instructions {
		if in[0] == keyword {
			args = append(args, in[1])
		}
	}
	return args
}

// dockerfile reads a Dockerfile's stages. Hand-written: the one parser
// there is (moby/buildkit's) would bring a module graph of hundreds for a
// file of a dozen one-line instructions, and a line continued by \ is
// joined here too.
func dockerfile(t *testing.T, path string) []dockerStage {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	var stages []dockerStage
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		keyword, args, _ := strings.Cut(line, " ")
		keyword, args = strings.ToUpper(keyword), strings.TrimSpace(args)
		switch {
		case keyword == "FROM":
			stages = append(stages, dockerStage{from: args})
		case len(stages) == 0:
			if keyword != "ARG" {
				t.Fatalf("%s before FROM", keyword)
			}
		default:
			s := &stages[len(stages)-1]
			s.instructions = append(s.instructions, [2]string{keyword, args})
		}
	}
	return stages
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
