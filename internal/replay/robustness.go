package replay

import (
	"context"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// Fault is one named way the KV event channel fails, for --robustness.
type Fault struct {
	Name    string  `json:"name"`
	Signals Signals `json:"event_channel"`
}

// The faults' intensities: harsh enough that a router reading the events
// feels them on a trace of seconds between a session's turns.
const (
	faultDelayMS  = 1000
	faultWindowMS = 1000
	faultLossRate = 0.1
	faultDupRate  = 0.1
	faultDupLagMS = 1000
)

// RobustnessFaults are the faults --robustness runs each contender under:
// every event a second late; events reordered within a second; a tenth of
// them lost; a tenth sent again a second later; and each worker (of the
// aggregated or prefill pool) restarting once, worker k of n at k/(n+1) of
// the span of the requests' arrivals (a later turn's its previous turn's
// and its delay, service taking no time). In a closed loop, whose arrivals
// the run alone makes, there is no span to place restarts in: the four
// others run.
func RobustnessFaults(trace []Request, workers int, closedLoop bool) []Fault {
	faults := []Fault{
		{"late", Signals{DelayMS: faultDelayMS}},
		{"reordered", Signals{ReorderWindowMS: faultWindowMS}},
		{"lossy", Signals{LossRate: faultLossRate}},
		{"duplicated", Signals{DupRate: faultDupRate, DupLagMS: faultDupLagMS}},
	}
	if closedLoop || len(trace) == 0 {
		return faults
	}
	first, last := math.Inf(1), 0.0
	for _, at := range estimatedArrivals(trace) {
		first, last = math.Min(first, at), math.Max(last, at)
	}
	first = math.Max(first, 0)
	var restarts []Restart
	for k := range workers {
		at := first + float64(float64(max(last-first, 0))*float64(k+1)/float64(workers+1))
		restarts = append(restarts, Restart{Worker: uint64(k + 1), AtMS: at})
	}
	return append(faults, Fault{"restarts", Signals{Restarts: restarts}})
}

// RobustnessReport is each contender's figures under each fault against
// its clean run: how much of its benefit survives signals as deployed.
type RobustnessReport struct {
	Faults []FaultRun `json:"faults"`
}

// FaultRun is one fault's runs: each contender's change against its own
// clean run, in the order the contenders ran.
type FaultRun struct {
	Fault
	Contenders []FaultChange `json:"contenders"`
}

// FaultChange is one contender under a fault against itself on the clean
// channel, paired repeat by repeat (the same seeds), the mean of the
// repeats' changes and its 95% Student-t interval (none with one repeat):
// the prefix hit rate's difference, and the ratios of mean and p99 TTFT
// and of goodput (with --goodput) to the clean run's.
type FaultChange struct {
	Contender     string    `json:"contender"`
	PrefixHitRate Estimate  `json:"prefix_hit_rate_change"`
	MeanTTFT      Estimate  `json:"mean_ttft_ratio"`
	P99TTFT       Estimate  `json:"p99_ttft_ratio"`
	Goodput       *Estimate `json:"request_goodput_ratio,omitempty"`
	// EventsLost, EventIDGaps and EventIDRepeats are repeat 0's, what the
	// fault did to the events.
	EventsLost     int `json:"events_lost"`
	EventIDGaps    int `json:"event_id_gaps"`
	EventIDRepeats int `json:"event_id_repeats"`
}

// Robustness runs every contender under each fault, as the experiment ran
// them clean (clean is that run's report), and says what changed.
func (e *Experiment) Robustness(ctx context.Context, trace []Request, info TraceInfo, clean *Report, faults []Fault) (*RobustnessReport, error) {
	out := &RobustnessReport{}
	for _, f := range faults {
		x := *e
		x.Signals = f.Signals
		x.Streams, x.StreamsDone, x.Records, x.Progress = Streams{}, nil, nil, nil
		rep, _, err := x.Run(ctx, trace, info)
		if err != nil {
			return nil, fmt.Errorf("under the %s fault: %w", f.Name, err)
		}
		run := FaultRun{Fault: f}
		for i, c := range clean.Deterministic.Policies {
			run.Contenders = append(run.Contenders, faultChange(c.Contender, repeatsOf(clean, i), repeatsOf(rep, i), e.Goodput.Set()))
		}
		out.Faults = append(out.Faults, run)
	}
	return out, nil
}

// repeatsOf are contender i's metrics, repeat by repeat.
func repeatsOf(rep *Report, i int) []Metrics {
	if i < len(rep.Deterministic.Contenders) && len(rep.Deterministic.Contenders[i].Repeats) > 0 {
		return rep.Deterministic.Contenders[i].Repeats
	}
	return []Metrics{rep.Deterministic.Policies[i]}
}

// faultChange pairs a contender's faulty repeats with its clean ones.
func faultChange(name string, clean, faulty []Metrics, goodput bool) FaultChange {
	var hit, mean, p99, good []float64
	for r := range clean {
		c, f := &clean[r], &faulty[r]
		hit = append(hit, f.PrefixHitRate-c.PrefixHitRate)
		mean = append(mean, ratio(f.MeanTTFTMS, c.MeanTTFTMS))
		p99 = append(p99, ratio(f.P99TTFTMS, c.P99TTFTMS))
		if goodput {
			good = append(good, ratio(*f.RequestGoodput, *c.RequestGoodput))
		}
	}
	fc := FaultChange{Contender: name, PrefixHitRate: MeanInterval(hit), MeanTTFT: MeanInterval(mean), P99TTFT: MeanInterval(p99),
		EventsLost: deref(faulty[0].EventsLost), EventIDGaps: deref(faulty[0].EventIDGaps), EventIDRepeats: deref(faulty[0].EventIDRepeats)}
	if goodput {
		g := MeanInterval(good)
		fc.Goodput = &g
	}
	return fc
}

// deref is *p, 0 for none (a perfect channel's count).
func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// ratio is a over b, 1 when both are 0 (nothing changed), and +Inf for a
// figure that appeared from 0, which JSON cannot hold: the largest finite
// number, so a report stays valid.
func ratio(a, b float64) float64 {
	switch {
	case a == b:
		return 1
	case b == 0:
		return math.MaxFloat64
	}
	return a / b
}

// WriteRobustnessTable writes each fault's rows: each contender's change
// against its clean run.
func WriteRobustnessTable(w io.Writer, r *RobustnessReport, goodput bool) error {
	fmt.Fprintln(w, "\nrobustness: each contender under each event channel fault, against its own clean run (paired by repeat; mean [95% interval] with repeats)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "fault\tcontender\thit rate change\tmean TTFT x\tP99 TTFT x\t"
	if goodput {
		head += "goodput x\t"
	}
	fmt.Fprintln(tw, head+"events lost\tid gaps\tid repeats\t")
	for _, f := range r.Faults {
		for _, c := range f.Contenders {
			line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t", f.Name, c.Contender, estimateCell("%+.3f", c.PrefixHitRate),
				estimateCell("%.3f", c.MeanTTFT), estimateCell("%.3f", c.P99TTFT))
			if goodput {
				line += estimateCell("%.3f", *c.Goodput) + "\t"
			}
			fmt.Fprintf(tw, "%s%d\t%d\t%d\t\n", line, c.EventsLost, c.EventIDGaps, c.EventIDRepeats)
		}
	}
	return tw.Flush()
}

// estimateCell is a mean, with its interval when there is one.
func estimateCell(format string, e Estimate) string {
	if e.CI95 == nil {
		return fmt.Sprintf(format, e.Mean)
	}
	return fmt.Sprintf(format+" ["+format+", "+format+"]", e.Mean, e.CI95[0], e.CI95[1])
}
