package kvindex

import (
	"testing"

	"pgregory.net/rapid"
)

// TestEdgeTableMatchesAMap: random adds and removes, with tiny key spaces
// so that probe runs wrap, removals shift them back and rehashes happen.
func TestEdgeTableMatchesAMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var tab edgeTable
		model := map[edge]uint32{}
		next := uint32(1)
		for range rapid.IntRange(1, 400).Draw(t, "steps") {
			e := edge{parent: rapid.Uint32Range(0, 5).Draw(t, "parent"), local: rapid.Uint64Range(0, 40).Draw(t, "local")}
			if _, ok := model[e]; ok && rapid.Bool().Draw(t, "remove") {
				if node, ok := tab.take(e.parent, e.local); !ok || node != model[e] {
					t.Fatalf("take(%v) = %d, %v; model has %d", e, node, ok, model[e])
				}
				delete(model, e)
			} else {
				node, added := tab.findOrAdd(e.parent, e.local, func() uint32 { next++; return next })
				if want, ok := model[e]; ok != !added || (ok && node != want) {
					t.Fatalf("findOrAdd(%v) = %d, %v; model has %d, %v", e, node, added, want, ok)
				}
				model[e] = node
			}
			if tab.used != len(model) {
				t.Fatalf("%d live edges, model %d", tab.used, len(model))
			}
			probe := edge{parent: rapid.Uint32Range(0, 5).Draw(t, "probe_parent"), local: rapid.Uint64Range(0, 40).Draw(t, "probe_local")}
			got, ok := tab.find(probe.parent, probe.local)
			if want, wok := model[probe]; ok != wok || got != want {
				t.Fatalf("find(%v) = %d, %v; model %d, %v", probe, got, ok, want, wok)
			}
		}
	})
}

// edge is an edge of the tree, for the model above.
type edge struct {
	parent uint32
	local  uint64
}
