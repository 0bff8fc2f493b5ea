package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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
	f.Add([]byte(classesLine)) // no scenario sets the list keys yet
	// The override's deprecated key folds, so it is written back otherwise.
	f.Add([]byte(placeWithOverride(`{"overlap_score_weight":0,"overlap_score_credit":0.5,"router_temperature":1,"assume_kv_reuse":true,"track_prefill_tokens":null,"shared_cache_multiplier":0.25}`)))
	f.Add([]byte(`{"op":"worker_ready","worker_id":1,"device_type":"cpu"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var d Decoded
		Decode(line, &d)
		if d.Err != nil {
			if d.Err.Code == "" || d.Err.Message == "" {
				t.Fatalf("an error without code or message: %+v", d.Err)
			}
			sameHeaderAsFullRecovery(t, line, &d)
			// An oracle that shares no code with the decoder: a line that is
			// not JSON echoes neither op nor id.
			if !json.Valid(line) && (d.Op != nil || d.ID != nil) {
				t.Fatalf("%q is not JSON, but its error echoes op %v id %q", line, strOrNil(d.Op), d.ID)
			}
			return
		}
		again := AppendCommand(nil, &d.Cmd)
		var d2 Decoded
		Decode(again, &d2)
		if d2.Err != nil {
			t.Fatalf("%q decoded, but its encoding %q does not: %v", line, again, d2.Err)
		}
		// Keys skipped inside events are not written back: their values
		// were never kept.
		for i := range d.Cmd.Events {
			d.Cmd.Events[i].IgnoredKeys = nil
		}
		if diff := cmp.Diff(d.Cmd, d2.Cmd, cmpopts.IgnoreUnexported(protocol.Command{}), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("%q changed through AppendCommand (-first +again):\n%s", line, diff)
		}
	})
}

// sameHeaderAsFullRecovery: a refused line echoes the op and id that
// reading the whole line again finds (Decode reads on only from the value
// it could not take).
func sameHeaderAsFullRecovery(t *testing.T, line []byte, d *Decoded) {
	var ref Decoded
	readable, _ := recoverHeader(line, &ref)
	if !readable {
		ref.Op, ref.ID = nil, nil
	}
	if (d.Op == nil) != (ref.Op == nil) || (d.Op != nil && *d.Op != *ref.Op) || !bytes.Equal(d.ID, ref.ID) {
		t.Fatalf("%q: refused with op %v id %q, where reading it whole finds op %v id %q", line, strOrNil(d.Op), d.ID, strOrNil(ref.Op), ref.ID)
	}
}

func strOrNil(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestRefusedLinesEchoTheirHeader: every golden line cut short, and with a
// wrong value put at each top-level member, echoes the op and id a full
// reading finds.
func TestRefusedLinesEchoTheirHeader(t *testing.T) {
	files, err := scenario.Files(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, path := range files {
		data, _ := os.ReadFile(path)
		for _, line := range bytes.Split(data, []byte("\n")) {
			if IsComment(line) {
				continue
			}
			for cut := 1; cut < len(line); cut += 7 {
				for _, bad := range [][]byte{line[:cut], append(slices.Clone(line[:cut]), `,"priority":"x"}`...),
					bytes.Replace(line, []byte(`":`), []byte(`":{"bad":1},"x":`), 1)} {
					var d Decoded
					Decode(bad, &d)
					if d.Err != nil {
						sameHeaderAsFullRecovery(t, bad, &d)
						n++
					}
				}
			}
		}
	}
	if n < 1000 {
		t.Fatalf("only %d refused lines tried", n)
	}
}
