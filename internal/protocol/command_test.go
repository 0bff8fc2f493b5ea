package protocol

import "testing"

// TestEveryOpHasASpec: the op list of messages and the spec table agree,
// and an op outside them is unknown.
func TestEveryOpHasASpec(t *testing.T) {
	for _, op := range ops {
		if _, ok := specOf(op); !ok {
			t.Errorf("op %q is listed but has no spec", op)
		}
	}
	if len(OpNames()) != 14 {
		t.Errorf("%d ops listed, want the 14 of the protocol", len(OpNames()))
	}
	for _, op := range []Op{"", "Place", "teleport"} {
		if _, ok := specOf(op); ok {
			t.Errorf("op %q has a spec", op)
		}
	}
}

func BenchmarkValidatePlace(b *testing.B) {
	n, out := uint64(1600), uint64(20)
	c := Command{Op: OpPlace, RequestID: "r123", InputTokens: &n, OutputTokens: &out, BlockHashes: make([]LocalBlockHash, 100)}
	for b.Loop() {
		if err := c.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}
