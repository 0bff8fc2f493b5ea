package engine_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-json"
	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/engine"
	"github.com/offline-router/offline-router/internal/golden"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/scenario"
	"github.com/offline-router/offline-router/internal/wire"
)

// A golden scenario (internal/scenario) is a command stream that carries
// its expected responses on "#< " lines; its config, if any, is its first
// command, as a host would send it.
type goldenScenario struct {
	name, path string
	text       []byte
	opts       wire.ServeOptions
}

func loadScenario(t *testing.T, path string) goldenScenario {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := goldenScenario{name: strings.TrimSuffix(filepath.Base(path), ".jsonl"), path: path, text: text}
	if sc.opts.MaxLineBytes, err = scenario.MaxLineBytes(text); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if sc.opts.MaxLineBytes == 0 {
		sc.opts.MaxLineBytes = wire.DefaultMaxLineBytes
	}
	sc.opts.Configure = wire.ConfigSource{}.Configure(func(cfg protocol.Config) (wire.Stepper, error) { return engine.New(cfg) })
	return sc
}

// run serves input as serve does with no flags, config command included.
func (sc goldenScenario) run(t *testing.T, input []byte) []byte {
	t.Helper()
	eng, err := engine.New(protocol.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := wire.Serve(bytes.NewReader(input), &out, eng, sc.opts); err != nil {
		t.Fatalf("%s: %v", sc.name, err)
	}
	return out.Bytes()
}

// defaults is the config a bare config command is answered with, against
// which a scenario records its config answer (scenario.Recorder).
func (sc goldenScenario) defaults(t *testing.T) json.RawMessage {
	t.Helper()
	d, err := scenario.DefaultsOf(sc.run(t, []byte(`{"op":"config"}`+"\n")))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// answered tells the lines serve answers, whatever their length, from
// comments.
func answered(line []byte) bool { return !wire.IsComment(line) }

func scenarioPaths(t *testing.T) []string {
	paths, err := scenario.Files(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return append(paths, filepath.Join("..", "..", "examples", "session.jsonl"))
}

// TestGolden runs every scenario and compares the responses with those its
// "#< " lines record (go test ./internal/engine/ -run TestGolden -update
// rewrites them: review every diff).
func TestGolden(t *testing.T) {
	for _, path := range scenarioPaths(t) {
		sc := loadScenario(t, path)
		t.Run(sc.name, func(t *testing.T) {
			if !bytes.HasPrefix(sc.text, []byte("#")) {
				t.Errorf("%s must open with # comments that say what it proves", path)
			}
			input := scenario.Commands(sc.text)
			out := sc.run(t, input)
			if again := sc.run(t, input); !bytes.Equal(out, again) {
				t.Fatal("two runs of the same input differ")
			}
			recorded, err := scenario.NewRecorder(sc.text, sc.defaults(t)).Record(out)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			got, err := scenario.Render(sc.text, recorded, answered)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			golden.Check(t, path, got)
		})
	}
}

// TestErrorsChangeNothing checks, for every error response a scenario
// records, that an inspect just before the failing line and one just after
// it see the same state.
func TestErrorsChangeNothing(t *testing.T) {
	examined, recorded := 0, 0
	for _, path := range scenarioPaths(t) {
		sc := loadScenario(t, path)
		t.Run(sc.name, func(t *testing.T) {
			lines := strings.SplitAfter(string(scenario.Commands(sc.text)), "\n")
			responses := scenario.Responses(sc.text)
			for _, r := range responses {
				if bytes.Contains(r, []byte(`"ok":false`)) {
					recorded++
				}
			}
			cmd := 0
			for i, line := range lines {
				if !answered([]byte(line)) {
					continue
				}
				if cmd >= len(responses) {
					t.Fatalf("line %d has no recorded response", i+1)
				}
				resp := responses[cmd]
				cmd++
				if !bytes.Contains(resp, []byte(`"ok":false`)) {
					continue
				}
				examined++
				before := sc.lastState(t, strings.Join(lines[:i], ""))
				after := sc.lastState(t, strings.Join(lines[:i+1], ""))
				if diff := cmp.Diff(before, after); diff != "" {
					t.Errorf("line %d (%s) failed but changed the state (-before +after):\n%s", i+1, strings.TrimSpace(line), diff)
				}
			}
		})
	}
	if examined == 0 || examined != recorded {
		t.Fatalf("examined %d error responses of the %d the scenarios record", examined, recorded)
	}
}

// lastState runs input followed by an inspect and returns the snapshot.
func (sc goldenScenario) lastState(t *testing.T, input string) string {
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
