package selector

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
)

// TestEveryPolicyHasAnEntry holds the table to protocol.Policies both ways.
// (Catches: a policy added to protocol.Policies without an entry, which
// once ran as least_loaded; an entry for a policy the config refuses.)
func TestEveryPolicyHasAnEntry(t *testing.T) {
	for _, p := range protocol.Policies {
		s, ok := specs[p]
		if !ok {
			t.Errorf("policy %q has no entry in the policy table", p)
			continue
		}
		if s.pick == nil || s.Picks == "" {
			t.Errorf("policy %q: entry %+v is incomplete", p, s)
		}
	}
	for p := range specs {
		if !slices.Contains(protocol.Policies, p) {
			t.Errorf("the table has an entry for %q, which protocol.Policies does not list", p)
		}
	}
	// Dynamo's router modes name their policies (catches a mode mapped to
	// another policy, or two policies claiming one mode).
	for mode, want := range map[string]protocol.Policy{"kv": protocol.PolicyKV, "round-robin": protocol.PolicyRoundRobin,
		"random": protocol.PolicyRandom, "least-loaded": protocol.PolicyLeastLoaded} {
		if got, ok := OfDynamo(mode); !ok || got != want {
			t.Errorf("Dynamo's --router-mode %s is %q here (%v), want %s", mode, got, ok, want)
		}
	}
	if p, ok := OfDynamo(""); ok {
		t.Errorf("no mode names %s", p)
	}
}

// seededDraws is a fixed stream, so two selections can be compared.
type seededDraws struct {
	r    *rand.Rand
	turn uint64
}

func newDraws() *seededDraws { return &seededDraws{r: rand.New(rand.NewPCG(7, 11))} }

func (d *seededDraws) Index(n int) int { return d.r.IntN(n) }
func (d *seededDraws) Unit() float64   { return d.r.Float64() }
func (d *seededDraws) Turn() uint64    { d.turn++; return d.turn - 1 }

// perturb changes, in every candidate, the fields of one Reads bit.
func perturb(cands []Candidate, field Reads, r *rand.Rand) {
	for i := range cands {
		c := &cands[i]
		switch field {
		case ReadsActiveRequests:
			c.ActiveRequests = r.Uint64N(8)
		case ReadsKey:
			c.Key = r.Uint64()
		case ReadsRouted:
			c.Routed, c.TreeBlocks = r.Uint64N(6), r.Uint64N(40)
		case ReadsWaiting:
			c.Waiting = r.Uint64N(8)
		case ReadsKVUsage:
			c.KVUsage = r.Float64()
		}
	}
}

var everyRead = []Reads{ReadsActiveRequests, ReadsKey, ReadsRouted, ReadsWaiting, ReadsKVUsage}

// TestPoliciesReadWhatTheyDeclare: changing a field a policy does not
// declare never changes its choice or its probabilities, and each field it
// declares changes its choice on some candidates. (Catches: a policy that
// reads a field its entry leaves out, which the engine then never fills,
// so it picks on zeros; an entry that declares a field its pick ignores,
// which makes the engine work it out for nothing.)
func TestPoliciesReadWhatTheyDeclare(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range protocol.Policies {
		spec := Of(p)
		params := Params{Policy: p, BlockSize: 16, Temperature: 0.5, OverlapScoreCredit: 1, PrefillLoadScale: 1,
			SGLang: protocol.DefaultConfig().SGLang, LLMD: protocol.DefaultConfig().LLMD}
		params.SGLang.BalanceAbsThreshold = 2
		matters := map[Reads]bool{}
		for trial := 0; trial < 300; trial++ {
			cands := make([]Candidate, 2+r.IntN(5))
			for i := range cands {
				cands[i] = Candidate{Overlap: r.Uint64N(6), PrefillTokens: float64(r.Uint64N(200)), DecodeBlocks: r.Uint64N(50)}
			}
			for _, f := range everyRead {
				perturb(cands, f, r)
			}
			req := Request{ISL: 96, Blocks: 6, Session: []string{"", "s1", "s2"}[r.IntN(3)]}
			before := Select(params, req, cands, -1, newDraws(), nil)
			beforeScores := slices.Clone(before.Scores)
			for _, f := range everyRead {
				changed := slices.Clone(cands)
				perturb(changed, f, r)
				after := Select(params, req, changed, -1, newDraws(), nil)
				differs := after.Index != before.Index || !slices.Equal(after.Scores, beforeScores)
				if spec.Reads&f == 0 && differs {
					t.Fatalf("%s: changing undeclared field %b changed the choice (%d -> %d)", p, f, before.Index, after.Index)
				}
				if differs {
					matters[f] = true
				}
			}
		}
		for _, f := range everyRead {
			if spec.Reads&f != 0 && !matters[f] {
				t.Errorf("%s declares field %b, but changing it never changed a choice", p, f)
			}
		}
	}
}
