package sweep

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Scenarios: a spec's "scenario" names flags (the engine, the cluster's
// size, its cache, the load: "workers", "arrival-speedup-ratio", ...)
// whose values, with the workload, make a scenario. Points of one
// scenario are judged together and apart from the others; what competes
// across them is a point's settings without the scenario's.

// scenarioOf is the point's values of the scenario flags, as the grid
// gave them (--flag=value), in the spec's order.
func (t *TableResult) scenarioOf(p *Point) []string {
	out := []string{}
	for _, name := range t.Scenario {
		for _, f := range p.Varied {
			if strings.HasPrefix(f, "--"+name+"=") {
				out = append(out, f)
			}
		}
	}
	return out
}

// contenderOf is the point's grid settings without the scenario flags,
// as the table prints them.
func contenderOf(p *Point, scenario []string) string {
	var out []string
	for _, f := range p.Varied {
		name, _, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if !slices.Contains(scenario, name) {
			out = append(out, f)
		}
	}
	return strings.Join(out, " ")
}

// Tally is how one contender fared over the scenarios it ran in.
type Tally struct {
	Contender string `json:"contender"`
	Scenarios int    `json:"scenarios"`
	Wins      int    `json:"wins"` // recommended
	Ties      int    `json:"ties"` // in a tied set, where none was recommended
}

// tally counts each contender's wins and ties, most wins first, then most
// ties, then in spec order.
func (t *TableResult) tally() {
	t.Summary = []Tally{}
	at := map[string]int{}
	get := func(p *Point) *Tally {
		c := contenderOf(p, t.Scenario)
		i, ok := at[c]
		if !ok {
			i = len(t.Summary)
			at[c] = i
			t.Summary = append(t.Summary, Tally{Contender: c})
		}
		return &t.Summary[i]
	}
	byID := map[string]*Point{}
	for i := range t.Points {
		byID[t.Points[i].ID] = &t.Points[i].Point
	}
	for i := range t.Points { // every contender, in spec order, once per scenario it ran in
		get(&t.Points[i].Point).Scenarios++
	}
	for _, w := range t.Workloads {
		if w.Recommended != nil {
			get(byID[*w.Recommended]).Wins++
		}
		for _, id := range w.Tied {
			get(byID[id]).Ties++
		}
	}
	slices.SortStableFunc(t.Summary, func(a, b Tally) int { return cmp.Or(cmp.Compare(b.Wins, a.Wins), cmp.Compare(b.Ties, a.Ties)) })
}

// edges warns of each knob of the recommended point that is at its grid
// block's edge: the smallest or largest of two or more numbers the block
// tries (the block being the points varying the same flags), but at a
// floor of 0 or a ceiling of 1.
func (t *TableResult) edges(rec *PointResult, triedBy map[string]map[string][]float64) []string {
	out := []string{}
	tried := triedBy[blockOf(&rec.Point)]
	for _, f := range rec.Varied {
		name, value, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		x, err := strconv.ParseFloat(value, 64)
		if err != nil || slices.Contains(t.Scenario, name) || len(tried[name]) < 2 {
			continue
		}
		values := tried[name]
		lo, hi := slices.Min(values), slices.Max(values)
		switch {
		case x == 0 && x == lo, x == 1 && x == hi && lo >= 0:
			// A knob at 0 is taken to be at its floor (a weight, a
			// temperature, a threshold), one at 1 of values in [0, 1] at
			// its ceiling (a share): nothing lies beyond to try.
		case x == hi:
			out = append(out, fmt.Sprintf("--%s=%s is the largest value its grid block tries (%s): the best may lie above it", name, value, listed(values)))
		case x == lo:
			out = append(out, fmt.Sprintf("--%s=%s is the smallest value its grid block tries (%s): the best may lie below it", name, value, listed(values)))
		}
	}
	return out
}

// blockOf names a point's grid block by the flags it varies.
func blockOf(p *Point) string {
	names := make([]string, len(p.Varied))
	for i, f := range p.Varied {
		names[i], _, _ = strings.Cut(f, "=")
	}
	return strings.Join(names, " ")
}

// triedValues is, per grid block and flag, the numbers the block tries:
// one pass over the points.
func (t *TableResult) triedValues() map[string]map[string][]float64 {
	out := map[string]map[string][]float64{}
	for i := range t.Points {
		p := &t.Points[i].Point
		block := blockOf(p)
		if out[block] == nil {
			out[block] = map[string][]float64{}
		}
		for _, f := range p.Varied {
			name, value, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
			if y, err := strconv.ParseFloat(value, 64); err == nil && !slices.Contains(out[block][name], y) {
				out[block][name] = append(out[block][name], y)
			}
		}
	}
	return out
}

// listed writes the values tried, in order.
func listed(xs []float64) string {
	s := slices.Sorted(slices.Values(xs))
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = strconv.FormatFloat(x, 'g', -1, 64)
	}
	return strings.Join(parts, ", ")
}

// ScenarioPoints is the points of each of Workloads (a workload's
// scenario), in spec order: one pass over the points.
func (t *TableResult) ScenarioPoints() [][]*PointResult {
	at := map[string]int{}
	for i := range t.Workloads {
		at[scenarioKey(t.Workloads[i].Workload, t.Workloads[i].Scenario)] = i
	}
	out := make([][]*PointResult, len(t.Workloads))
	for i := range t.Points {
		p := &t.Points[i]
		if w, ok := at[scenarioKey(p.Workload, t.scenarioOf(&p.Point))]; ok {
			out[w] = append(out[w], p)
		}
	}
	return out
}

// scenarioKey names a workload's scenario in a map.
func scenarioKey(workload string, scenario []string) string {
	return workload + "\x00" + strings.Join(scenario, "\x00")
}
