package wire

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/scenario"
)

// FuzzDecode: no input makes the decoder panic, every error names a code,
// and every command that decodes survives AppendCommand unchanged.
func FuzzDecode(f *testing.F) {
	files, err := scenario.Files(filepath.Join("..", ".."))
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			if !IsComment(line) {
				f.Add(line)
			}
		}
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var d Decoded
		Decode(line, &d)
		if d.Err != nil {
			if d.Err.Code == "" || d.Err.Message == "" {
				t.Fatalf("an error without code or message: %+v", d.Err)
			}
			return
		}
		again := AppendCommand(nil, &d.Cmd)
		var d2 Decoded
		Decode(again, &d2)
		if d2.Err != nil {
			t.Fatalf("%q decoded, but its encoding %q does not: %v", line, again, d2.Err)
		}
		if diff := cmp.Diff(d.Cmd, d2.Cmd, cmpopts.IgnoreUnexported(protocol.Command{}), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("%q changed through AppendCommand (-first +again):\n%s", line, diff)
		}
	})
}
