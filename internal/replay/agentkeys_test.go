package replay

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
)

// The keys are the adapter's, vector for vector (scripts/affinity_keys.json,
// which the Python adapter's tests check too).
func TestAgentKeysMatchTheAdapter(t *testing.T) {
	data, err := os.ReadFile("../../scripts/affinity_keys.json")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Vectors []struct {
			Comment, Mode      string
			Scope, Parent      *string
			Session, Root, Key string
		}
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range spec.Vectors {
		if v.Scope == nil {
			continue // an agentic request always has its play for scope
		}
		a := &Agent{Play: *v.Scope, Conversation: v.Session, Root: v.Root}
		if v.Parent != nil {
			a.Parent = *v.Parent
		}
		session, parent := agentKeys(a, protocol.AffinityKey(v.Mode))
		if got := session + parent; got != v.Key || (session != "" && parent != "") {
			t.Errorf("%s: got session %q, parent %q; want %q", v.Comment, session, parent, v.Key)
		}
		if (v.Mode == "sibling_group" && v.Parent != nil) != (parent != "") {
			t.Errorf("%s: a child's key goes as its parent session, a root's as its session; got parent %q", v.Comment, parent)
		}
	}
}

func TestGroupKeyDigestsALongKey(t *testing.T) {
	long := groupKey("session", "p", strings.Repeat("x", 300))
	if !strings.HasPrefix(long, "sha256:") || len(long) != len("sha256:")+64 {
		t.Errorf("got %q", long)
	}
	if k := groupKey("session", "p", strings.Repeat("x", 256-len(`["session","p",""]`))); len(k) != 256 || k[0] != '[' {
		t.Errorf("a key of 256 bytes is sent as it is, got %q", k)
	}
}
