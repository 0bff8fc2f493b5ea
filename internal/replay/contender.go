package replay

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/offline-router/offline-router/internal/wire"
)

// ContenderSpec is a contender as written on the command line or in a
// sweep spec: [NAME=]POLICY[:KEY=VALUE[,KEY=VALUE...]], KEY a config-file
// key (dotted for nested ones: affinity.mode), VALUE JSON or a bare
// string. "kv", "kv-scale4=kv:prefill_load_scale=4",
// "kv-hard=kv:affinity.mode=hard".
type ContenderSpec struct {
	Name     string
	Policy   string
	Settings []string // KEY=VALUE, as given
}

// ParseContender reads one contender. Without a name, one of plain policy
// is named after it, and one with settings after the whole text.
func ParseContender(text string) (ContenderSpec, error) {
	head, tail, hasSettings := strings.Cut(text, ":")
	var c ContenderSpec
	name, policy, named := strings.Cut(head, "=")
	if !named {
		name, policy = text, head
	}
	c.Name, c.Policy = name, policy
	bad := func(why string) (ContenderSpec, error) {
		return ContenderSpec{}, fmt.Errorf("--contender %q: %s (expected [NAME=]POLICY[:KEY=VALUE,...], e.g. kv-scale4=kv:prefill_load_scale=4)", text, why)
	}
	switch {
	case policy == "":
		return bad("no policy")
	case named && name == "":
		return bad("an empty name")
	case strings.ContainsAny(name, " \t\n,"):
		return bad("a name with a space or a comma")
	}
	if hasSettings {
		for _, kv := range strings.Split(tail, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" || v == "" {
				return bad(fmt.Sprintf("setting %q is not KEY=VALUE", kv))
			}
			if k == "policy" {
				return bad("the policy is given before the colon, not as a setting")
			}
			c.Settings = append(c.Settings, kv)
		}
	}
	return c, nil
}

// Overrides are the contender's policy and settings as config overrides,
// applied over the experiment's config: a VALUE that is JSON is taken as
// such (4, true, "x"), any other as a string (hard).
func (c *ContenderSpec) Overrides() []wire.Override {
	flag := "--contender " + c.Name
	out := []wire.Override{{Key: "policy", Value: c.Policy, Flag: flag}}
	for _, kv := range c.Settings {
		k, v, _ := strings.Cut(kv, "=")
		var value any = v
		if json.Valid([]byte(v)) {
			value = json.RawMessage(v)
		}
		out = append(out, wire.Override{Key: k, Value: value, Flag: flag})
	}
	return out
}
