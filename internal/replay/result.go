package replay

import (
	"math"
	"slices"
	"time"
)

// Result is one policy's replay: its metrics, what computing them cost,
// and what each request went through, for the figures.
type Result struct {
	Metrics Metrics
	Cost    Cost
	Workers int
	ends    []outcome
	records []Record // when Options.Records asked for them
	// playsStarted is, when Options.StartBeforeMS left plays unstarted,
	// how many started (the only figure such a run gives).
	playsStarted int
}

// outcome is what one completed request went through, in simulated ms.
type outcome struct {
	worker int // index in worker id order
	// decWorker is its decode worker's index + 1 when it moved to one (0:
	// none), decPlaced when it was placed there; its prefill worker then
	// let it go at its first token, in the step that made it.
	decWorker                  int
	decPlaced                  float64
	placed, start, first, done float64
	arrival                    float64
	hitTokens, inputTokens     uint64
}

func (h *host) result(trace []Request, wall time.Duration) *Result {
	var busy time.Duration
	commands := 0
	for _, p := range h.pools {
		for _, rp := range p.replicas {
			busy, commands = busy+rp.router.busy(), commands+rp.router.commands
		}
	}
	res := &Result{Workers: len(h.order),
		Cost: Cost{Policy: string(h.opt.Router.Policy), WallMS: ms(wall), RouterMS: ms(busy)}}
	if busy > 0 {
		res.Cost.RouterCommandsPerS = float64(commands) / busy.Seconds()
	}
	res.Metrics, res.records = h.metrics(trace)
	for i := range trace {
		r := h.byID[trace[i].ID]
		if r.rejected != "" || r.worker == nil {
			continue
		}
		o := outcome{worker: int(r.worker.idx), arrival: r.Arrival, placed: r.placedAt,
			start: r.work.PrefillStart, first: r.work.FirstToken, done: r.doneAt,
			hitTokens: min(uint64(r.work.HitBlocks)*h.opt.Cluster.BlockSize, r.InputTokens), inputTokens: r.InputTokens}
		if r.dec.worker != nil {
			o.decWorker, o.decPlaced = int(r.dec.worker.idx)+1, r.dec.placedAt
		}
		res.ends = append(res.ends, o)
	}
	return res
}

// End is when the last request ended, in simulated ms.
func (r *Result) End() float64 {
	end := 0.0
	for _, o := range r.ends {
		end = math.Max(end, o.done)
	}
	return end
}

// TTFTs are the completed requests' times to first token, sorted, in ms.
func (r *Result) TTFTs() []float64 {
	out := make([]float64, len(r.ends))
	for i, o := range r.ends {
		out[i] = o.first - o.arrival
	}
	slices.Sort(out)
	return out
}

// HitRateByWindow is the prefix hit rate of the requests that started
// prefill in each of n windows of width ms from 0; NaN where none did.
func (r *Result) HitRateByWindow(width float64, n int) []float64 {
	hit, input := make([]float64, n), make([]float64, n)
	for _, o := range r.ends {
		w := min(int(o.start/width), n-1)
		hit[w] += float64(o.hitTokens)
		input[w] += float64(o.inputTokens)
	}
	for w := range hit {
		hit[w] /= input[w] // NaN when 0/0
	}
	return hit
}

// LoadByWindow is, per worker and window, the time-averaged number of
// requests on the worker (waiting or running, from placement to end; when
// disaggregated, on its prefill worker to its first token and on its
// decode worker from its placement there). A stay adds its fraction of
// the two windows it starts and ends in directly, and 1 to every full
// window between through a difference array, so the cost is one pass over
// the requests and one over the cells.
func (r *Result) LoadByWindow(width float64, n int) [][]float64 {
	load, diff := make([][]float64, r.Workers), make([][]float64, r.Workers)
	for w := range load {
		load[w], diff[w] = make([]float64, n), make([]float64, n+1)
	}
	stay := func(w int, from, to float64) {
		row := load[w]
		a, b := from/width, to/width // in windows
		ia, ib := min(int(a), n-1), min(int(b), n-1)
		if ia == ib {
			row[ia] += b - a
			return
		}
		row[ia] += float64(ia+1) - a
		row[ib] += b - float64(ib)
		diff[w][ia+1]++
		diff[w][ib]--
	}
	for _, o := range r.ends {
		if o.decWorker == 0 {
			stay(o.worker, o.placed, o.done)
			continue
		}
		stay(o.worker, o.placed, o.first)
		stay(o.decWorker-1, o.decPlaced, o.done)
	}
	for w, row := range load {
		run := 0.0
		for i := range row {
			run += diff[w][i]
			row[i] += run
		}
	}
	return load
}
