package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/scenario"
)

// TestScenariosRunAsTheyAre pipes every golden scenario, "#< " lines and
// all, into the binary with no config flag, as a user would, and checks that
// it answers exactly the recorded responses (a config answer narrowed to
// its changes, as scenario.Recorder records it): the config command at a
// scenario's head is all the config it needs.
func TestScenariosRunAsTheyAre(t *testing.T) {
	paths, err := scenario.Files(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bare, _, _ := run(t, `{"op":"config"}`+"\n")
	defaults, err := scenario.DefaultsOf([]byte(bare))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var args []string
		if n, err := scenario.MaxLineBytes(text); err != nil {
			t.Fatal(err)
		} else if n > 0 {
			args = []string{"--max-line-bytes", strconv.Itoa(n)}
		}
		stdout, stderr, _ := run(t, string(text), args...)
		recorded, err := scenario.NewRecorder(text, defaults).Record([]byte(stdout))
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		for _, r := range scenario.Responses(text) {
			want = append(append(want, r...), '\n')
		}
		if diff := cmp.Diff(string(want), string(recorded)); diff != "" {
			t.Errorf("%s (-recorded +binary):\n%s\n%s", path, diff, stderr)
		}
	}
}
