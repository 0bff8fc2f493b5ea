package selector

import "math"

// Floating point that reaches the output must come out the same on every
// platform. Two things could break that: Go may fuse x*y+z into one
// fused multiply-add where the CPU has it (arm64, or amd64 built for v3),
// rounding once instead of twice; and math.Exp is written in assembly on
// some architectures. So products that are then added are rounded
// explicitly with float64(), which the Go spec guarantees is not fused, and
// the softmax uses portableExp below.

// portableExp returns e**x using only basic IEEE operations, each rounded on
// its own, so that every platform gets the same bits. It is fdlibm's
// e_exp: reduce x by multiples of ln 2 (split in a high and a low part),
// approximate exp on the remainder with a rational function, then scale by
// the power of two.
func portableExp(x float64) float64 {
	const (
		ln2Hi     = 6.93147180369123816490e-01
		ln2Lo     = 1.90821492927058770002e-10
		log2e     = 1.44269504088896338700e+00
		overflow  = 7.09782712893383973096e+02
		underflow = -7.45133219101941108420e+02
		nearZero  = 1.0 / (1 << 28)
		p1        = 1.66666666666666657415e-01
		p2        = -2.77777777770155933842e-03
		p3        = 6.61375632143793436117e-05
		p4        = -1.65339022054652515390e-06
		p5        = 4.13813679705723846039e-08
	)
	switch {
	case math.IsNaN(x) || math.IsInf(x, 1):
		return x
	case math.IsInf(x, -1) || x < underflow:
		return 0
	case x > overflow:
		return math.Inf(1)
	case -nearZero < x && x < nearZero:
		return 1 + x
	}
	var k int
	if x < 0 {
		k = int(float64(log2e*x) - 0.5)
	} else {
		k = int(float64(log2e*x) + 0.5)
	}
	hi := x - float64(float64(k)*ln2Hi)
	lo := float64(float64(k) * ln2Lo)
	r := hi - lo
	t := float64(r * r)
	poly := float64(t*p5) + p4
	poly = float64(t*poly) + p3
	poly = float64(t*poly) + p2
	poly = float64(t*poly) + p1
	c := r - float64(t*poly)
	y := 1 - ((lo - float64(r*c)/(2-c)) - hi)
	return math.Ldexp(y, k)
}
