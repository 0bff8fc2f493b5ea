package replay

import (
	"slices"
	"strconv"
)

// versus measures each contender against the baseline on the verdict
// metrics (a paired bootstrap over sessions, on every repeat's records)
// and words the verdicts. byContender holds each contender's results,
// repeats in order. Jobs goroutines draw the resamples; each resample is
// the same whichever draws it, so the report does not depend on how many.
func (e *Experiment) versus(d *Deterministic, byContender [][]*Result) {
	d.Verdicts = []string{}
	bi := slices.IndexFunc(e.Contenders, func(c Contender) bool { return c.Name == e.Baseline })
	if bi < 0 {
		return
	}
	clusters, ids := e.clusters(byContender[bi])
	sets := make([]*bootSet, len(byContender))
	var others []*bootSet
	for c, results := range byContender {
		sets[c] = e.bootSetOf(results, ids, clusters)
		if c != bi {
			others = append(others, sets[c])
		}
	}
	outcomes := pairedBootstrap(sets[bi], others, clusters, e.Jobs)
	versus := make([][]Versus, len(sets))
	for c := range sets {
		if c == bi {
			continue
		}
		o := &outcomes[0]
		outcomes = outcomes[1:]
		for m, vm := range verdictMetrics {
			if !o.ok[m] || vm.key == "request_goodput" && !e.Goodput.Set() {
				continue
			}
			v := Versus{Metric: vm.key, Ratio: o.ratio[m], CI95: o.ci[m]}
			judge(&v, vm.lower)
			versus[c] = append(versus[c], v)
		}
	}
	for c := range sets {
		d.Contenders[c].Versus = versus[c]
		for _, v := range versus[c] {
			d.Verdicts = append(d.Verdicts, verdictLine(e.Contenders[c].Name, e.Baseline, metricLabel(v.Metric), v))
		}
	}
}

// clusters numbers the bootstrap's units over the rows of every repeat,
// from the baseline's records (every contender ran the same requests):
// an agent play (whose requests wait on each other), a session, or a
// request of neither. A trace's session is one unit across
// the repeats (the same requests each time); a generated workload's
// sessions are new at each repeat, each its own unit.
func (e *Experiment) clusters(results []*Result) (int, [][]int32) {
	byKey := map[string]int32{}
	ids := make([][]int32, len(results))
	for k, res := range results {
		recs := res.Records()
		ids[k] = make([]int32, len(recs))
		for i := range recs {
			key := "r\x00" + recs[i].RequestID
			switch {
			case recs[i].PlayID != "":
				key = "p\x00" + recs[i].PlayID
			case recs[i].SessionID != "":
				key = "s\x00" + recs[i].SessionID
			}
			if e.TracePath == "" {
				key = strconv.Itoa(k) + "\x00" + key
			}
			id, ok := byKey[key]
			if !ok {
				id = int32(len(byKey))
				byKey[key] = id
			}
			ids[k][i] = id
		}
	}
	return len(byKey), ids
}

// bootSetOf is one contender's rows over its repeats, for the bootstrap.
func (e *Experiment) bootSetOf(results []*Result, ids [][]int32, clusters int) *bootSet {
	var rows []bootRow
	duration := 0.0
	for k, res := range results {
		duration += res.Metrics.Duration
		recs := res.Records()
		for i := range recs {
			r := &recs[i]
			rows = append(rows, bootRow{cluster: ids[k][i], completed: r.Rejected == "" && r.WorkerID >= 0,
				good: e.Goodput.Meets(r), ttft: r.TTFTMS, hit: r.CachedTokens, input: r.InputTokens})
		}
	}
	return newBootSet(rows, duration, clusters)
}
