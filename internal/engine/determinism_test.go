package engine_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/goccy/go-json"

	"github.com/offline-router/offline-router/internal/engine"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
	"github.com/offline-router/offline-router/internal/workload"
)

// mixedStream is a long generated host session with a bad line every 97
// lines and an inspect at the end.
func mixedStream(t *testing.T, commands int) []byte {
	t.Helper()
	var b bytes.Buffer
	m := workload.DefaultMixed(commands, 11)
	m.Workers = 16
	if err := m.Write(&b); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for i, line := range bytes.SplitAfter(b.Bytes(), []byte("\n")) {
		out.Write(line)
		if i%97 == 96 {
			fmt.Fprintf(&out, `{"op":"place","request_id":"bad%d","tokens":[1,2,-3]}`+"\n", i)
		}
	}
	out.WriteString(`{"op":"inspect"}` + "\n")
	return out.Bytes()
}

func serve(t *testing.T, cfg protocol.Config, input []byte) []byte {
	t.Helper()
	eng, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := wire.Serve(bytes.NewReader(input), &out, eng, wire.ServeOptions{}); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestDeterminismOnLongMixedStream: the same config and input give
// byte-identical output, at temperature 0 and with a seeded softmax; the
// seed matters; only the planted bad lines fail; every booking is released.
func TestDeterminismOnLongMixedStream(t *testing.T) {
	input := mixedStream(t, 20000)
	for _, temp := range []float64{0, 0.7} {
		t.Run(fmt.Sprintf("temperature=%v", temp), func(t *testing.T) {
			cfg := protocol.DefaultConfig()
			cfg.Temperature, cfg.Seed, cfg.Evidence = temp, 3, protocol.EvidenceFull
			first := serve(t, cfg, input)
			if !bytes.Equal(first, serve(t, cfg, input)) {
				t.Fatal("two runs of the same input differ")
			}
			cfg.Seed = 4
			if bytes.Equal(first, serve(t, cfg, input)) {
				t.Fatal("the seed does not change any placement")
			}
			lines := strings.Split(strings.TrimSpace(string(first)), "\n")
			failed := 0
			for _, l := range lines {
				if strings.Contains(l, `"ok":false`) {
					failed++
					if !strings.Contains(l, `tokens[2]`) {
						t.Fatalf("unexpected error: %s", l)
					}
				}
			}
			if want := (len(lines) - 1) / 98; failed != want {
				t.Fatalf("%d errors, want the %d planted ones", failed, want)
			}
			var last struct{ State protocol.State }
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
				t.Fatal(err)
			}
			if len(last.State.Requests) != 0 {
				t.Fatalf("%d requests still in flight", len(last.State.Requests))
			}
			for _, w := range last.State.Workers {
				for _, r := range w.Ranks {
					if r.ActiveRequests != 0 || r.ActivePrefillTokens != 0 || r.ActiveDecodeBlocks != 0 {
						t.Fatalf("worker %d rank %d keeps load after every request ended: %+v", w.WorkerID, r.DPRank, r)
					}
				}
			}
			if last.State.IndexBlocks == 0 {
				t.Fatal("the stream's KV events left nothing in the index")
			}
		})
	}
}
