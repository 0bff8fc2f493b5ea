package replay

import (
	"fmt"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
)

// classOf is the index in cfg's policy classes of the class a request
// naming name is in (the default class for ""), or an error naming the
// classes when none has that name. Without classes every request is in the
// synthetic class, 0, whatever it names, as Dynamo ignores the name then.
func classOf(cfg *protocol.Config, name string) (int, error) {
	i := cfg.ClassIndex(&name)
	if i >= 0 {
		return i, nil
	}
	names := make([]string, len(cfg.PolicyClasses))
	for k := range cfg.PolicyClasses {
		names[k] = cfg.PolicyClasses[k].Name
	}
	return i, fmt.Errorf("%q is not one of the router's policy classes (%s)", name, strings.Join(names, ", "))
}

// ClassMetrics are one policy class's figures, when the router's config
// has policy classes (Dynamo's flow control): the requests in it (by their
// policy_class, or the default class) and what became of them.
type ClassMetrics struct {
	Class string `json:"class"`
	// Requests were in the class; Placed were placed by its router (the
	// prefill pool's, disaggregated), Completed ran to their end, Rejected
	// were turned away (by error code in RejectedByReason: queue_rejected
	// past the class's queue limit, queue_deadline_exceeded past its
	// slo_ms, queue_timeout past queue_timeout_ms, ...), placed or not.
	// Requests = Completed + Rejected.
	Requests         int            `json:"requests"`
	Placed           int            `json:"placed"`
	Completed        int            `json:"completed"`
	Rejected         int            `json:"rejected"`
	RejectedByReason map[string]int `json:"rejected_by_reason"`
	// TTFT of its completed requests, as the run's (vLLM's definition).
	MeanTTFTMS float64 `json:"mean_ttft_ms"`
	P99TTFTMS  float64 `json:"p99_ttft_ms"`
	// RequestGoodput is its completed requests meeting every --goodput
	// level, per second of the run's duration (so that the classes' sum to
	// the run's); null when no level was given.
	RequestGoodput *float64 `json:"request_goodput" jsonschema:"nullable"`
}

// classTally gathers one class's figures as the requests are counted.
type classTally struct {
	m    ClassMetrics
	ttft []sample
	good int
}

// classTallies are the config's classes' tallies, in its order; none
// without classes, so that a report without them is what it always was.
type classTallies []classTally

func newClassTallies(cfg *protocol.Config) classTallies {
	t := make(classTallies, len(cfg.PolicyClasses))
	for i := range t {
		t[i].m = ClassMetrics{Class: cfg.PolicyClasses[i].Name, RejectedByReason: map[string]int{}}
	}
	return t
}

// add counts r, whose record is rec, in its class; good says whether it
// meets every goodput level.
func (t classTallies) add(r *simRequest, rec *Record, good bool) {
	if len(t) == 0 {
		return
	}
	c := &t[r.class]
	c.m.Requests++
	if r.worker != nil {
		c.m.Placed++
	}
	if rec.Rejected != "" {
		c.m.Rejected++
		c.m.RejectedByReason[rec.Rejected]++
		return
	}
	c.m.Completed++
	c.ttft = append(c.ttft, sample{rec.TTFTMS, 1})
	if good {
		c.good++
	}
}

// metrics are the classes' figures over a run of duration seconds;
// goodput says whether levels were given.
func (t classTallies) metrics(duration float64, goodput bool) []ClassMetrics {
	if len(t) == 0 {
		return nil
	}
	out := make([]ClassMetrics, len(t))
	for i := range t {
		c := &t[i]
		s := summarize(c.ttft)
		c.m.MeanTTFTMS, c.m.P99TTFTMS = s.mean, s.p99
		if goodput {
			rate := 0.0
			if duration > 0 {
				rate = float64(c.good) / duration
			}
			c.m.RequestGoodput = &rate
		}
		out[i] = c.m
	}
	return out
}
