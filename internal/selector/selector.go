// Package selector chooses a rank for one request among its candidates, as
// Dynamo's scheduler does with its worker selector: given what each
// candidate caches and carries, it costs them and picks one, and returns
// the choice with the scores behind it. It books nothing and keeps no state:
// its only inputs are its arguments, and its randomness and the
// round_robin turn come from the Draws it is handed, so the caller decides
// what selecting changes. Booking the request on the chosen rank is the
// caller's next step.
package selector

import (
	"math"
	"slices"

	"github.com/zeebo/xxh3"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Params is the config selection reads.
type Params struct {
	Policy                    protocol.Policy
	BlockSize                 uint64
	Temperature               float64
	OverlapScoreCredit        float64
	OverlapScoreCreditDecay   float64
	PrefillLoadScale          float64
	DecodeActiveRequestWeight float64
	HostCacheHitWeight        float64
	DiskCacheHitWeight        float64
	CudaToCPURatio            uint64
	SGLang                    protocol.SGLangConfig
	LLMD                      protocol.LLMDConfig
}

// ParamsOf takes the selection params of role from a config: the
// worker-selection instance the role uses, over the config's own knobs.
func ParamsOf(cfg *protocol.Config, role protocol.Role) Params {
	policy, temperature, credit, scale := cfg.Selection(role)
	return Params{Policy: policy, BlockSize: cfg.BlockSize, Temperature: temperature,
		OverlapScoreCredit: credit, OverlapScoreCreditDecay: cfg.OverlapScoreCreditDecay, PrefillLoadScale: scale,
		DecodeActiveRequestWeight: cfg.DecodeActiveRequestWeight, HostCacheHitWeight: cfg.HostCacheHitWeight,
		DiskCacheHitWeight: cfg.DiskCacheHitWeight, CudaToCPURatio: cfg.EncoderCudaToCPURatio, SGLang: cfg.SGLang, LLMD: cfg.LLMD}
}

// Candidate is one rank the request may go to, as selection sees it.
type Candidate struct {
	Overlap        uint64  // leading blocks of the prompt the rank caches on its device
	Host, Disk     uint64  // the blocks its host and disk tiers (disk and external) cache past that prefix, each continuing the one before
	PrefillTokens  float64 // prefill tokens booked on the rank now
	DecodeBlocks   uint64  // the rank's active blocks once the request's new ones join
	ActiveRequests uint64  // requests booked on the rank (least_loaded)
	Key            uint64  // the rank's identity, stable while it lives: worker id and DP rank (session_hash)
	Routed         uint64  // leading blocks of the prompt routed to the rank before (sglang_cache_aware's tree)
	TreeBlocks     uint64  // blocks in the rank's routed tree (sglang_cache_aware)
	Waiting        uint64  // requests booked on the rank whose prefill has not completed (llmd's queue)
	KVUsage        float64 // active blocks over total_kv_blocks, 0 when that is not known (llmd's KV-cache utilisation)
	CPU            bool    // the rank's worker runs on a CPU (device_aware_weighted)
}

// Score is one candidate's cost and its chance of being chosen. It holds no
// pointer, so filling one per candidate needs no write barrier while the
// garbage collector runs (on a large heap, much of the time).
type Score struct {
	Overlap    uint64  // device blocks
	Host, Disk uint64  // lower-tier blocks (Candidate's)
	Prefill    float64 // blocks of prefill work, after the overlap credit
	Decode     uint64  // active blocks after placement
	Cost       float64
	Prob       float64
}

// Draws is where selection takes its randomness and the round_robin turn
// from: the engine's seeded stream and counter.
type Draws interface {
	Index(n int) int // uniform in [0, n)
	Unit() float64   // uniform in [0, 1)
	Turn() uint64    // the round_robin counter, which advances by one
}

// Result is a selection: the chosen candidate and its score, how many
// candidates share the lowest cost, that cost, and every candidate's score
// (nil from SelectCheapest).
type Result struct {
	Index    int
	Chosen   Score
	Ties     int
	BestCost float64
	Scores   []Score
}

// Request is what selection reads of the request: its input tokens, its
// prompt's blocks (sglang_cache_aware's match rate), and its session id (""
// when none) for session_hash.
type Request struct {
	ISL     uint64
	Blocks  uint64
	Session string
}

// Select chooses among cands for req: the preferred index when there is
// one (>= 0; soft affinity), else by the policy. scratch is reused for the
// scores (Result.Scores aliases it).
func Select(p Params, req Request, cands []Candidate, preferred int, draws Draws, scratch []Score) Result {
	scores := slices.Grow(scratch[:0], len(cands))[:len(cands)]
	least := leastPrefill(&p, cands)
	for i := range cands {
		scores[i] = cost(&p, req.ISL, least, &cands[i])
	}
	index, ties, best := pick(&p, req, scores, cands, preferred, draws)
	return Result{Index: index, Chosen: scores[index], Ties: ties, BestCost: best, Scores: scores}
}

// Cheapest reports whether PickCheapest chooses as Select would: under a
// policy that picks by cost alone (kv) at temperature 0 with no preferred
// candidate, where only the lowest cost matters, and with a cost that reads
// no more than CostOf does (no credit decay, which reads every candidate's
// prefill, and no active-request weight). (pick's own temperature-0 branch
// draws among the ties the same way; the engine's
// TestCheapestSelectsAsEveryScore holds the two together.)
func Cheapest(p *Params, preferred int) bool {
	return Of(p.Policy).ByCost && p.Temperature == 0 && preferred < 0 &&
		p.OverlapScoreCreditDecay == 0 && p.DecodeActiveRequestWeight == 0
}

// PickCheapest is Select's choice where Cheapest holds, from each
// candidate's Cost alone: the first candidate at the lowest cost, or, when
// several share it, the one pick would draw among them. For a caller that
// wants no score but the chosen one (no evidence "full"): costing into one
// float per candidate, rather than a candidate and a score each, is what
// keeps a placement among a thousand ranks cheap.
func PickCheapest(costs []float64, draws Draws) (index, ties int, best float64) {
	best = math.Inf(1)
	for _, c := range costs {
		switch {
		case c < best:
			best, ties = c, 1
		case c == best:
			ties++
		}
	}
	nth := 0
	if ties > 1 {
		nth = draws.Index(ties) // as pick draws among the ties
	}
	for i, c := range costs {
		if c == best {
			if nth == 0 {
				return i, ties, best
			}
			nth--
		}
	}
	panic("selector: no candidate at the lowest cost")
}

// Cost is Dynamo's cost of a candidate (lower wins) where Cheapest holds:
// the prefill work in blocks after crediting the cached overlap, weighted,
// plus the candidate's active blocks once the request's new blocks join
// them.
func Cost(p *Params, isl uint64, c *Candidate) Score {
	return cost(p, isl, c.PrefillTokens, c)
}

// cost is Dynamo's whole cost of a candidate, given the least prefill
// booked on any candidate (least; only the credit decay reads it):
//
//	prefill = max((booked prefill + isl) / block_size - (credit x decay x overlap + host_w x host + disk_w x disk), 0)
//	cost    = prefill_load_scale x prefill + active blocks + decode_active_request_weight x active requests
//	decay   = 1 / (1 + overlap_score_credit_decay x ((booked prefill - least) / block_size) / ceil(isl / block_size))
//
// The decay shrinks the credit on a rank with more prefill booked than the
// least loaded candidate, so a cached prefix stops drawing every request
// onto a rank that is busy prefilling; the request weight makes a rank's
// requests in flight (before this one) cost beyond their blocks. Blocks
// of the lower tiers are credited at their tier's weight and never decay,
// as in Dynamo.
func cost(p *Params, isl uint64, least float64, c *Candidate) Score {
	credit := p.OverlapScoreCredit
	if p.OverlapScoreCreditDecay != 0 && c.PrefillTokens > least && isl > 0 {
		bs := p.BlockSize
		requestBlocks := isl/bs + min(isl%bs, 1)
		excess := (c.PrefillTokens - least) / float64(bs)
		decay := 1 / (1 + float64(p.OverlapScoreCreditDecay*(excess/float64(requestBlocks))))
		credit = float64(credit * decay)
	}
	prefill := prefillBlocks(p, isl, c.PrefillTokens, creditBlocks(p, credit, c))
	decode := float64(c.DecodeBlocks)
	if p.DecodeActiveRequestWeight != 0 {
		decode += float64(p.DecodeActiveRequestWeight * float64(c.ActiveRequests))
	}
	return Score{Overlap: c.Overlap, Host: c.Host, Disk: c.Disk, Prefill: prefill, Decode: c.DecodeBlocks, Cost: float64(p.PrefillLoadScale*prefill) + decode}
}

// leastPrefill is the least prefill booked on any candidate, when the
// credit decay reads it.
func leastPrefill(p *Params, cands []Candidate) float64 {
	least := math.Inf(1)
	if p.OverlapScoreCreditDecay != 0 {
		for i := range cands {
			least = min(least, cands[i].PrefillTokens)
		}
	}
	return least
}

// CostOf is Cost's cost alone, from the fields of a Candidate it reads
// where no lower tier holds a block.
func CostOf(p *Params, isl, overlap uint64, prefillTokens float64, decodeBlocks uint64) float64 {
	return float64(p.PrefillLoadScale*prefillBlocks(p, isl, prefillTokens, float64(p.OverlapScoreCredit*float64(overlap)))) + float64(decodeBlocks)
}

// Coster is CostOf for one request, bit for bit: the prompt's blocks,
// which every candidate with no prefill booked shares, are divided out
// once (a division per reached rank was a tenth of a placement at 1,024
// ranks), and the knobs are held by value, not read through Params at
// every candidate.
type Coster struct {
	scale, credit, blockSize float64
	isl                      float64
	islBlocks                float64 // the prompt's prefill in blocks on a rank with none booked
}

// NewCoster is CostOf's costing of a request of isl tokens under p.
func NewCoster(p *Params, isl uint64) Coster {
	return Coster{scale: p.PrefillLoadScale, credit: p.OverlapScoreCredit, blockSize: float64(p.BlockSize),
		isl: float64(isl), islBlocks: float64(isl) / float64(p.BlockSize)}
}

// Of is CostOf(p, isl, overlap, prefillTokens, decodeBlocks).
func (c *Coster) Of(overlap uint64, prefillTokens float64, decodeBlocks uint64) float64 {
	work := c.islBlocks // (0 + isl) / block size: adding zero is exact
	if prefillTokens != 0 {
		work = (prefillTokens + c.isl) / c.blockSize
	}
	// A clamp rather than max, whose NaN and signed-zero cases cost a
	// placement at 1,024 ranks more than the rest of the formula: there
	// is no NaN here, and a -0 left unclamped is gone once decode blocks
	// (+0 or more) are added.
	if work -= float64(c.credit * float64(overlap)); work < 0 {
		work = 0
	}
	return float64(c.scale*work) + float64(decodeBlocks)
}

// Idle is Of(overlap, 0, decodeBlocks), for a rank with no prefill
// booked: no test of the prefill, and the overlap converted from 32 bits
// (a signed conversion; from 64 the unsigned one branches).
func (c *Coster) Idle(overlap uint32, decodeBlocks uint64) float64 {
	work := c.islBlocks
	if work -= float64(c.credit * float64(overlap)); work < 0 {
		work = 0
	}
	return float64(c.scale*work) + float64(decodeBlocks)
}

// creditBlocks is the blocks of prefill a candidate's caches save: its
// device prefix at the (decayed) credit, its host and disk extensions at
// their tiers' weights, summed in Dynamo's order. With no lower-tier
// block it is the device term alone, bit for bit.
func creditBlocks(p *Params, credit float64, c *Candidate) float64 {
	// float64() rounds each product on its own: no fused multiply-add (exp.go).
	blocks := float64(credit * float64(c.Overlap))
	if c.Host != 0 || c.Disk != 0 {
		blocks = blocks + float64(p.HostCacheHitWeight*float64(c.Host)) + float64(p.DiskCacheHitWeight*float64(c.Disk))
	}
	return blocks
}

// prefillBlocks is the prefill work in blocks after the credit.
func prefillBlocks(p *Params, isl uint64, prefillTokens, credit float64) float64 {
	return max((prefillTokens+float64(isl))/float64(p.BlockSize)-credit, 0)
}

// pick chooses among scores: the preferred index when there is one, else
// by the policy's entry in the table. It fills every score's probability
// and returns the chosen index, the number of candidates at the minimum
// cost, and that cost.
func pick(p *Params, req Request, scores []Score, cands []Candidate, preferred int, draws Draws) (int, int, float64) {
	s := spread{lo: math.Inf(1), hi: math.Inf(-1)}
	for _, x := range scores {
		s.lo, s.hi = min(s.lo, x.Cost), max(s.hi, x.Cost)
	}
	for _, x := range scores {
		if x.Cost == s.lo {
			s.ties++
		}
	}
	if len(scores) == 1 {
		preferred = 0 // nothing to choose: no policy counter or draw is used
	}
	if preferred >= 0 {
		return only(scores, preferred), s.ties, s.lo
	}
	return Of(p.Policy).pick(p, req, scores, cands, draws, s), s.ties, s.lo
}

// rendezvous is consistent hashing of a session onto the candidates
// (highest random weight): each candidate weighs the session by a hash of
// both, the heaviest wins. A session keeps its candidate while that one
// stays eligible, and when a candidate goes only its sessions move, each to
// the next heaviest, which is what plain session stickiness on a hash ring
// gives, without the ring's virtual nodes.
func rendezvous(session string, cands []Candidate) int {
	h := xxh3.HashString(session)
	best, pick := uint64(0), 0
	for i, c := range cands {
		if w := mix(h ^ mix(c.Key)); i == 0 || w > best {
			best, pick = w, i
		}
	}
	return pick
}

// mix is splitmix64's finaliser: every input bit reaches every output bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
