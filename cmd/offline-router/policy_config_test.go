package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// twoClasses is a policy config in the shape of Dynamo's premium_4x.yaml
// (tests/router/configs/policy_class at the pin), with an instance.
const twoClasses = `# premium gets four dispatches to regular's one
default_policy_class: regular
policy_classes:
  - name: premium
    slo_ms: 600000
    quantum: 512
    prefill_busy_threshold: 1536
  - name: regular
    slo_ms: 600000
    quantum: 128
worker_selection:
  instances:
    - name: spread
      type: least_loaded
`

func writeYAML(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPolicyConfigFileErrors: serve and replay refuse a policy config with
// an unknown key before reading anything, exit 2, naming the flag, the
// file, the line and the key's path. Catches the flag not wired on one of
// them, the file read loosely, and a message without its line.
func TestPolicyConfigFileErrors(t *testing.T) {
	path := writeYAML(t, strings.Replace(twoClasses, "    quantum: 128\n", "    quantm: 128\n", 1))
	want := "--router-policy-config " + path + ` line 10: field "policy_classes[1].quantm": is not a key of a policy class`
	for _, args := range [][]string{
		{"--router-policy-config", path},
		{"serve", "--router-policy-config", path},
		{"replay", "--sessions", "3", "-q", "--router-policy-config", path},
	} {
		stdout, stderr, code := run(t, `{"op":"inspect"}`+"\n", args...)
		if code != 2 || !strings.Contains(stderr, want) || stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", args, code, stdout, stderr, want)
		}
	}
	_, stderr, code := run(t, "", "--router-policy-config", filepath.Join(t.TempDir(), "none.yaml"))
	if code != 2 || !strings.Contains(stderr, "--router-policy-config: open ") {
		t.Errorf("a missing file: exit %d: %s", code, stderr)
	}
}

// TestPolicyConfigInTheConfigAnswer: the classes and the instance of a
// good file are in the config a bare config command answers, and a role
// flag names its instance there. Catches the file read but dropped, and
// the role flags not reaching the config.
func TestPolicyConfigInTheConfigAnswer(t *testing.T) {
	path := writeYAML(t, twoClasses)
	stdout, stderr, code := run(t, `{"op":"config"}`+"\n", "--router-policy-config", path, "--router-prefill-policy", "spread", "--router-decode-policy", "default")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		`"default_policy_class":"regular","policy_classes":[{"name":"premium","slo_ms":600000,"quantum":512,"prefill_busy_threshold":1536,"prefill_busy_threshold_frac":null,` +
			`"request_queue_limit_per_worker":null,"raw_isl_token_queue_limit_per_worker":null,"cached_token_queue_limit_per_worker":null},{"name":"regular","slo_ms":600000,"quantum":128,`,
		`"worker_selection":{"default":"","prefill":"spread","decode":"default","instances":[{"name":"spread","type":"least_loaded","parameters":{"temperature":null,"overlap_score_credit":null,"prefill_load_scale":null}}]}`,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the answer\n%s\nlacks\n%s", stdout, want)
		}
	}
}

// TestPolicyConfigValidationNamesTheFlag: a file that reads but breaks
// Dynamo's rules, and a role flag naming no instance, exit 2 in Dynamo's
// words, naming the flag (and the file's line). Catches validation
// skipped for the new keys, and errors about them naming no flag.
func TestPolicyConfigValidationNamesTheFlag(t *testing.T) {
	bad := writeYAML(t, strings.Replace(twoClasses, "default_policy_class: regular", "default_policy_class: gold", 1))
	good := writeYAML(t, twoClasses)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--router-policy-config", bad}, "--router-policy-config " + bad + ` line 2 (config default_policy_class): root default_policy_class "gold" does not name a configured policy class`},
		{[]string{"--router-policy-config", good, "--router-decode-policy", "warm"}, `--router-decode-policy (config worker_selection.decode): worker_selection decode "warm" does not name a configured instance`},
		{[]string{"--router-prefill-policy", "spread"}, `--router-prefill-policy (config worker_selection.prefill): worker_selection prefill "spread" does not name a configured instance`},
		{[]string{"--router-policy-config", writeYAML(t, "")}, `invalid router policy config: router policy config must define a root profile, at least one model profile, or worker_selection`},
		{[]string{"--router-policy-config", writeYAML(t, "models:\n  m:\n    default_policy_class: a\n")}, `line 2: field "models": per-model profiles are not taken here`},
	} {
		_, stderr, code := run(t, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d: %s\nwant %s", c.args, code, stderr, c.want)
		}
	}
}

// TestConfigCommandCarriesClasses: policy classes and instances travel in
// the stream's config command, answered in the config; one that sets the
// classes otherwise than --router-policy-config is refused naming both,
// and the stream goes on. Catches the in-band lists not decoded, and the
// file's keys left out of the conflict check.
func TestConfigCommandCarriesClasses(t *testing.T) {
	in := `{"op":"config","id":1,"default_policy_class":"b","policy_classes":[{"name":"b","slo_ms":3000,"quantum":64,"request_queue_limit_per_worker":0}],` +
		`"worker_selection":{"default":"rr","instances":[{"name":"rr","type":"round_robin"}]}}` + "\n" +
		`{"op":"place","request_id":"r","input_tokens":16,"policy_class":"b"}` + "\n"
	stdout, stderr, code := run(t, in)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"ok":true`) ||
		!strings.Contains(lines[0], `"default_policy_class":"b","policy_classes":[{"name":"b","slo_ms":3000,"quantum":64,"prefill_busy_threshold":null,"prefill_busy_threshold_frac":null,"request_queue_limit_per_worker":0,`) ||
		!strings.Contains(lines[0], `"worker_selection":{"default":"rr","prefill":"","decode":"","instances":[{"name":"rr","type":"round_robin",`) {
		t.Fatalf("the config answer:\n%s", stdout)
	}
	if strings.Contains(lines[1], `"unknown_field"`) || strings.Contains(lines[1], `"parse_error"`) {
		t.Fatalf("place's policy_class was not decoded: %s", lines[1])
	}
	stdout, stderr, code = run(t, in, "--router-policy-config", writeYAML(t, twoClasses))
	if code != 0 || !strings.Contains(stdout, `field \"default_policy_class\": the config command sets \"b\", but --router-policy-config `) {
		t.Fatalf("exit %d: %s\n%s", code, stdout, stderr)
	}
}

// TestComparisonUnderOneInstanceIsRefused: worker_selection.default names
// the instance every contender would place with, so replay refuses to
// compare policies under it, exit 2, before anything runs. Catches a
// comparison whose contenders all run the instance's policy, labelled by
// their own.
func TestComparisonUnderOneInstanceIsRefused(t *testing.T) {
	path := writeYAML(t, "worker_selection:\n  default: rr\n  instances:\n    - {name: rr, type: round_robin}\n")
	dir := t.TempDir()
	_, stderr, code := run(t, "", "replay", "--sessions", "3", "-q", "--compare", "--router-policy-config", path, "--report", filepath.Join(dir, "r.json"))
	if code != 2 || !strings.Contains(stderr, `contender kv would place with worker_selection.default's instance "rr" (policy round_robin), not with kv`) {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("made %d files", len(entries))
	}
	// Without a comparison it runs, named after the instance's policy
	// (catches a run of round_robin reported as kv, the config's policy).
	report := filepath.Join(dir, "r.json")
	if _, stderr, code := run(t, "", "replay", "--sessions", "3", "-q", "--router-policy-config", path, "--report", report); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"contender": "round_robin"`) {
		t.Errorf("the run is not named after the instance's policy: %.300s", data)
	}
}

// TestPolicyConfigIsAnInput: replay will not write an output over the
// policy config, nor read it and the trace from one stdin. Catches the
// file left out of the inputs replay guards.
func TestPolicyConfigIsAnInput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.json") // YAML, whatever its name says
	if err := os.WriteFile(path, []byte(twoClasses), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, "", "replay", "--sessions", "3", "-q", "--router-policy-config", path, "--report", path)
	if code != 2 || !strings.Contains(stderr, "is also --router-policy-config") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if data, _ := os.ReadFile(path); string(data) != twoClasses {
		t.Fatal("the policy config was overwritten")
	}
}

// TestConfigFilesAreBounded: a config file without end is refused, exit 2,
// naming the flag, instead of being read until memory runs out. (Catches:
// os.ReadFile back in place of the bounded read.)
func TestConfigFilesAreBounded(t *testing.T) {
	for _, flag := range []string{"--config", "--router-policy-config"} {
		_, stderr, code := run(t, "", flag, "/dev/zero")
		if code != 2 || !strings.Contains(stderr, flag+" /dev/zero: larger than") {
			t.Errorf("%s /dev/zero: exit %d: %s", flag, code, stderr)
		}
	}
}
