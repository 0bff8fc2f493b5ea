package engine

import (
	"math/bits"
	"math/rand/v2"
)

// stream is the engine's one deterministic random stream. It uses PCG
// outputs directly, mapping them to indices and floats itself, so that no
// library helper whose algorithm might change between Go releases decides a
// placement. Draws are counted so inspect can show that a rejected command
// consumed none.
type stream struct {
	pcg   *rand.PCG
	draws uint64
}

func newStream(seed uint64) *stream {
	return &stream{pcg: rand.NewPCG(seed, 0x9e3779b97f4a7c15)}
}

// index returns a uniform index in [0, n).
func (s *stream) index(n int) int {
	s.draws++
	hi, _ := bits.Mul64(s.pcg.Uint64(), uint64(n))
	return int(hi)
}

// unit returns a uniform float in [0, 1).
func (s *stream) unit() float64 {
	s.draws++
	return float64(s.pcg.Uint64()>>11) / (1 << 53)
}

// selectionDraws is what selection draws on: the engine's random stream,
// and the round_robin policy's counter.
type selectionDraws struct {
	rng  *stream
	next uint64 // the round_robin counter
}

func (d *selectionDraws) Index(n int) int { return d.rng.index(n) }
func (d *selectionDraws) Unit() float64   { return d.rng.unit() }

// Turn returns the round_robin counter and advances it.
func (d *selectionDraws) Turn() uint64 {
	d.next++
	return d.next - 1
}
