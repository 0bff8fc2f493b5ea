package wire

import (
	"fmt"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
)

func placeLine(blocks int) []byte {
	var b strings.Builder
	b.WriteString(`{"op":"place","now_ms":1234.5,"request_id":"r12345","input_tokens":1600,"output_tokens":64,"block_hashes":[`)
	for i := range blocks {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", uint64(i)*0x9e3779b97f4a7c15)
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// BenchmarkDecodePlace100: one place line with 100 random 64-bit hashes.
func BenchmarkDecodePlace100(b *testing.B) {
	benchDecode(b, placeLine(100), false)
}

// benchDecode decodes line over and over, which must be refused or not.
func benchDecode(b *testing.B, line []byte, refused bool) {
	var d Decoded
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		Decode(line, &d)
		if (d.Err != nil) != refused {
			b.Fatalf("refused: %v", d.Err)
		}
	}
}

// BenchmarkEncodePlacement: the response to a place, with summary evidence.
func BenchmarkEncodePlacement(b *testing.B) {
	op := "place"
	resp := protocol.Response{Seq: 42, Op: &op, OK: true, NowMS: 1234.5, Placements: []protocol.Placement{{
		RequestID: "r12345", WorkerID: 17, Role: protocol.RoleAggregated, OverlapBlocks: 40, BestAvailableOverlapBlocks: 45,
		ISLBlocks: 100, CachedTokens: 640, PrefillTokens: 960, Reason: protocol.ReasonKV, Binding: "none",
		Evidence: &protocol.PlacementEvidence{Candidates: 64, Ties: 1, SelectedCost: 123.5, BestCost: 123.5},
	}}}
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = Encode(buf[:0], &resp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRefusedLineWithManyKeys: a line refused for its first unknown
// key still has its op and id recovered from the rest, however many keys
// follow. Linear: the same ns/key at both sizes.
func BenchmarkRefusedLineWithManyKeys(b *testing.B) {
	for _, n := range []int{8000, 80000} {
		b.Run(fmt.Sprint("keys=", n), func(b *testing.B) {
			var line strings.Builder
			line.WriteString(`{"op":"inspect"`)
			for i := range n {
				fmt.Fprintf(&line, `,"k%d":1`, i)
			}
			line.WriteString(`,"id":7}`)
			var d Decoded
			for b.Loop() {
				Decode([]byte(line.String()), &d)
				if d.Err == nil || string(d.ID) != "7" {
					b.Fatal("the line should be refused with its id")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})
	}
}

// BenchmarkDecodeObserve: a stored event of 64 blocks, two hashes each.
func BenchmarkDecodeObserve(b *testing.B) {
	var s strings.Builder
	s.WriteString(`{"op":"observe","now_ms":12,"events":[{"worker_id":29,"event":{"event_id":7,"data":{"stored":{"parent_hash":null,"blocks":[`)
	for i := range 64 {
		if i > 0 {
			s.WriteByte(',')
		}
		fmt.Fprintf(&s, `{"block_hash":%d,"tokens_hash":%d}`, uint64(i)*0x9e3779b97f4a7c15, uint64(i+7)*0xbf58476d1ce4e5b9)
	}
	s.WriteString("]}}}}]}")
	benchDecode(b, []byte(s.String()), false)
}

// BenchmarkDecodeRefused100: the place line of BenchmarkDecodePlace100
// with a wrong value at its end, so the decoder reads it all and then
// recovers op and id for the error: it should cost no more than the good
// line.
func BenchmarkDecodeRefused100(b *testing.B) {
	line := placeLine(100)
	benchDecode(b, append(line[:len(line)-1], `,"priority":"high"}`...), true)
}
