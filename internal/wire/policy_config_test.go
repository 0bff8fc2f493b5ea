package wire

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/protocol"
)

// premium4x has the shape and numbers of Dynamo's
// tests/router/configs/policy_class/premium_4x.yaml at the pin, comments
// and all.
const premium4x = `# two classes at 4:1
default_policy_class: regular
# the busy comparison is strict
policy_classes:
  - name: premium
    slo_ms: 600000
    quantum: 512
    prefill_busy_threshold: 1536
    request_queue_limit_per_worker: 1024
  - name: regular
    slo_ms: 600000
    quantum: 128
    prefill_busy_threshold: 1536
    request_queue_limit_per_worker: 1024
`

func loadPolicyConfig(t *testing.T, yaml string) (protocol.Config, error) {
	t.Helper()
	ovs, err := PolicyConfigOverrides("p.yaml", []byte(yaml))
	if err != nil {
		return protocol.Config{}, err
	}
	return LoadConfig(nil, ovs)
}

// TestPolicyConfigReadsDynamosFile: a file in the shape of Dynamo's own
// becomes the classes it declares, each key in its field, and only the
// keys it gives are overrides, each named by the flag and the file.
// Catches a list not read whole, a key read into another field, and
// overrides for keys the file does not give (which would clash with a
// config command that sets them).
func TestPolicyConfigReadsDynamosFile(t *testing.T) {
	ovs, err := PolicyConfigOverrides("p.yaml", []byte(premium4x))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range ovs {
		keys = append(keys, o.Key)
		if o.Flag != "--router-policy-config p.yaml" {
			t.Errorf("%s: flag %q", o.Key, o.Flag)
		}
	}
	if diff := cmp.Diff([]string{"default_policy_class", "policy_classes"}, keys); diff != "" {
		t.Fatalf("keys (-want +got):\n%s", diff)
	}
	cfg, err := LoadConfig(nil, ovs)
	if err != nil {
		t.Fatal(err)
	}
	want := protocol.DefaultConfig()
	want.DefaultPolicyClass = "regular"
	u := func(v uint64) *uint64 { return &v }
	want.PolicyClasses = []protocol.PolicyClass{
		{Name: "premium", SLOMS: 600000, Quantum: 512, PrefillBusyThreshold: u(1536), RequestQueueLimitPerWorker: u(1024)},
		{Name: "regular", SLOMS: 600000, Quantum: 128, PrefillBusyThreshold: u(1536), RequestQueueLimitPerWorker: u(1024)},
	}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Fatalf("config (-want +got):\n%s", diff)
	}
}

// TestPolicyConfigWorkerSelection: worker_selection's default and
// instances, in flow and block style, with null for a knob left to the
// config; a class's optional key given null is absent, and serde's integer
// forms (0x10, +20) read. Catches parameters not read, null taken as a
// value, and an instance's keys read into another's.
func TestPolicyConfigWorkerSelection(t *testing.T) {
	cfg, err := loadPolicyConfig(t, `
worker_selection:
  default: warm
  instances:
    - {name: cheap, type: round_robin}
    - name: warm
      type: kv
      parameters:
        temperature: 0.5
        overlap_score_credit: ~
        prefill_load_scale: 2
default_policy_class: a
policy_classes:
  - {name: a, slo_ms: 10, quantum: 0x10, prefill_busy_threshold_frac: null}
  - {name: b, slo_ms: +20, quantum: 1, prefill_busy_threshold_frac: 16.0}
`)
	if err != nil {
		t.Fatal(err)
	}
	f := func(v float64) *float64 { return &v }
	want := protocol.WorkerSelection{Default: "warm", Instances: []protocol.SelectionInstance{
		{Name: "cheap", Type: protocol.PolicyRoundRobin},
		{Name: "warm", Type: protocol.PolicyKV, Parameters: protocol.SelectionParameters{Temperature: f(0.5), PrefillLoadScale: f(2)}},
	}}
	if diff := cmp.Diff(want, cfg.WorkerSelection); diff != "" {
		t.Fatalf("worker_selection (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]protocol.PolicyClass{{Name: "a", SLOMS: 10, Quantum: 16}, {Name: "b", SLOMS: 20, Quantum: 1, PrefillBusyThresholdFrac: f(16)}}, cfg.PolicyClasses); diff != "" {
		t.Fatalf("classes (-want +got):\n%s", diff)
	}
}

// TestPolicyConfigAliases: an alias is its anchor's node, in any place a
// value goes; one whose anchor is not before it is refused. Catches
// aliases refused (Dynamo's serde takes them) or followed to nothing.
func TestPolicyConfigAliases(t *testing.T) {
	cfg, err := loadPolicyConfig(t, "default_policy_class: &d a\npolicy_classes:\n  - {name: *d, slo_ms: &n 30, quantum: *n}\n")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]protocol.PolicyClass{{Name: "a", SLOMS: 30, Quantum: 30}}, cfg.PolicyClasses); diff != "" {
		t.Fatalf("classes (-want +got):\n%s", diff)
	}
	_, err = loadPolicyConfig(t, "default_policy_class: *d\npolicy_classes: [{name: a, slo_ms: 1, quantum: 1}]\n")
	if err == nil || !strings.Contains(err.Error(), `line 1: field "default_policy_class": expected a string, got an alias with no anchor before it`) {
		t.Fatalf("an alias with no anchor: %v", err)
	}
}

// TestPolicyConfigRefusals: every way a file can be wrong is an error
// naming the flag, the file, the line and the key, in the scanner's words
// where it has them and Dynamo's where it does. Each line catches its
// check being dropped (the file would be read wrong, or silently in
// part), and its line or path being lost.
func TestPolicyConfigRefusals(t *testing.T) {
	class := func(extra string) string {
		return "default_policy_class: a\npolicy_classes:\n  - name: a\n    slo_ms: 1\n    quantum: 1\n" + extra
	}
	for yaml, want := range map[string]string{
		// Unknown keys, with the hint where the key is a slip.
		class("    quantm: 3\n"):                              `--router-policy-config p.yaml line 6: field "policy_classes[0].quantm": is not a key of a policy class`,
		class("  - name: b\n    Slo_ms: 1\n    quantum: 1\n"): `line 7: field "policy_classes[1].Slo_ms": is not a key of a policy class (Dynamo's policy_config.rs at the pinned commit; docs/PROTOCOL.md §2) (did you mean "slo_ms"?)`,
		class("    queue_policy: fcfs\n"):                     `line 6: field "policy_classes[0].queue_policy": is not a key of a policy class`, // removed before the pin
		"default_policy_family: a\n":                          `line 1: field "default_policy_family": is not a key of Dynamo's router policy config`,
		"Default_Policy_Class: a\n":                           `(did you mean "default_policy_class"?)`,
		"worker_selection:\n  instances: []\n  defualt: x\n":  `line 3: field "worker_selection.defualt": is not a key of worker_selection`,
		"worker_selection:\n  prefill: x\n":                   `line 2: field "worker_selection.prefill": is a key of Dynamo releases after the pinned commit, not of worker_selection at the pin; give --router-prefill-policy NAME`,
		"worker_selection:\n  instances:\n    - {name: x, type: kv, parameters: {score_weight: 1.0}}\n": `line 3: field "worker_selection.instances[0].parameters.score_weight": is not a key of an instance's parameters`,
		"<<: {default_policy_class: a}\n": `line 1: a merge key (<<)`,
		// A key twice.
		"default_policy_class: a\ndefault_policy_class: b\n": `line 2: not YAML: mapping key "default_policy_class" already defined at [1:1]`,
		class("    slo_ms: 2\n"):                             `line 6: not YAML: mapping key "slo_ms" already defined at [4:5]`,
		// Wrong types, and integers out of range.
		class("    request_queue_limit_per_worker: \"5\"\n"):                             `line 6: field "policy_classes[0].request_queue_limit_per_worker": expected an unsigned 64-bit integer, got a quoted string`,
		class("    prefill_busy_threshold: 1.5\n"):                                       `line 6: field "policy_classes[0].prefill_busy_threshold": expected an unsigned 64-bit integer, got number 1.5`,
		class("    raw_isl_token_queue_limit_per_worker: 18446744073709551616\n"):        `line 6: field "policy_classes[0].raw_isl_token_queue_limit_per_worker": expected an unsigned 64-bit integer, got 18446744073709551616 (above 18446744073709551615)`,
		class("    cached_token_queue_limit_per_worker: -1\n"):                           `line 6: field "policy_classes[0].cached_token_queue_limit_per_worker": expected an unsigned 64-bit integer, got number -1`,
		class("    cached_token_queue_limit_per_worker: 1_000\n"):                        `expected an unsigned 64-bit integer, got number 1_000`,
		class("    prefill_busy_threshold_frac: .nan\n"):                                 `line 6: field "policy_classes[0].prefill_busy_threshold_frac": expected a finite number, got .nan`,
		class("    prefill_busy_threshold_frac: yes\n"):                                  `expected a finite number, got "yes"`,
		class("  - {name: b, slo_ms: 1e3, quantum: 1}\n"):                                `line 6: field "policy_classes[1].slo_ms": expected an unsigned 64-bit integer, got "1e3"`,
		"default_policy_class: 12\npolicy_classes: [{name: a, slo_ms: 1, quantum: 1}]\n": `line 1: field "default_policy_class": expected a string, got number 12 (quote it to give it as a name)`,
		"default_policy_class: !!str 12\n":                                               `line 1: field "default_policy_class": expected a string, got a tagged value (!!str): give it untagged`,
		"policy_classes: {name: a}\n":                                                    `line 1: field "policy_classes": expected a list, got a mapping`,
		"policy_classes: [3]\n":                                                          `line 1: field "policy_classes[0]": expected a mapping, got number 3`,
		"worker_selection:\n  instances:\n    - {name: x, type: kv, parameters: 1}\n":    `line 3: field "worker_selection.instances[0].parameters": expected a mapping, got number 1`,
		"worker_selection: [default]\n":                                                  `line 1: field "worker_selection": expected a mapping, got a list`,
		"- default_policy_class: a\n":                                                    `line 1: expected a mapping, got a list`,
		"default_policy_class: a\npolicy_classes:\n  - name: \"\xff\"\n":                 `line 3: not YAML: not valid UTF-8`,
		// Required keys.
		"default_policy_class: a\npolicy_classes:\n  - name: a\n    quantum: 1\n":          `line 3: field "policy_classes[0].slo_ms": required: a policy class gives name, slo_ms, quantum`,
		"default_policy_class: a\npolicy_classes:\n  - {name: ~, slo_ms: 1, quantum: 1}\n": `field "policy_classes[0].name": required`,
		"worker_selection:\n  instances:\n    - name: x\n":                                 `line 3: field "worker_selection.instances[0].type": required: a worker_selection instance gives name, type`,
		// Dynamo's rules of presence, in its words.
		"":                            `--router-policy-config p.yaml: invalid router policy config: router policy config must define a root profile, at least one model profile, or worker_selection`,
		"# only a comment\n":          `--router-policy-config p.yaml: invalid router policy config: ` + nothingDefined,
		"~\n":                         `--router-policy-config p.yaml: invalid router policy config: ` + nothingDefined,
		"{}\n":                        `line 1: invalid router policy config: ` + nothingDefined,
		"models: {}\n":                `line 1: invalid router policy config: ` + nothingDefined,
		"default_policy_class: ~\n":   `line 1: invalid router policy config: ` + nothingDefined,
		"\ndefault_policy_class: a\n": `line 2: invalid router policy config: root profile must specify both default_policy_class and policy_classes when either is present`,
		"policy_classes: []\n":        `line 1: invalid router policy config: root profile must specify both default_policy_class and policy_classes when either is present`,
		"default_policy_class: a\npolicy_classes: []\n":                                  `line 2: invalid router policy config: root policy_classes must not be empty`,
		"default_policy_class: ''\npolicy_classes: [{name: a, slo_ms: 1, quantum: 1}]\n": `line 1: invalid router policy config: root policy class name "" must match [A-Za-z0-9_.-]+`,
		"worker_selection: {}\n":               `line 1: invalid router policy config: worker_selection must define an instance or a default`,
		"worker_selection:\n  instances: []\n": `line 2: invalid router policy config: worker_selection must define an instance or a default`,
		"worker_selection:\n  default: ''\n":   `line 2: field "worker_selection.default": names no instance`,
		// What this router does not take.
		"models:\n  example/large-model:\n    default_policy_class: a\n": `line 2: field "models": per-model profiles are not taken here: Dynamo picks one by the request's model name, and a request here names no model; put default_policy_class and policy_classes at the root`,
		"default_policy_class: a\n---\npolicy_classes: []\n":             `line 3: a second YAML document: a policy config is one document`,
		"default_policy_class: [\n":                                      `line 1: not YAML:`,
	} {
		_, err := loadPolicyConfig(t, yaml)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q:\n got %v\nwant %q", yaml, err, want)
		}
	}
}

// TestPolicyConfigValidationNamesFlagAndLine: a file that reads well but
// breaks Dynamo's rules is refused by Config.Validate in Dynamo's words,
// the message naming the flag, the file and the line of the key at fault.
// Catches nameTheFlag matching only whole keys (a list's element would
// keep "config policy_classes[1]...", naming no flag), and the line of the
// list taken for its element's.
func TestPolicyConfigValidationNamesFlagAndLine(t *testing.T) {
	for yaml, want := range map[string]string{
		"default_policy_class: a\npolicy_classes:\n  - name: a\n    slo_ms: 1\n    quantum: 1\n  - name: b\n    slo_ms: 1\n    quantum: 0\n": `--router-policy-config p.yaml line 8 (config policy_classes[1].quantum): root policy class "b" quantum must be greater than zero`,
		"default_policy_class: c\npolicy_classes:\n  - name: a\n    slo_ms: 1\n    quantum: 1\n":                                             `--router-policy-config p.yaml line 1 (config default_policy_class): root default_policy_class "c" does not name a configured policy class`,
		"default_policy_class: a\npolicy_classes:\n  - {name: a, slo_ms: 1, quantum: 1}\n  - {name: a, slo_ms: 2, quantum: 1}\n":             `--router-policy-config p.yaml line 4 (config policy_classes[1].name): root contains duplicate policy class "a"`,
		"worker_selection:\n  default: missing\n":                                `--router-policy-config p.yaml line 2 (config worker_selection.default): worker_selection default "missing" does not name a configured instance`,
		"worker_selection:\n  instances:\n    - name: default\n      type: kv\n": `--router-policy-config p.yaml line 3 (config worker_selection.instances[0].name): worker_selection instance name 'default' is reserved for Dynamo's built-in selector`,
	} {
		_, err := loadPolicyConfig(t, yaml)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q:\n got %v\nwant %q", yaml, err, want)
		}
	}
}

// TestNameTheFlagKeepsKeyBoundaries: a flag that set "policy" does not
// claim an error about policy_classes, and one about a key no flag set
// keeps its words. Catches a bare prefix match.
func TestNameTheFlagKeepsKeyBoundaries(t *testing.T) {
	_, err := LoadConfig([]byte(`{"default_policy_class":"a","policy_classes":[{"name":"a","slo_ms":1,"quantum":0}]}`),
		[]Override{{Key: "policy", Value: "kv", Flag: "--policy"}})
	if err == nil || err.Error() != `config policy_classes[0].quantum: root policy class "a" quantum must be greater than zero` {
		t.Fatalf("got %v", err)
	}
}

// TestPolicyConfigAgainstAConfigCommand: the file's keys are explicit, as
// a flag's: a config command that sets the classes otherwise is a conflict
// naming the flag and the file; one that sets them the same is not, and
// one that sets other keys goes over them. Catches the file's overrides
// left out of Merge's conflict check.
func TestPolicyConfigAgainstAConfigCommand(t *testing.T) {
	ovs, err := PolicyConfigOverrides("p.yaml", []byte(premium4x))
	if err != nil {
		t.Fatal(err)
	}
	src := ConfigSource{Overrides: ovs}
	d := decode(t, `{"op":"config","policy_classes":[{"name":"regular","slo_ms":1,"quantum":1}]}`)
	if _, perr := src.Merge(d.Cmd.Config); perr == nil || !strings.Contains(perr.Message, `field "policy_classes": the config command sets [{"name":"regular","slo_ms":1,`) ||
		!strings.Contains(perr.Message, `but --router-policy-config p.yaml set [{"name":"premium"`) {
		t.Fatalf("got %v", perr)
	}
	d = decode(t, `{"op":"config","default_policy_class":"regular","seed":4}`)
	cfg, perr := src.Merge(d.Cmd.Config)
	if perr != nil || cfg.Seed != 4 || len(cfg.PolicyClasses) != 2 {
		t.Fatalf("%+v, %v", cfg, perr)
	}
}

// TestPolicyConfigNestingIsBounded: a file nested past maxPolicyDepth, by
// flow brackets, indentation or block indicators, is refused naming the
// line before goccy's parser, whose memory grows with the square of the
// depth, reads it; brackets in quoted scalars and comments do not count,
// and a file at the bound is read. (Catches: the scan dropped, so the
// 100,000-deep file takes gigabytes; quotes or comments counted, refusing
// a good file; a depth carried wrongly across lines.)
func TestPolicyConfigNestingIsBounded(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for yaml, line := range map[string]int{
		"default_policy_class: a\npolicy_classes: " + deep(100000) + "\n":     2,
		"policy_classes:\n" + strings.Repeat("[\n", maxPolicyDepth+1):         maxPolicyDepth + 2,
		"policy_classes:\n" + strings.Repeat(" ", maxPolicyDepth+1) + "- x\n": 2,
		"policy_classes:\n" + strings.Repeat("- ", maxPolicyDepth+1) + "x\n":  2,
	} {
		_, err := PolicyConfigOverrides("p.yaml", []byte(yaml))
		if want := fmt.Sprintf("line %d: nested deeper than %d levels", line, maxPolicyDepth); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q...: %v, want %q", yaml, err, want)
		}
	}
	good := "default_policy_class: a # " + deep(maxPolicyDepth+1) + "\npolicy_classes: [{name: a, slo_ms: 1, quantum: 1}]\n" +
		"worker_selection: {instances: [{name: 'x" + deep(maxPolicyDepth+1) + "', type: kv}]}\n"
	if _, err := PolicyConfigOverrides("p.yaml", []byte(good)); err != nil {
		t.Errorf("brackets in a comment and a quoted name must not count as nesting: %v", err)
	}
	if line := tooDeep([]byte("a: " + deep(maxPolicyDepth))); line != 0 {
		t.Errorf("a file at the bound is refused at line %d", line)
	}
}
