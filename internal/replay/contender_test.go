package replay

import (
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/wire"
)

// TestParseContender reads the forms docs/replay.md gives and refuses, by
// name, what a contender may not set. Catches a split inside a JSON value,
// a name check applied to the unnamed form, and each refusal dropped.
func TestParseContender(t *testing.T) {
	for text, want := range map[string]ContenderSpec{
		"kv":                                {Name: "kv", Policy: "kv"},
		"kv=kv":                             {Name: "kv", Policy: "kv"},
		"kv-scale4=kv:prefill_load_scale=4": {Name: "kv-scale4", Policy: "kv", Settings: []string{"prefill_load_scale=4"}},
		"kv:prefill_load_scale=2,overlap_score_credit=2": {Name: "kv:prefill_load_scale=2,overlap_score_credit=2", Policy: "kv",
			Settings: []string{"prefill_load_scale=2", "overlap_score_credit=2"}},
		`k=kv:affinity={"mode":"hard","ttl_ms":5},temperature=0.5`: {Name: "k", Policy: "kv",
			Settings: []string{`affinity={"mode":"hard","ttl_ms":5}`, "temperature=0.5"}},
	} {
		got, err := ParseContender(text)
		if err != nil || got.Name != want.Name || got.Policy != want.Policy || strings.Join(got.Settings, "|") != strings.Join(want.Settings, "|") {
			t.Errorf("%s: %+v, %v; want %+v", text, got, err, want)
		}
	}
	for text, why := range map[string]string{
		"=kv":                              "an empty name",
		"a b=kv":                           "a name with a space",
		"round_robin=kv":                   "round_robin is a policy's name",
		"kv=kv:prefill_load_scale=2":       "kv is a policy's name",
		"k=kv:seed=7":                      "seed: the seed is the run's",
		"k=kv:block_size=16":               "block_size: the trace's hashes",
		"k=kv:worker_defaults.dp_size=2":   "worker_defaults.dp_size: replay announces its own workers",
		"k=kv:policy=random":               "the policy is given before the colon",
		"k=kv:prefill_load_scale=1e400":    "out of a number's range",
		"k=kv:temperature=1,temperature=2": "temperature is set twice",
		"k=kv:temperature":                 `setting "temperature" is not KEY=VALUE`,
	} {
		if _, err := ParseContender(text); err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "--contender") {
			t.Errorf("%s: %v, want an error naming --contender and saying %q", text, err, why)
		}
	}
}

// TestContenderSetsPolicyClasses: a contender's settings may give the
// router's policy classes, a JSON list of objects, beside its default
// class (as a sweep's grid gives them, docs/sweep.md), and the config it
// runs has them. Catches a split at the commas between the list's objects
// and the list taken as a string. Needs the wire's policy_classes.
func TestContenderSetsPolicyClasses(t *testing.T) {
	const classes = `[{"name":"premium","slo_ms":600000,"quantum":512},{"name":"regular","slo_ms":600000,"quantum":128}]`
	spec, err := ParseContender("premium4x=kv:default_policy_class=regular,policy_classes=" + classes)
	if err != nil || len(spec.Settings) != 2 || spec.Settings[1] != "policy_classes="+classes {
		t.Fatalf("%+v, %v", spec, err)
	}
	cfg, err := wire.ConfigSource{Overrides: spec.Overrides()}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DefaultPolicyClass != "regular" || len(cfg.PolicyClasses) != 2 || cfg.PolicyClasses[0].Name != "premium" ||
		cfg.PolicyClasses[1].Quantum != 128 {
		t.Fatalf("classes %q %+v", cfg.DefaultPolicyClass, cfg.PolicyClasses)
	}
}
