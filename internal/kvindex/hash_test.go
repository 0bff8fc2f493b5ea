package kvindex

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/goccy/go-json"
	"github.com/google/go-cmp/cmp"

	"github.com/offline-router/offline-router/internal/protocol"
)

// TestHashKnownValues pins values cross-checked against Dynamo's own tests,
// so the test fails even where ../shared is absent.
func TestHashKnownValues(t *testing.T) {
	local := BlockHashes([]uint32{1, 2, 3, 4, 5, 6, 7, 8}, 4)
	if diff := cmp.Diff([]protocol.LocalBlockHash{14643705804678351452, 16777012769546811212}, local); diff != "" {
		t.Fatalf("local hashes (-want +got):\n%s", diff)
	}
	seq := SequenceHashes(local)
	if diff := cmp.Diff([]protocol.SequenceHash{14643705804678351452, 4945711292740353085}, seq); diff != "" {
		t.Fatalf("sequence hashes (-want +got):\n%s", diff)
	}
}

type hashVector struct {
	Name           string                    `json:"name"`
	BlockSize      int                       `json:"block_size"`
	Tokens         []uint32                  `json:"tokens"`
	LocalHashes    []protocol.LocalBlockHash `json:"local_block_hashes"`
	SequenceHashes []protocol.SequenceHash   `json:"sequence_hashes"`
}

// TestHashVectors checks every case of the shared vectors computed with the
// reference xxHash C library.
func TestHashVectors(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "vectors", "dynamo_hashes.json"))
	if os.IsNotExist(err) {
		t.Skip("../shared/vectors/dynamo_hashes.json is absent")
	}
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []hashVector `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatal("no cases in the vector file")
	}
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			local := BlockHashes(c.Tokens, c.BlockSize)
			if diff := cmp.Diff(c.LocalHashes, local, cmp.Comparer(equalHashes[protocol.LocalBlockHash])); diff != "" {
				t.Errorf("local (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.SequenceHashes, SequenceHashes(local), cmp.Comparer(equalHashes[protocol.SequenceHash])); diff != "" {
				t.Errorf("sequence (-want +got):\n%s", diff)
			}
		})
	}
}

// equalHashes treats nil and empty as equal: the vectors spell "no blocks" as [].
func equalHashes[H ~uint64](a, b []H) bool {
	return cmp.Equal(append([]H{}, a...), append([]H{}, b...))
}
