// Command typedfloor is the fixed framing floor of the serving target
// (docs/performance.md): single-threaded, it decodes each command line into
// typed structs with goccy/go-json, a reflection decoder that shares no code
// with offline-router's, and writes a small reply per line. It routes
// nothing, so a router at 1.0x of it does all its work in the time this
// takes to read and answer.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"

	"github.com/goccy/go-json"
)

// command holds every field of the generated stream's commands.
type command struct {
	Op           string   `json:"op"`
	ID           any      `json:"id"`
	NowMS        *float64 `json:"now_ms"`
	RequestID    string   `json:"request_id"`
	InputTokens  uint64   `json:"input_tokens"`
	OutputTokens uint64   `json:"output_tokens"`
	BlockHashes  []uint64 `json:"block_hashes"`
	WorkerID     *uint64  `json:"worker_id"`
	DPSize       *uint32  `json:"dp_size"`
	Events       []struct {
		WorkerID    uint64  `json:"worker_id"`
		StorageTier *string `json:"storage_tier"`
		Event       struct {
			EventID uint64  `json:"event_id"`
			DPRank  *uint32 `json:"dp_rank"`
			Data    struct {
				Stored *struct {
					ParentHash *uint64 `json:"parent_hash"`
					Blocks     []struct {
						BlockHash  uint64 `json:"block_hash"`
						TokensHash uint64 `json:"tokens_hash"`
					} `json:"blocks"`
				} `json:"stored"`
				Removed *struct {
					BlockHashes []uint64 `json:"block_hashes"`
				} `json:"removed"`
			} `json:"data"`
		} `json:"event"`
	} `json:"events"`
}

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<20) // above the longest generated line
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	var reply []byte
	for seq := uint64(1); ; {
		line, err := in.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A floor that skipped the rest would look faster than it is.
			fmt.Fprintf(os.Stderr, "typedfloor: command %d is longer than %d bytes: no floor for this stream\n", seq, in.Size())
			os.Exit(1)
		}
		if len(line) > 1 {
			var c command
			ok := json.Unmarshal(line, &c) == nil
			reply = append(reply[:0], `{"seq":`...)
			reply = strconv.AppendUint(reply, seq, 10)
			reply = append(reply, `,"op":`...)
			reply = strconv.AppendQuote(reply, c.Op)
			reply = append(reply, `,"ok":`...)
			reply = strconv.AppendBool(reply, ok)
			reply = append(reply, ",\"placements\":[],\"pending_count\":0,\"next_wakeup_ms\":null}\n"...)
			out.Write(reply)
			seq++
		}
		if err != nil {
			break
		}
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "typedfloor:", err)
		os.Exit(1)
	}
}
