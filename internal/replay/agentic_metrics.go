package replay

import "math"

// AgenticMetrics are an agent trace's own figures: its plays', and its
// requests' by kind (nil for a trace without plays).
type AgenticMetrics struct {
	Plays int `json:"plays"`
	// Makespan is a play's time from its first request's sending to its
	// last one's end, ms; ServingMS that less the recorded think and tool
	// times along its critical path (the dependency that released each
	// request, back from its last to end): the time the play spent on the
	// router, the queues and the engines.
	MeanMakespanMS float64 `json:"mean_makespan_ms"`
	P99MakespanMS  float64 `json:"p99_makespan_ms"`
	MeanServingMS  float64 `json:"mean_serving_ms"`
	P99ServingMS   float64 `json:"p99_serving_ms"`
	// Kinds are root, tool_continuation and subagent, those present.
	Kinds []KindMetrics `json:"kinds"`
	// SubagentColocation is the share of subagent requests run on the
	// worker of their sibling group's first request (its play, root and
	// parent: what sibling_group affinity binds), SubagentGroupHitRate the
	// share of subagent prompt tokens found cached there: what binding
	// siblings together buys. Absent without subagents.
	SubagentColocation   *float64 `json:"subagent_colocation,omitempty"`
	SubagentGroupHitRate *float64 `json:"subagent_group_hit_rate,omitempty"`
}

// KindMetrics are one kind's requests' figures (completed ones').
type KindMetrics struct {
	Kind          string  `json:"kind"`
	Requests      int     `json:"requests"`
	Completed     int     `json:"completed"`
	MeanTTFTMS    float64 `json:"mean_ttft_ms"`
	P99TTFTMS     float64 `json:"p99_ttft_ms"`
	PrefixHitRate float64 `json:"prefix_hit_rate"`
}

// agenticMetrics computes them from an agent trace's requests and their
// records (in trace order): linear in the requests, a play's critical path
// walked once.
func (h *host) agenticMetrics(trace []Request, recs []Record) *AgenticMetrics {
	type play struct {
		first, end float64
		last       *simRequest
	}
	plays := map[string]*play{}
	var order []*play
	var kinds [len(kindNames)]struct {
		n, done      int
		input, cache uint64
		ttft         []sample
	}
	type siblings struct{ play, root, parent string }
	groups := map[siblings]*simWorker{}
	var subs, together int
	var subInput, subCached uint64
	for i := range trace {
		r := h.byID[trace[i].ID]
		a, rec := r.Agent, &recs[i]
		p := plays[a.Play]
		if p == nil {
			p = &play{first: math.Inf(1)}
			plays[a.Play] = p
			order = append(order, p)
		}
		p.first = min(p.first, r.Arrival)
		if p.last == nil || r.doneAt > p.end {
			p.end, p.last = r.doneAt, r
		}
		k := &kinds[a.Kind]
		k.n++
		if rec.Rejected != "" {
			continue
		}
		k.done++
		k.input += rec.InputTokens
		k.cache += rec.CachedTokens
		k.ttft = append(k.ttft, sample{rec.TTFTMS, 1})
		if a.Kind != KindSubagent {
			continue
		}
		g := siblings{a.Play, a.Root, a.Parent}
		w, ok := groups[g]
		if !ok {
			w = r.worker
			groups[g] = w
		}
		subs++
		subInput += rec.InputTokens
		if r.worker == w {
			together++
			subCached += rec.CachedTokens
		}
	}
	m := &AgenticMetrics{Plays: len(order)}
	var makespan, serving []sample
	for _, p := range order {
		think := 0.0
		for r := p.last; r != nil && r.binding != nil; r = r.binding {
			think += r.bindingDelay
		}
		makespan = append(makespan, sample{p.end - p.first, 1})
		serving = append(serving, sample{p.end - p.first - think, 1})
	}
	s := summarize(makespan)
	m.MeanMakespanMS, m.P99MakespanMS = s.mean, s.p99
	s = summarize(serving)
	m.MeanServingMS, m.P99ServingMS = s.mean, s.p99
	for kind, k := range kinds {
		if k.n == 0 {
			continue
		}
		km := KindMetrics{Kind: Kind(kind).String(), Requests: k.n, Completed: k.done}
		s := summarize(k.ttft)
		km.MeanTTFTMS, km.P99TTFTMS = s.mean, s.p99
		if k.input > 0 {
			km.PrefixHitRate = float64(k.cache) / float64(k.input)
		}
		m.Kinds = append(m.Kinds, km)
	}
	if subs > 0 {
		m.SubagentColocation = ptr(float64(together) / float64(subs))
		rate := 0.0
		if subInput > 0 {
			rate = float64(subCached) / float64(subInput)
		}
		m.SubagentGroupHitRate = &rate
	}
	return m
}
