package wire

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/protocol"
)

func TestConfigDefaults(t *testing.T) {
	c, err := LoadConfig(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(protocol.DefaultConfig(), c); diff != "" {
		t.Fatalf("(-default +loaded):\n%s", diff)
	}
	if c.BlockSize != 16 || c.Policy != "kv" || !c.KVEvents || c.Affinity.TTLMS != 3600000 || c.Evidence != "summary" {
		t.Fatalf("defaults differ from PROTOCOL.md §2: %+v", c)
	}
}

func TestConfigFlagOverridesFile(t *testing.T) {
	c, err := LoadConfig([]byte(`{"block_size":512,"seed":3,"affinity":{"mode":"off","ttl_ms":5}}`),
		[]Override{{Key: "seed", Value: uint64(9)}, {Key: "affinity.ttl_ms", Value: 7.0}})
	if err != nil {
		t.Fatal(err)
	}
	if c.BlockSize != 512 || c.Seed != 9 || c.Affinity.TTLMS != 7 || c.Affinity.Key != "session" {
		t.Fatalf("got %+v", c)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	for file, mention := range map[string]string{
		`{"block_sise":16}`:                        "block_sise",
		`{"affinity":{"mode":"off","ttl":1}}`:      "ttl",
		`{"policy":"best"}`:                        "policy",
		`{"block_size":0}`:                         "block_size",
		`{"overlap_score_credit":1.5}`:             "overlap_score_credit",
		`{"prefill_load_model":"linear"}`:          "prefill_tokens_per_ms",
		`{"temperature":-1}`:                       "temperature",
		`{"evidence":"all"}`:                       "evidence",
		`{"queue_timeout_ms":0}`:                   "queue_timeout_ms",
		`{"worker_defaults":{"role":"x"}}`:         "worker_defaults.role",
		`{"worker_defaults":{"dp_size":0}}`:        "worker_defaults.dp_size",
		`{"block_size":16} {"block_size":32}`:      "unexpected data",
		`{"affinity":{"key":"sibling"}}`:           "affinity.key",
		`{"active_prefill_tokens_threshold":-1.0}`: "active_prefill_tokens_threshold",
	} {
		_, err := LoadConfig([]byte(file), nil)
		if err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("%s: got %v, want an error mentioning %q", file, err, mention)
		}
	}
}
