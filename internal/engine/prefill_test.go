package engine

import (
	"math"
	"testing"
)

func TestPrefillLinearDecayIsFIFO(t *testing.T) {
	p := prefillLoad{prefillLevel: prefillLevel{rate: 2}} // 2 tokens per ms
	a := p.add(0, 100)                                    // decays over [0, 50]
	b := p.add(10, 40)                                    // starts at 50, done at 70
	if got := p.at(30); got != 80 {
		t.Fatalf("at 30: %v, want 140 - 60 = 80", got)
	}
	if got := p.reachTime(40); got != 50 {
		t.Fatalf("reach 40 at %v, want 50 (a done, b untouched)", got)
	}
	// a's prefill completes at 40 with 20 tokens left: only those go.
	p.remove(40, a)
	if got := p.at(40); got != 40 {
		t.Fatalf("after a: %v, want b's 40", got)
	}
	if got := p.reachTime(0); got != 60 {
		t.Fatalf("b now starts at 40 and ends at %v, want 60", got)
	}
	p.decayTo(100)
	p.remove(100, b) // fully decayed already: a no-op
	if p.pending != 0 || p.at(100) != 0 || len(p.fifo) != 0 {
		t.Fatalf("load must be exactly zero: %+v", p)
	}
}

func TestPrefillWithoutModelNeverDecays(t *testing.T) {
	p := prefillLoad{}
	a := p.add(0, 64)
	if p.at(1e9) != 64 || !math.IsInf(p.reachTime(10), 1) {
		t.Fatal("without a model the load stays until released")
	}
	p.remove(5, a)
	if p.at(5) != 0 || p.reachTime(0) != 5 {
		t.Fatal("release must bring the load to zero")
	}
}

func TestPrefillRemoveFromTheMiddle(t *testing.T) {
	p := prefillLoad{prefillLevel: prefillLevel{rate: 1}}
	p.add(0, 10)
	mid := p.add(0, 20)
	p.add(0, 30)
	p.remove(5, mid)
	if got := p.at(5); got != 35 {
		t.Fatalf("got %v, want 60 - 5 - 20 = 35", got)
	}
}
