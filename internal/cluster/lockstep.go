package cluster

// lockstep is a worker whose DP ranks step together, as attention data
// parallelism over an expert-parallel MoE runs (DeepSeek-style serving:
// SGLang's --enable-dp-attention, vLLM's --data-parallel-size with
// --enable-expert-parallel): the experts' all-to-all joins every rank in
// each forward pass, so a step starts on all ranks at once, a rank with no
// work running an empty batch, and lasts as long as the slowest rank's.
// Each rank keeps its own cache, queue and batch (an iteration engine);
// the time a rank waits on the slowest is its lost step time. Runs of
// decode steps are not taken: the ranks' steps differ.
type lockstep struct {
	ranks []*iterEngine
	busy  bool // a group step is under way
	// stepping are the ranks with a batch in the step under way.
	stepping []bool
}

// lockstepRank is one rank of a lockstep worker, as the host drives it:
// its own requests, the group's steps.
type lockstepRank struct {
	g *lockstep
	e *iterEngine
}

// NewRanks are worker id's DP ranks under cfg's worker model, each its
// own Worker: independent, or, with DPAttention, one lockstep group.
func NewRanks(cfg *Config, id uint64, ranks uint32) []Worker {
	out := make([]Worker, ranks)
	if !cfg.DPAttention {
		for r := range ranks {
			out[r] = newWorker(cfg, id, r)
		}
		return out
	}
	g := &lockstep{stepping: make([]bool, ranks)}
	for r := range ranks {
		e := newIterEngine(cfg, &cfg.Profile.Step, publisher{id: id, rank: r})
		g.ranks = append(g.ranks, e)
		out[r] = lockstepRank{g, e}
	}
	return out
}

func (r lockstepRank) Enqueue(req *Request, outputs uint64, received bool) bool {
	return r.e.Enqueue(req, outputs, received)
}

// Start starts a group step at t if none is under way and some rank has
// work: every rank's batch is chosen, and the step lasts its slowest's.
// A request enqueued during a step joins the next.
func (r lockstepRank) Start(t float64) (Result, bool) {
	g := r.g
	if g.busy {
		return Result{}, false
	}
	step := 0.0
	for i, e := range g.ranks {
		g.stepping[i] = e.startStep(t)
		e.kv.set(t, e.live)
		if g.stepping[i] {
			step = max(step, e.step)
		}
	}
	if !g.anyStepping() {
		return Result{}, false
	}
	for i, e := range g.ranks {
		if g.stepping[i] {
			e.lostMS += step - e.step
			e.step = step
		} else {
			e.lostMS += step // an empty batch, waiting on the others
		}
	}
	g.busy = true
	return Result{Timer: Timer{At: t + step, Kind: StepDone}}, false
}

func (g *lockstep) anyStepping() bool {
	for _, s := range g.stepping {
		if s {
			return true
		}
	}
	return false
}

// Fire ends the group step at t: each stepping rank's tokens and events,
// in rank order.
func (r lockstepRank) Fire(t float64, tm Timer) Result {
	g := r.g
	g.busy = false
	var res Result
	for i, e := range g.ranks {
		if !g.stepping[i] {
			continue
		}
		x := e.Fire(t, tm)
		res.Events = append(res.Events, x.Events...)
		res.First = append(res.First, x.First...)
		res.Finished = append(res.Finished, x.Finished...)
	}
	return res
}

func (r lockstepRank) Counts() Counts { return r.e.Counts() }
func (r lockstepRank) Usage() Usage   { return r.e.Usage() }

func (r lockstepRank) Restart(t float64) Result { return r.e.Restart(t) }
