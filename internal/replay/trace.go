// Package replay drives the router with a trace through a simulated
// cluster, as a host would: the same wire commands, the same clock rules,
// and a report of what routing did to cache reuse, queueing and load.
package replay

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"

	"github.com/goccy/go-json"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Request is one request of a trace.
type Request struct {
	ID           string
	Arrival      float64 // ms; a later turn's is set when its previous turn ends
	InputTokens  uint64
	OutputTokens uint64
	HashIDs      []protocol.LocalBlockHash // one per block of BlockSize tokens; the last may be partial
	Session      string                    // "" when none
	DelayMS      *float64                  // a later turn: arrives this long after its session's previous turn ends
}

type mooncakeLine struct {
	Timestamp    *float64                  `json:"timestamp"`
	InputLength  *uint64                   `json:"input_length"`
	OutputLength *uint64                   `json:"output_length"`
	HashIDs      []protocol.LocalBlockHash `json:"hash_ids"`
	SessionID    json.RawMessage           `json:"session_id"`
	Delay        *float64                  `json:"delay"`
	DelayMS      *float64                  `json:"delay_ms"`
}

// ReadMooncake reads a Mooncake JSONL trace: timestamp (ms), input_length,
// output_length and hash_ids at blockSize tokens per block; optionally
// session_id, and delay or delay_ms (ms) for a later turn of a session.
// Other fields are ignored.
func ReadMooncake(r io.Reader, blockSize uint64) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 256<<20)
	var out []Request
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var m mooncakeLine
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", n, err)
		}
		req, err := m.request(len(out), blockSize)
		if err != nil {
			return nil, fmt.Errorf("trace line %d: %w", n, err)
		}
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the trace has no requests")
	}
	return out, nil
}

func (m *mooncakeLine) request(i int, blockSize uint64) (Request, error) {
	req := Request{ID: "r" + strconv.Itoa(i), HashIDs: m.HashIDs}
	switch {
	case m.InputLength == nil:
		return req, fmt.Errorf("input_length is missing")
	case m.OutputLength == nil:
		return req, fmt.Errorf("output_length is missing")
	case m.Timestamp == nil && m.Delay == nil && m.DelayMS == nil:
		return req, fmt.Errorf("timestamp is missing (and no delay_ms makes this a later turn)")
	}
	req.InputTokens, req.OutputTokens = *m.InputLength, *m.OutputLength
	if max(req.InputTokens, req.OutputTokens) > protocol.MaxTokens {
		return req, fmt.Errorf("input_length %d, output_length %d: the router takes at most %d tokens", req.InputTokens, req.OutputTokens, uint64(protocol.MaxTokens))
	}
	if blocks := (req.InputTokens + blockSize - 1) / blockSize; uint64(len(m.HashIDs)) > blocks {
		return req, fmt.Errorf("%d hash_ids for input_length %d: more than %d blocks of %d tokens (is --block-size right?)",
			len(m.HashIDs), req.InputTokens, blocks, blockSize)
	}
	if m.Timestamp != nil {
		if !(*m.Timestamp >= 0) || *m.Timestamp > protocol.MaxNumber/2 {
			return req, fmt.Errorf("timestamp %v: expected a time from 0 to %d ms", *m.Timestamp, uint64(protocol.MaxNumber/2))
		}
		req.Arrival = *m.Timestamp
	}
	if len(m.SessionID) > 0 && string(m.SessionID) != "null" {
		var s string
		if err := json.Unmarshal(m.SessionID, &s); err != nil {
			s = string(m.SessionID) // a number: its digits
		}
		req.Session = s
	}
	req.DelayMS = m.DelayMS
	if req.DelayMS == nil {
		req.DelayMS = m.Delay
	}
	if req.DelayMS != nil && !(*req.DelayMS >= 0) {
		return req, fmt.Errorf("delay_ms %v: expected a delay >= 0 (ms)", *req.DelayMS)
	}
	if req.DelayMS != nil && req.Session == "" {
		return req, fmt.Errorf("delay_ms needs a session_id (it counts from the session's previous turn)")
	}
	return req, nil
}

// Builtin is the default workload: multi-turn chat sessions that share a
// few system prompts, arriving as a Poisson process; each later turn extends
// its conversation's prompt and arrives after a think time. It is what
// `offline-router replay` runs when given no trace.
func Builtin(seed uint64, sessions int, blockSize uint64) []Request {
	rng := rand.New(rand.NewPCG(seed, 0xb17))
	nextID := uint64(1)
	block := func() protocol.LocalBlockHash { nextID++; return protocol.LocalBlockHash(nextID) }
	prompts := make([][]protocol.LocalBlockHash, 6)
	for i := range prompts {
		for range 4 + rng.IntN(12) {
			prompts[i] = append(prompts[i], block())
		}
	}
	var out []Request
	t := 0.0
	for s := range sessions {
		t += rng.ExpFloat64() * 120
		// Popular prompts are used more: the first one by about a third.
		p := min(int(rng.ExpFloat64()*2), len(prompts)-1)
		ids := append([]protocol.LocalBlockHash(nil), prompts[p]...)
		session := "s" + strconv.Itoa(s)
		for turn := range 2 + rng.IntN(5) {
			for range 1 + rng.IntN(3) {
				ids = append(ids, block())
			}
			req := Request{
				ID: fmt.Sprintf("%s-t%d", session, turn), Session: session,
				InputTokens:  uint64(len(ids))*blockSize - uint64(rng.IntN(int(blockSize))),
				OutputTokens: 50 + uint64(rng.IntN(250)),
				HashIDs:      append([]protocol.LocalBlockHash(nil), ids...),
			}
			if turn == 0 {
				req.Arrival = t
			} else {
				think := 500 + rng.Float64()*2500
				req.DelayMS = &think
			}
			out = append(out, req)
		}
	}
	return out
}
