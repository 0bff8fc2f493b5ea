package protocol

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

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

// TestBoundsKeepNumbersFinite: the inputs that made the router compute an
// infinity (a deadline past float64's range, a cost scaled past it, a
// softmax temperature that underflows) are refused, naming the key.
func TestBoundsKeepNumbersFinite(t *testing.T) {
	huge, tiny := 1e308, 1e-300
	for name, c := range map[string]Config{
		"queue_timeout_ms":   func() Config { c := DefaultConfig(); c.QueueThreshold, c.QueueTimeoutMS = ptr(1.0), &huge; return c }(),
		"prefill_load_scale": func() Config { c := DefaultConfig(); c.PrefillLoadScale = huge; return c }(),
		"temperature":        func() Config { c := DefaultConfig(); c.Temperature = tiny; return c }(),
		"prefill_tokens_per_ms": func() Config {
			c := DefaultConfig()
			c.PrefillLoadModel, c.PrefillTokensPerMS = PrefillLoadLinear, &tiny
			return c
		}(),
		"affinity.ttl_ms": func() Config { c := DefaultConfig(); c.Affinity.TTLMS = huge; return c }(),
		// A fraction of the prompt's blocks: above 1, no match could pass it.
		"sglang.cache_threshold": func() Config { c := DefaultConfig(); c.SGLang.CacheThreshold = 1.5; return c }(),
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "config "+name+":") {
			t.Errorf("%s: got %v", name, err)
		}
	}
	for _, c := range []Command{
		{Op: OpAdvanceClock, NowMS: &huge},
		{Op: OpPlace, RequestID: "r", InputTokens: ptr(uint64(1)), Priority: &huge},
	} {
		if err := c.Validate(); err == nil || err.Code != CodeInvalidField {
			t.Errorf("%+v: got %v", c, err)
		}
	}
	if got := string(AppendNum(nil, math.Inf(1))); got != strconv.FormatFloat(math.MaxFloat64, 'f', -1, 64) {
		t.Errorf("an infinity printed as %s", got)
	}
}

func ptr[T any](v T) *T { return &v }
