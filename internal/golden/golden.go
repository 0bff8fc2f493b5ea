// Package golden compares test output with reviewed files. Importing it
// registers the -update flag, so `go test ./... -update` works in every
// package that has tests.
package golden

import (
	"flag"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/outfile"
)

var update = flag.Bool("update", false, "rewrite golden files with the current output (review every diff before committing)")

// Check compares got with the file at path, or rewrites the file with -update.
func Check(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := outfile.Write(path, got); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test with -update to create it, then review it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-golden +got):\n%s", path, diff)
	}
}
