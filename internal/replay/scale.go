package replay

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Benchmark traces are made from a real one, so that they keep its
// sharing, its arrivals and its lengths: RepeatTrace makes it longer,
// SplitBlocks hashes it at a smaller block size.

// RepeatTrace returns copies of trace back to back: copy k arrives k spans
// later, where the span is the trace's last arrival plus its mean gap
// between arrivals, and its hash ids and sessions are its own (each id
// offset by k times one past the largest; each session suffixed with k
// after a run of '#' longer than any in the trace's sessions, so that no
// copy's session is another's, or the trace's), so that a copy shares
// nothing with another.
func RepeatTrace(trace []Request, copies int) ([]Request, error) {
	if copies < 1 {
		return nil, fmt.Errorf("copies %d: expected at least 1", copies)
	}
	if len(trace) > 0 && copies > maxRequests/len(trace) {
		return nil, fmt.Errorf("copies %d: %d copies of %d requests pass the %d requests a trace is held to here", copies, copies, len(trace), maxRequests)
	}
	var last float64
	var top protocol.LocalBlockHash
	for _, r := range trace {
		last = max(last, r.Arrival)
		for _, h := range r.HashIDs {
			top = max(top, h)
		}
	}
	if uint64(top) >= math.MaxUint64/uint64(copies) {
		return nil, fmt.Errorf("hash id %d: %d copies of it would pass 2^64", top, copies)
	}
	span := last
	if len(trace) > 1 {
		span += last / float64(len(trace)-1)
	}
	if float64(copies-1)*span+last > maxTraceMS {
		return nil, fmt.Errorf("%d copies of a trace %v ms long would pass the latest timestamp a trace takes", copies, span)
	}
	sep := "#"
	for _, r := range trace {
		for _, name := range []string{r.Session, r.ParentSession} {
			for strings.Contains(name, sep) {
				sep += "#"
			}
		}
	}
	out := make([]Request, 0, len(trace)*copies)
	for k := range copies {
		for _, r := range trace {
			r.ID = "r" + strconv.Itoa(len(out))
			r.Arrival += float64(k) * span
			ids := make([]protocol.LocalBlockHash, len(r.HashIDs))
			for i, h := range r.HashIDs {
				ids[i] = h + protocol.LocalBlockHash(k)*(top+1)
			}
			r.HashIDs = ids
			if k > 0 {
				r.Session = suffixed(r.Session, sep, k)
				r.ParentSession = suffixed(r.ParentSession, sep, k)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// maxRequests bounds a made trace: it is held in memory whole.
const maxRequests = 100_000_000

func suffixed(session, sep string, k int) string {
	if session == "" {
		return ""
	}
	return session + sep + strconv.Itoa(k)
}

// SplitBlocks returns trace hashed at a block size ratio times smaller:
// each hash id h becomes the ids h·ratio, h·ratio+1, ... of the blocks it
// covers (ratio of them, fewer for a prompt's partial last block), so that
// two prompts share exactly the tokens they shared before, now in ratio
// times as many blocks. blockSize is the trace's.
func SplitBlocks(trace []Request, blockSize, ratio uint64) ([]Request, error) {
	if ratio < 1 || blockSize%ratio != 0 {
		return nil, fmt.Errorf("ratio %d: expected a divisor of the block size %d", ratio, blockSize)
	}
	small := blockSize / ratio
	out := make([]Request, len(trace))
	for i, r := range trace {
		if len(r.HashIDs) > 0 {
			n := (r.InputTokens + small - 1) / small
			ids := make([]protocol.LocalBlockHash, 0, n)
			for _, h := range r.HashIDs {
				if uint64(h) > (math.MaxUint64-ratio+1)/ratio {
					return nil, fmt.Errorf("request %s: hash id %d times %d would pass 2^64", r.ID, h, ratio)
				}
				for k := range ratio {
					if uint64(len(ids)) == n {
						break
					}
					ids = append(ids, protocol.LocalBlockHash(uint64(h)*ratio+k))
				}
			}
			r.HashIDs = ids
		}
		out[i] = r
	}
	return out, nil
}

// mooncakeOut is a trace line as WriteMooncake writes it.
type mooncakeOut struct {
	Timestamp       float64                   `json:"timestamp"`
	InputLength     uint64                    `json:"input_length"`
	OutputLength    uint64                    `json:"output_length"`
	HashIDs         []protocol.LocalBlockHash `json:"hash_ids"`
	SessionID       string                    `json:"session_id,omitempty"`
	ParentSessionID string                    `json:"parent_session_id,omitempty"`
	DelayMS         *float64                  `json:"delay_ms,omitempty"`
	Priority        *float64                  `json:"priority,omitempty"`
	StrictPriority  *int64                    `json:"strict_priority,omitempty"`
	PolicyClass     string                    `json:"policy_class,omitempty"`
	Role            protocol.Role             `json:"role,omitempty"`
	LoRAName        string                    `json:"lora_name,omitempty"`
}

// WriteMooncake writes trace as ReadMooncake reads it, one request a line.
func WriteMooncake(w io.Writer, trace []Request) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, r := range trace {
		ids := r.HashIDs
		if ids == nil {
			ids = []protocol.LocalBlockHash{}
		}
		if err := enc.Encode(mooncakeOut{Timestamp: r.Arrival, InputLength: r.InputTokens, OutputLength: r.OutputTokens,
			HashIDs: ids, SessionID: r.Session, ParentSessionID: r.ParentSession, DelayMS: r.DelayMS,
			Priority: r.Priority, StrictPriority: r.StrictPriority, PolicyClass: r.PolicyClass, Role: r.Role, LoRAName: r.LoRAName}); err != nil {
			return err
		}
	}
	return bw.Flush()
}
