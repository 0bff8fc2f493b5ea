package engine_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/goccy/go-json"
	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/engine"
	"github.com/offline-router/offline-router/internal/golden"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// scenario is a golden case: NAME.jsonl in, NAME.golden.jsonl out. Header
// comments may set the config ("# config: {json}", merged in order) and the
// line limit ("# max_line_bytes: N").
type scenario struct {
	name  string
	input []byte
	cfg   protocol.Config
	opts  wire.ServeOptions
}

func loadScenario(t *testing.T, path string) scenario {
	t.Helper()
	input, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := scenario{name: strings.TrimSuffix(filepath.Base(path), ".jsonl"), input: input}
	var overrides []wire.Override
	for _, line := range strings.Split(string(input), "\n") {
		if v, ok := strings.CutPrefix(line, "# config: "); ok {
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(v), &m); err != nil {
				t.Fatalf("%s: config line: %v", path, err)
			}
			for k, raw := range m {
				overrides = append(overrides, wire.Override{Key: k, Value: raw})
			}
		}
		if v, ok := strings.CutPrefix(line, "# max_line_bytes: "); ok {
			if sc.opts.MaxLineBytes, err = strconv.Atoi(v); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
	}
	if sc.cfg, err = wire.LoadConfig(nil, overrides); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return sc
}

func (sc scenario) run(t *testing.T, input []byte) []byte {
	t.Helper()
	eng, err := engine.New(sc.cfg)
	if err != nil {
		t.Fatalf("%s: %v", sc.name, err)
	}
	var out bytes.Buffer
	if _, err := wire.Serve(bytes.NewReader(input), &out, eng, sc.opts); err != nil {
		t.Fatalf("%s: %v", sc.name, err)
	}
	return out.Bytes()
}

func scenarioPaths(t *testing.T) []string {
	paths, err := filepath.Glob(filepath.Join("..", "..", "testdata", "commands", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var inputs []string
	for _, p := range paths {
		if !strings.HasSuffix(p, ".golden.jsonl") {
			inputs = append(inputs, p)
		}
	}
	if len(inputs) == 0 {
		t.Fatal("no scenarios found")
	}
	return append(inputs, filepath.Join("..", "..", "examples", "session.jsonl"))
}

// TestGolden replays every scenario and compares with its reviewed output.
func TestGolden(t *testing.T) {
	for _, path := range scenarioPaths(t) {
		sc := loadScenario(t, path)
		t.Run(sc.name, func(t *testing.T) {
			if !bytes.HasPrefix(sc.input, []byte("#")) {
				t.Errorf("%s must open with # comments that say what it proves", path)
			}
			got := sc.run(t, sc.input)
			if again := sc.run(t, sc.input); !bytes.Equal(got, again) {
				t.Fatal("two runs of the same input differ")
			}
			golden.Check(t, strings.TrimSuffix(path, ".jsonl")+".golden.jsonl", got)
		})
	}
}

// TestErrorsChangeNothing checks, for every error response of every
// scenario, that an inspect just before the failing line and one just after
// it see the same state.
func TestErrorsChangeNothing(t *testing.T) {
	for _, path := range scenarioPaths(t) {
		sc := loadScenario(t, path)
		t.Run(sc.name, func(t *testing.T) {
			lines := strings.SplitAfter(string(sc.input), "\n")
			responses := bytes.Split(bytes.TrimSpace(sc.run(t, sc.input)), []byte("\n"))
			cmd := 0
			for i, line := range lines {
				if wire.IsComment([]byte(strings.TrimSuffix(line, "\n"))) {
					continue
				}
				resp := responses[cmd]
				cmd++
				if !bytes.Contains(resp, []byte(`"ok":false`)) {
					continue
				}
				before := sc.lastState(t, strings.Join(lines[:i], ""))
				after := sc.lastState(t, strings.Join(lines[:i+1], ""))
				if diff := cmp.Diff(before, after); diff != "" {
					t.Errorf("line %d (%s) failed but changed the state (-before +after):\n%s", i+1, strings.TrimSpace(line), diff)
				}
			}
		})
	}
}

// lastState runs input followed by an inspect and returns the snapshot.
func (sc scenario) lastState(t *testing.T, input string) string {
	if input != "" && !strings.HasSuffix(input, "\n") {
		input += "\n"
	}
	out := sc.run(t, []byte(input+`{"op":"inspect"}`+"\n"))
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	var r struct {
		NowMS json.RawMessage `json:"now_ms"`
		State json.RawMessage `json:"state"`
	}
	if err := json.Unmarshal(lines[len(lines)-1], &r); err != nil {
		t.Fatal(err)
	}
	return string(r.NowMS) + " " + string(r.State)
}
