package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
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
// is named after it, and one with settings after the whole text. A name
// may not be another policy's (a kv contender named round_robin would be
// taken for the baseline), nor a policy's own name with settings (kv with
// another prefill weight is not kv).
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
	case named && strings.ContainsAny(name, " \t\n,"):
		return bad("a name with a space or a comma")
	case named && slices.Contains(protocol.Policies, protocol.Policy(name)) && (name != policy || hasSettings):
		return bad(fmt.Sprintf("%s is a policy's name: give the contender one of its own", name))
	}
	if !hasSettings {
		return c, nil
	}
	seen := map[string]bool{}
	for _, kv := range splitSettings(tail) {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "" || v == "":
			return bad(fmt.Sprintf("setting %q is not KEY=VALUE", kv))
		case seen[k]:
			return bad(fmt.Sprintf("%s is set twice", k))
		}
		seen[k] = true
		top, _, _ := strings.Cut(k, ".")
		if why, ok := unsettable[top]; ok {
			return bad(fmt.Sprintf("%s: %s", k, why))
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil && math.IsInf(f, 0) || errors.Is(err, strconv.ErrRange) {
			return bad(fmt.Sprintf("%s=%s is out of a number's range", k, v))
		}
		c.Settings = append(c.Settings, kv)
	}
	return c, nil
}

// unsettable are the config keys a contender may not set, and why.
var unsettable = map[string]string{
	"policy":          "the policy is given before the colon, not as a setting",
	"seed":            "the seed is the run's (--seed, and --repeats for more of them), the same for every contender",
	"block_size":      "the trace's hashes are of one block size, the run's (--block-size)",
	"worker_defaults": "replay announces its own workers (--workers and the --worker-* flags)",
}

// splitSettings splits KEY=VALUE,KEY=VALUE at the commas that are not in
// a value's JSON string, object or list (affinity={"mode":"hard","ttl_ms":5}).
func splitSettings(s string) []string {
	var out []string
	depth, quoted, escaped, start := 0, false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case quoted:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
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
