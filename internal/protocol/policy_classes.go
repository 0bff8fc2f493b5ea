package protocol

import (
	"fmt"
	"math"
)

// Policy classes and worker-selection instances are checked with the rules
// and, where it has them, the words of Dynamo's policy_config.rs at the
// pinned commit (its Validation errors), each prefixed with the key.

// SyntheticPolicyClass names the one class of a config without classes,
// as Dynamo names its fallback.
const SyntheticPolicyClass = "default"

// identifier is Dynamo's rule for class and instance names.
func identifier(name string) bool {
	if name == "" {
		return false
	}
	for i := range len(name) {
		b := name[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '.' || b == '-') {
			return false
		}
	}
	return true
}

func (c *Config) validatePolicyClasses() error {
	if (c.DefaultPolicyClass == "") != (len(c.PolicyClasses) == 0) {
		return fmt.Errorf("config default_policy_class: root profile must specify both default_policy_class and policy_classes when either is present")
	}
	if len(c.PolicyClasses) == 0 {
		return nil
	}
	if !identifier(c.DefaultPolicyClass) {
		return fmt.Errorf("config default_policy_class: root policy class name %q must match [A-Za-z0-9_.-]+", c.DefaultPolicyClass)
	}
	seen := make(map[string]bool, len(c.PolicyClasses))
	for i := range c.PolicyClasses {
		pc := &c.PolicyClasses[i]
		key := fmt.Sprintf("config policy_classes[%d]", i)
		switch {
		case !identifier(pc.Name):
			return fmt.Errorf("%s.name: root policy class name %q must match [A-Za-z0-9_.-]+", key, pc.Name)
		case pc.Quantum == 0:
			return fmt.Errorf("%s.quantum: root policy class %q quantum must be greater than zero", key, pc.Name)
		case pc.SLOMS == 0:
			return fmt.Errorf("%s.slo_ms: root policy class %q slo_ms must be greater than zero", key, pc.Name)
		case pc.PrefillBusyThresholdFrac != nil && (math.IsNaN(*pc.PrefillBusyThresholdFrac) || math.IsInf(*pc.PrefillBusyThresholdFrac, 0) || *pc.PrefillBusyThresholdFrac < 0):
			return fmt.Errorf("%s.prefill_busy_threshold_frac: root policy class %q prefill_busy_threshold_frac must be finite and non-negative", key, pc.Name)
		case pc.SLOMS > MaxNumber:
			return fmt.Errorf("%s.slo_ms: expected at most %d, got %d", key, uint64(MaxNumber), pc.SLOMS)
		case pc.PrefillBusyThresholdFrac != nil && *pc.PrefillBusyThresholdFrac > MaxNumber:
			return fmt.Errorf("%s.prefill_busy_threshold_frac: expected at most %d, got %v", key, uint64(MaxNumber), *pc.PrefillBusyThresholdFrac)
		case seen[pc.Name]:
			return fmt.Errorf("%s.name: root contains duplicate policy class %q", key, pc.Name)
		}
		seen[pc.Name] = true
		// Every config number is at most 2^53 (PROTOCOL.md §6), so the
		// router's sums and float compares of them stay exact.
		for _, n := range []struct {
			key string
			v   *uint64
		}{{"quantum", &pc.Quantum}, {"prefill_busy_threshold", pc.PrefillBusyThreshold}, {"request_queue_limit_per_worker", pc.RequestQueueLimitPerWorker},
			{"raw_isl_token_queue_limit_per_worker", pc.RawISLTokenQueueLimitPerWorker}, {"cached_token_queue_limit_per_worker", pc.CachedTokenQueueLimitPerWorker}} {
			if n.v != nil && *n.v > MaxNumber {
				return fmt.Errorf("%s.%s: expected at most %d, got %d", key, n.key, uint64(MaxNumber), *n.v)
			}
		}
	}
	if !seen[c.DefaultPolicyClass] {
		return fmt.Errorf("config default_policy_class: root default_policy_class %q does not name a configured policy class", c.DefaultPolicyClass)
	}
	return nil
}

// ClassIndex is the index in PolicyClasses of the class a request names
// (nil or "": the default class), or -1 when no class has that name.
// Without classes every request is in the synthetic class, 0, whatever it
// names, as in Dynamo's fallback profile.
func (c *Config) ClassIndex(name *string) int {
	if len(c.PolicyClasses) == 0 {
		return 0
	}
	want := c.DefaultPolicyClass
	if name != nil && *name != "" {
		want = *name // matched exactly: Dynamo neither trims nor folds case
	}
	for i := range c.PolicyClasses {
		if c.PolicyClasses[i].Name == want {
			return i
		}
	}
	return -1
}

func (c *Config) validateWorkerSelection() error {
	ws := &c.WorkerSelection
	names := make(map[string]bool, len(ws.Instances))
	for i := range ws.Instances {
		in := &ws.Instances[i]
		field := fmt.Sprintf("worker_selection.instances[%d]", i)
		key := "config " + field
		switch {
		case !identifier(in.Name):
			return fmt.Errorf("%s.name: worker_selection instance name %q must match [A-Za-z0-9_.-]+", key, in.Name)
		case in.Name == "default":
			return fmt.Errorf("%s.name: worker_selection instance name 'default' is reserved for Dynamo's built-in selector", key)
		case names[in.Name]:
			return fmt.Errorf("%s.name: worker_selection contains duplicate instance %q", key, in.Name)
		}
		names[in.Name] = true
		if err := checkPolicy(field+".type", in.Type); err != nil {
			return err
		}
		p := &in.Parameters
		for _, kv := range []struct {
			key string
			v   *float64
		}{{"temperature", p.Temperature}, {"overlap_score_credit", p.OverlapScoreCredit}, {"prefill_load_scale", p.PrefillLoadScale}} {
			if v := kv.v; v != nil && (*v < 0 || math.IsNaN(*v) || *v > MaxNumber) {
				return fmt.Errorf("%s.parameters.%s: expected a finite number from 0 to %d, got %v", key, kv.key, uint64(MaxNumber), *v)
			}
		}
		if t := p.Temperature; t != nil && *t != 0 && *t < 1e-6 {
			return fmt.Errorf("%s.parameters.temperature: expected 0, or at least 1e-6, got %v", key, *t)
		}
	}
	for _, stage := range []struct{ key, name string }{{"default", ws.Default}, {"prefill", ws.Prefill}, {"decode", ws.Decode}} {
		// "default" names Dynamo's built-in selector: here the config's
		// own policy and knobs, as "" does.
		if stage.name != "" && stage.name != "default" && !names[stage.name] {
			return fmt.Errorf("config worker_selection.%s: worker_selection %s %q does not name a configured instance", stage.key, stage.key, stage.name)
		}
	}
	return nil
}

// Selection is the policy and selector knobs role places with: the
// worker-selection instance its role names, or the default one, over the
// config's own (PROTOCOL.md §5).
func (c *Config) Selection(role Role) (policy Policy, temperature, credit, scale float64) {
	policy, temperature, credit, scale = c.Policy, c.Temperature, c.OverlapScoreCredit, c.PrefillLoadScale
	ws := &c.WorkerSelection
	name := ws.Default
	switch {
	case role == RolePrefill && ws.Prefill != "":
		name = ws.Prefill
	case role == RoleDecode && ws.Decode != "":
		name = ws.Decode
	}
	for i := range ws.Instances {
		in := &ws.Instances[i]
		if in.Name != name {
			continue
		}
		policy = in.Type
		if p := in.Parameters.Temperature; p != nil {
			temperature = *p
		}
		if p := in.Parameters.OverlapScoreCredit; p != nil {
			credit = *p
		}
		if p := in.Parameters.PrefillLoadScale; p != nil {
			scale = *p
		}
	}
	return policy, temperature, credit, scale
}
