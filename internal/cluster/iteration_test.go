package cluster

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/costtest"
	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// iterCluster is a one-worker iteration-level cluster with a step model
// simple enough to work answers out by hand.
func iterCluster(kvBlocks, maxSeqs int, budget uint64, step StepModel) Config {
	c := Default(1)
	c.BlockSize, c.TotalKVBlocks, c.MaxNumSeqs, c.MaxNumBatchedTokens = 16, kvBlocks, maxSeqs, budget
	c.Engine, c.Profile = EngineIteration, &Profile{Name: "test", Step: step}
	return c
}

// invariants checks the engine's books: every block held is counted once
// in live, no free cached block is held, every cached block is where the
// map says, and no more blocks are in use than the worker has.
func (e *iterEngine) invariants() error {
	held := map[int32]int{}
	for _, s := range e.running {
		for _, b := range s.blocks {
			held[b]++
		}
	}
	for _, s := range e.waiting {
		if len(s.blocks) > 0 {
			return fmt.Errorf("a waiting request holds %d blocks", len(s.blocks))
		}
	}
	for _, s := range e.running {
		if s.computed >= s.target && s.kv < s.r.InputTokens {
			return fmt.Errorf("request %d decodes with %d tokens in the cache, fewer than its prompt's %d", s.r.Tag, s.kv, s.r.InputTokens)
		}
	}
	if len(held) != e.live {
		return fmt.Errorf("%d blocks held, live says %d", len(held), e.live)
	}
	for b, n := range held {
		if x := e.blocks[b]; int(x.refs) != n || x.onFree {
			return fmt.Errorf("a block held %d times has refs %d (on the free list: %v)", n, x.refs, x.onFree)
		}
	}
	free, prev := 0, noBlock
	for b := e.freeHead; b != noBlock; prev, b = b, e.blocks[b].next {
		x := e.blocks[b]
		if x.refs != 0 || held[b] > 0 || !x.onFree || x.prev != prev || (x.cached && e.cached.find(x.hash) != b) {
			return fmt.Errorf("a free block: refs %d, hash %d, cached %v", x.refs, x.hash, x.cached)
		}
		free++
	}
	if prev != e.freeTail || free != e.freeLen {
		return fmt.Errorf("the free queue has %d blocks, ending at %d; its books say %d, ending at %d", free, prev, e.freeLen, e.freeTail)
	}
	cached := 0
	for b, x := range e.blocks {
		if !x.cached {
			continue
		}
		cached++
		if e.cached.find(x.hash) != int32(b) || (x.refs == 0) != x.onFree {
			return fmt.Errorf("cached block %d: found at %d, refs %d, free %v", x.hash, e.cached.find(x.hash), x.refs, x.onFree)
		}
	}
	if cached != e.cached.n {
		return fmt.Errorf("%d blocks cached, the table holds %d", cached, e.cached.n)
	}
	if e.live+e.freeLen+e.fresh != e.cfg.TotalKVBlocks {
		return fmt.Errorf("%d live, %d free and %d fresh blocks on a worker of %d", e.live, e.freeLen, e.fresh, e.cfg.TotalKVBlocks)
	}
	return nil
}

// drive runs requests through one engine (run) and counts its stored and
// removed events.
func drive(t *testing.T, cfg Config, reqs []*job) (first, done map[string]float64, stored, removed int) {
	t.Helper()
	d := run(t, cfg, reqs)
	for _, ev := range d.events {
		if _, ok := ev.Data.(protocol.Removed); ok {
			removed++
		} else {
			stored++
		}
	}
	return d.first, d.done, stored, removed
}

// driven is what a run made: each request's first-token and end times,
// the events in order, and the engine.
type driven struct {
	first, done map[string]float64
	events      []protocol.KVEvent
	e           *iterEngine
}

// run runs requests through one engine by its Worker methods, all
// enqueued at time 0, checking the invariants after every step.
func run(t *testing.T, cfg Config, reqs []*job) driven {
	t.Helper()
	e := newIterEngine(&cfg, &cfg.Profile.Step, publisher{id: 1})
	names := map[*Request]string{}
	for _, j := range reqs {
		j.Seq = kvindex.SequenceHashes(j.Local)
		names[j.Request] = j.id
		if !e.Enqueue(j.Request, j.outputs, false) {
			t.Fatalf("%s could never fit", j.id)
		}
	}
	d := driven{first: map[string]float64{}, done: map[string]float64{}, e: e}
	now := 0.0
	for steps := 0; ; steps++ {
		res, _ := e.Start(now)
		if err := e.invariants(); err != nil {
			t.Fatalf("step %d, started: %v", steps, err)
		}
		if res.Timer.Kind != StepDone {
			break
		}
		now = res.Timer.At
		res = e.Fire(now, res.Timer)
		if err := e.invariants(); err != nil {
			t.Fatalf("step %d, ended: %v", steps, err)
		}
		d.events = append(d.events, res.Events...)
		for _, r := range res.First {
			d.first[names[r]] = now
		}
		for _, r := range res.Finished {
			d.done[names[r]] = now
		}
	}
	if len(d.done) != len(reqs) || !e.idle() || e.live != 0 {
		t.Fatalf("%d of %d requests ended; idle %v, %d blocks still held", len(d.done), len(reqs), e.idle(), e.live)
	}
	return d
}

// job is a test's request: its name, the tokens it makes, and its view.
type job struct {
	*Request
	id      string
	outputs uint64
}

func req(id string, input, output uint64, blocks ...protocol.LocalBlockHash) *job {
	return &job{Request: &Request{InputTokens: input, Local: blocks}, id: id, outputs: output}
}

func same(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestIterationOneRequestAlone: alone, a prompt under the token budget is
// one prefill step (TTFT = base + its tokens' time), then each further
// output token one decode step reading the growing context.
func TestIterationOneRequestAlone(t *testing.T) {
	step := StepModel{BaseMS: 2, PerPrefillTokenMS: 0.01, PerDecodeSeqMS: 0.5, PerKVTokenReadMS: 0.001}
	first, done, _, _ := drive(t, iterCluster(100, 8, 2048, step), []*job{req("a", 100, 3, 1, 2, 3, 4, 5, 6, 7)})
	ttft := 2 + 0.01*100
	// Two decode steps, reading 100 then 101 tokens.
	e2e := ttft + (2 + 0.5 + 0.001*100) + (2 + 0.5 + 0.001*101)
	if !same(first["a"], ttft) || !same(done["a"], e2e) {
		t.Fatalf("first token at %v (want %v), done at %v (want %v)", first["a"], ttft, done["a"], e2e)
	}
}

// TestIterationChunkedPrefill: a prompt over the budget is prefilled in
// chunks, one step each, the later ones reading what came before.
func TestIterationChunkedPrefill(t *testing.T) {
	step := StepModel{BaseMS: 1, PerPrefillTokenMS: 0.01, PerKVTokenReadMS: 0.001}
	first, _, _, _ := drive(t, iterCluster(100, 8, 64, step), []*job{req("a", 150, 1)})
	want := (1 + 0.64) + (1 + 0.64 + 0.064) + (1 + 0.22 + 0.128)
	if !same(first["a"], want) {
		t.Fatalf("first token at %v, want %v (three chunks: 64, 64, 22)", first["a"], want)
	}
}

// TestIterationDecodeBatchThroughput: max_num_seqs requests decoding
// together make one token each per step, so the batch's rate is
// max_num_seqs / (base + per_decode_seq × max_num_seqs) tokens per ms; the
// ninth request waits for a seat.
func TestIterationDecodeBatchThroughput(t *testing.T) {
	step := StepModel{BaseMS: 4, PerPrefillTokenMS: 0.001, PerDecodeSeqMS: 0.25}
	var reqs []*job
	for i := range 9 {
		reqs = append(reqs, req(fmt.Sprint(i), 16, 101))
	}
	first, done, _, _ := drive(t, iterCluster(1000, 8, 4096, step), reqs)
	// The eight admitted share one prefill step, then 100 decode steps.
	decode := 4 + 0.25*8
	if got := (done["0"] - first["0"]) / 100; !same(got, decode) {
		t.Fatalf("a decode step of 8 took %v ms, want %v (%v tokens/ms)", got, decode, 8/decode)
	}
	if first["8"] < done["0"] {
		t.Fatalf("the ninth request started at %v, before a seat was free at %v", first["8"], done["0"])
	}
}

// TestIterationPrefixHitSkipsItsTokens: a second request sharing 4 full
// blocks with a finished first one prefills only what follows them, so
// its TTFT is shorter by those 64 tokens' time.
func TestIterationPrefixHitSkipsItsTokens(t *testing.T) {
	step := StepModel{BaseMS: 1, PerPrefillTokenMS: 0.01}
	cfg := iterCluster(100, 1, 4096, step) // one at a time: b starts after a ends
	a := req("a", 96, 1, 1, 2, 3, 4, 5, 6)
	b := req("b", 96, 1, 1, 2, 3, 4, 9, 10)
	first, done, stored, _ := drive(t, cfg, []*job{a, b})
	ttftB := first["b"] - done["a"]
	if !same(ttftB, 1+0.01*(96-64)) || a.HitBlocks != 0 || b.HitBlocks != 4 {
		t.Fatalf("b's prefill took %v, want %v; hits a %d, b %d", ttftB, 1+0.01*32, a.HitBlocks, b.HitBlocks)
	}
	if stored != 2 {
		t.Fatalf("%d stored events, want one per request", stored)
	}
}

// TestIterationPreemptsAndEvicts: a cache too small for every running
// request makes the last one give its blocks back and be computed again;
// cached blocks are evicted for new ones; every request still ends, and the
// books balance after every step.
func TestIterationPreemptsAndEvicts(t *testing.T) {
	step := StepModel{BaseMS: 1, PerPrefillTokenMS: 0.001, PerDecodeSeqMS: 0.1}
	var reqs []*job
	for i := range 6 {
		base := protocol.LocalBlockHash(100 * (i + 1))
		reqs = append(reqs, req(fmt.Sprint(i), 64, 60, base+1, base+2, base+3, base+4))
	}
	// 16 blocks: four requests of 4 prompt blocks fill it, and each
	// needs 4 more for its output.
	_, _, stored, removed := drive(t, iterCluster(16, 4, 4096, step), reqs)
	if stored == 0 || removed == 0 {
		t.Fatalf("stored %d, removed %d: the test should evict", stored, removed)
	}
}

// TestProfiles: the shipped profile parses and is the BLIS fit it cites; a
// profile file is read strictly: every key known and once, name and the
// four step keys required (a 0 written is taken, a key left out is named by
// its dotted path), a model given whole or not at all.
func TestProfiles(t *testing.T) {
	p := DefaultProfile()
	if p.Step.BaseMS != 5.7527 || p.Step.PerPrefillTokenMS != 0.017251 || p.Step.PerDecodeSeqMS != 0.005999 || p.Source == "" {
		t.Fatalf("shipped profile %+v", p)
	}
	if err := p.CheckModel(); err != nil {
		t.Errorf("the shipped profile has a model: %v", err)
	}
	const step = `"step": {"base_ms": 1, "per_prefill_token_ms": 0, "per_decode_seq_ms": 0, "per_kv_token_read_ms": 0}`
	const model = `"model": {"layers": 2, "kv_heads": 1, "head_dim": 64, "dtype_bytes": 2}`
	for data, want := range map[string]string{
		`{"name": "x", ` + step + `}`:                                                              "",
		`{"name": "x", "source": "s", ` + step + `, ` + model + `}`:                                "",
		`{"name": "x", ` + step + `} trailing`:                                                     "unexpected data after the object",
		`{"name": "x", "step": {"base_ms": 1}}`:                                                    `fields "step.per_prefill_token_ms", "step.per_decode_seq_ms", "step.per_kv_token_read_ms": required`,
		`{"name": "x", "step": {"base_ms": 1, "per_prefill_token_ms": 0, "per_decode_seq_ms": 0}}`: `field "step.per_kv_token_read_ms": required`,
		`{"name": "x", "step": {"base_ms": 1, "base_ms": 2}}`:                                      "appears more than once",
		`{"name": "x", "step": {"BASE_MS": 1}}`:                                                    "is not a step key",
		`{"name": "x", "step": {"base_ms": -1}}`:                                                   "expected a number of ms from 0 to 1e6",
		`{"name": "x", "step": {"base_ms": 0, "per_prefill_token_ms": 0, "per_decode_seq_ms": 0, "per_kv_token_read_ms": 1}}`: "a step must take some time",
		`{"name": "x", "steps": {}}`: "is not a profile key",
		`{` + step + `}`:             `field "name": required`,
		`{"name": "x"}`:              `field "step": required`,
		`{}`:                         `fields "name", "step": required`,
		`{"name": "x", ` + step + `, "model": {"layers": 2}}`: `fields "model.kv_heads", "model.head_dim", "model.dtype_bytes": required`,
		`{"name": "x", ` + step + `, "model": {"layers": 0}}`: `field "model.layers": expected 1 to 65536, got 0`,
		`{"name": "x\ud800", ` + step + `}`:                   `field "name": expected a string of valid UTF-8, got a lone surrogate escape`,
	} {
		_, err := ParseProfile([]byte(data))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", data, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: got %v, want %q", data, err, want)
		}
	}
	// A profile without model reads; a run that sizes KV by it asks
	// CheckModel, which names what is missing.
	p, err := ParseProfile([]byte(`{"name": "x", ` + step + `}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckModel(); err == nil || err.Error() != `fields "model.layers", "model.kv_heads", "model.head_dim", "model.dtype_bytes": required` {
		t.Errorf("a profile without model: %v", err)
	}
	p.Model = ModelShape{Layers: 2, KVHeads: 1, HeadDim: 64}
	if err := p.CheckModel(); err == nil || err.Error() != `field "model.dtype_bytes": required` {
		t.Errorf("a model without dtype_bytes: %v", err)
	}
}

// TestDeepProfile: a profile nested 100,000 deep, under a known key or an
// unknown one, is refused at its first wrong value, allocating a small
// multiple of its length (a reader that built a path per level would
// allocate with the depth squared) on a stack of at most 1 MB (one that
// recursed per level would overflow it: a fatal error of the test binary).
func TestDeepProfile(t *testing.T) {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	for key, want := range map[string]string{
		"step":   `field "step": expected an object, got an array`,
		"model":  `field "model": expected an object, got an array`,
		"name":   `field "name": expected a string, got an array`,
		"memory": `field "memory": expected an object, got an array`,
		"zzz":    `field "zzz": is not a profile key (name, source, licence, step, model, memory)`,
	} {
		data := []byte(`{"name": "x", "` + key + `": ` + deep + `}`)
		if key == "name" {
			data = []byte(`{"name": ` + deep + `}`)
		}
		var err error
		alloc := costtest.Allocated(func() { costtest.Shallow(func() { _, err = ParseProfile(data) }) })
		if err == nil || err.Error() != want {
			t.Errorf("%s 100,000 deep: got %v, want %q", key, err, want)
		}
		if alloc > 8*uint64(len(data)) {
			t.Errorf("%s 100,000 deep: %d bytes allocated for %d bytes", key, alloc, len(data))
		}
	}
}

// TestIterationHashZero: a trace's hash ids start at 0, so a sequence hash
// can be 0; such a block is cached, found, and given back like any other.
func TestIterationHashZero(t *testing.T) {
	step := StepModel{BaseMS: 1, PerPrefillTokenMS: 0.01}
	a, b := req("a", 40, 2, 0, 1, 2), req("b", 40, 2, 0, 1, 2)
	drive(t, iterCluster(20, 1, 4096, step), []*job{a, b})
	if b.HitBlocks != 2 {
		t.Fatalf("the second prompt hit %d blocks, want 2", b.HitBlocks)
	}
}

// TestIterationPreemptedPrefillStartsOver: a request preempted in the
// middle of a chunked prefill computes its whole prompt again (the books
// check that no request decodes with less than its prompt in the cache).
func TestIterationPreemptedPrefillStartsOver(t *testing.T) {
	step := StepModel{BaseMS: 1, PerPrefillTokenMS: 0.01, PerDecodeSeqMS: 0.1}
	a := req("a", 40, 30, 1, 2, 3)
	b := req("b", 40, 30, 11, 12, 13)
	// Budget 8: prompts go in chunks; 5 blocks of 16 hold one request's
	// prompt and output, not both.
	drive(t, iterCluster(5, 2, 8, step), []*job{a, b})
}

// TestIterationFreeQueueOrder: blocks come from the head of one free queue,
// never-used ones first, then those given back, oldest first, evicting a
// cached one found there (vLLM's order), even while blocks never cached sit
// behind it.
func TestIterationFreeQueueOrder(t *testing.T) {
	step := StepModel{BaseMS: 1, PerPrefillTokenMS: 0.01}
	// Each takes one full cached block and one partial uncached one.
	a, b, c, d := req("a", 24, 1, 1, 2), req("b", 24, 1, 3, 4), req("c", 24, 1, 5, 6), req("d", 24, 1, 1, 2)
	_, _, _, removed := drive(t, iterCluster(4, 1, 4096, step), []*job{a, b, c, d})
	if removed != 2 || d.HitBlocks != 0 {
		t.Fatalf("%d removed events, d hit %d blocks: c and d should each have evicted one, a's first", removed, d.HitBlocks)
	}
}

// TestIterationCachesAtSchedule: blocks are cached when the step that fills
// them is scheduled, so a request admitted later in the same step finds
// them, as in vLLM.
func TestIterationCachesAtSchedule(t *testing.T) {
	step := StepModel{BaseMS: 1, PerPrefillTokenMS: 0.01}
	a, b := req("a", 64, 2, 1, 2, 3, 4), req("b", 64, 2, 1, 2, 3, 4)
	drive(t, iterCluster(20, 2, 4096, step), []*job{a, b})
	if b.HitBlocks != 3 {
		t.Fatalf("b hit %d blocks, want 3 (all but the last of a's, cached in the same step)", b.HitBlocks)
	}
}

// TestShippedProfiles: each shipped profile reads strictly under its own
// name, says its source and licence, sizes its cache from its memory, and
// the A100 fit of each model is the slower of its two GPUs at a full
// prefill step and a decode step of 64.
func TestShippedProfiles(t *testing.T) {
	names := ShippedProfiles()
	if len(names) < 4 || !slices.Contains(names, DefaultProfileName) {
		t.Fatalf("shipped %v", names)
	}
	step := map[string][2]float64{}
	for _, name := range names {
		p, ok := ShippedProfile(name)
		if !ok || p.Name != name || p.Source == "" || p.Licence == "" || p.Memory == nil {
			t.Fatalf("%s: %+v", name, p)
		}
		if tokens, err := p.KVTokens(DefaultGPUMemoryUtilization); err != nil || tokens < 100000 {
			t.Errorf("%s: %d KV tokens at 0.9 (%v)", name, tokens, err)
		}
		s := p.Step
		step[name] = [2]float64{s.BaseMS + 8192*s.PerPrefillTokenMS, s.BaseMS + 64*s.PerDecodeSeqMS}
	}
	for _, model := range []string{"llama-3.1-8b-instruct-%s-tp1-vllm-0.8.4", "mistral-small-24b-instruct-2501-%s-tp4-vllm-0.8.4"} {
		h100, a100 := step[fmt.Sprintf(model, "h100")], step[fmt.Sprintf(model, "a100-80")]
		if !(a100[0] > h100[0] && a100[1] > h100[1]) {
			t.Errorf("%s: A100 steps %v, H100 %v", model, a100, h100)
		}
	}
	if _, ok := ShippedProfile("../profile"); ok {
		t.Error("a path is not a shipped profile's name")
	}
}

// TestIterationCachesGeneratedBlocks: the blocks a request's output fills
// are cached as the decode fills them, under the ids its next turn names
// (Request.Generated), and that turn finds them; without those ids only the
// prompt's full blocks are. (Catches: decode never caching, the partial
// prompt block cached under the prompt's id, the run's parent or path
// wrong.)
func TestIterationCachesGeneratedBlocks(t *testing.T) {
	step := StepModel{BaseMS: 1, PerPrefillTokenMS: 0.01}
	for _, named := range []bool{true, false} {
		cfg := iterCluster(100, 1, 4096, step) // one at a time: b after a
		a := req("a", 40, 60, 1, 2, 3)         // 2 full blocks and 8 tokens; 100 tokens with its output: 6 full
		b := req("b", 100, 1, 1, 2, 20, 21, 22, 23, 24)
		if named {
			path := []protocol.LocalBlockHash{1, 2, 20, 21, 22, 23}
			a.Generated, a.GenSeq = path[2:], kvindex.SequenceHashes(path)[2:]
		}
		d := run(t, cfg, []*job{a, b})
		want := 2
		if named {
			want = 6
		}
		if b.HitBlocks != want {
			t.Errorf("named %v: b found %d blocks cached, want %d", named, b.HitBlocks, want)
		}
		var tokens []protocol.LocalBlockHash
		for _, ev := range d.events {
			if st, ok := ev.Data.(protocol.Stored); ok {
				for _, bl := range st.Blocks {
					tokens = append(tokens, bl.TokensHash)
				}
				if n := len(st.Path); st.ParentHash != nil && (n == 0 || *st.ParentHash != kvindex.SequenceHashes(st.Path)[n-1]) {
					t.Errorf("named %v: a run's parent %d is not its path's last block (path %v)", named, *st.ParentHash, st.Path)
				}
			}
		}
		if named && (len(tokens) < 6 || !slices.Equal(tokens[:6], []protocol.LocalBlockHash{1, 2, 20, 21, 22, 23})) {
			t.Errorf("a's stored blocks %v, want its prompt's 2 then its output's 4", tokens)
		}
	}
}
