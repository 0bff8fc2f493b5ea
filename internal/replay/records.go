package replay

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Record is what one request of the trace went through, as vLLM's
// benchmark (its ttfts and itls), BLIS (--results-path) and Vidur
// (request_metrics.csv) give them per request: the report's latency
// figures, hit rate and goodput are computed from these, so a reader can
// recompute them from --requests-out (all but ITL, pooled over every gap
// between two tokens, which a row cannot carry). Latencies are simulated ms from the
// request's arrival; a rejected request has them all 0, as it has no
// worker (but for CachedTokens).
type Record struct {
	RequestID string `json:"request_id"`
	SessionID string `json:"session_id"` // "" for a request of no session
	// ArrivalMS is when it reached the router, in simulated ms (a later
	// turn's: its previous turn's end and its delay).
	ArrivalMS float64 `json:"arrival_ms"`
	// Pool is the pool it ended in: aggregated; disaggregated, decode once
	// the decode pool's router was sent it, prefill before.
	Pool string `json:"pool"`
	// WorkerID and DPRank are the worker and rank it ended on, in Pool
	// (disaggregated: its decode worker, or its prefill worker for a request
	// of one output token, which never goes to decode); -1 when rejected.
	WorkerID int `json:"worker_id"`
	DPRank   int `json:"dp_rank"`
	// PrefillWorkerID and PrefillDPRank are, disaggregated, the prefill
	// worker and rank that made its first token; -1 when aggregated (its
	// one worker did both) or when it was never prefilled.
	PrefillWorkerID int    `json:"prefill_worker_id"`
	PrefillDPRank   int    `json:"prefill_dp_rank"`
	InputTokens     uint64 `json:"input_tokens"`
	// CachedTokens are the input tokens found in its (prefill) worker's
	// cache when its prefill started: the prefix hit; 0 if it never started
	// (a request the decode pool rejected keeps its prefill's).
	CachedTokens uint64 `json:"cached_tokens"`
	OutputTokens uint64 `json:"output_tokens"`
	// QueueWaitMS: arrival to the start of prefill. TTFTMS: to the first
	// token. TPOTMS: (e2el - ttft) / (output - 1), 0 for one output token.
	// E2ELMS: to the last token.
	QueueWaitMS float64 `json:"queue_wait_ms"`
	TTFTMS      float64 `json:"ttft_ms"`
	TPOTMS      float64 `json:"tpot_ms"`
	E2ELMS      float64 `json:"e2el_ms"`
	// Preemptions are the times a worker took its KV blocks back to
	// compute it again (on either pool).
	Preemptions int `json:"preemptions"`
	// Rejected is why it was turned away (the report's rejected_by_reason
	// codes); "" when it completed.
	Rejected string `json:"rejection_reason"`
	// PlayID, ConversationID and RequestKind are an agent trace's
	// request's play, conversation and kind (root, tool_continuation,
	// subagent); "" outside agent traces.
	PlayID         string `json:"play_id"`
	ConversationID string `json:"conversation_id"`
	RequestKind    string `json:"request_kind"`
}

// Pool names of a Record.
const (
	PoolAggregated = string(protocol.RoleAggregated)
	PoolPrefill    = string(protocol.RolePrefill)
	PoolDecode     = string(protocol.RoleDecode)
)

// Records are the requests' records in trace order, rejected ones
// included; nil unless the run was asked to keep them (Options.Records),
// which costs a record's memory per request.
func (r *Result) Records() []Record { return r.records }

// Meets reports whether a completed request meets every level that is set,
// as vLLM counts goodput (a level is met at equality); request_goodput
// counts these. A rejected request meets none.
func (s SLO) Meets(r *Record) bool {
	return r.Rejected == "" && (s.TTFTMS == 0 || r.TTFTMS <= s.TTFTMS) && (s.TPOTMS == 0 || r.TPOTMS <= s.TPOTMS) &&
		(s.E2ELMS == 0 || r.E2ELMS <= s.E2ELMS)
}

// record is r's record, at the end of the run.
func (h *host) record(r *simRequest) Record {
	rec := Record{RequestID: r.ID, SessionID: r.Session, ArrivalMS: r.Arrival, Pool: PoolAggregated,
		WorkerID: -1, DPRank: -1, PrefillWorkerID: -1, PrefillDPRank: -1,
		InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, Preemptions: r.work.Preemptions, Rejected: string(r.rejected)}
	if a := r.Agent; a != nil {
		rec.PlayID, rec.ConversationID, rec.RequestKind = a.Play, a.Conversation, a.Kind.String()
	}
	last := r.worker // where it ended
	if h.opt.Cluster.Disaggregated() {
		rec.Pool = PoolPrefill
		if r.worker != nil && (r.rejected == "" || r.dec.sent) { // its first token was made
			rec.PrefillWorkerID, rec.PrefillDPRank = int(r.worker.id), int(r.worker.dpRank)
		}
		if r.dec.sent {
			rec.Pool, last = PoolDecode, r.dec.worker
		}
	}
	rec.CachedTokens = min(uint64(r.work.HitBlocks)*h.opt.Cluster.BlockSize, r.InputTokens) // 0 if it never started
	if r.rejected != "" || last == nil {
		return rec
	}
	rec.WorkerID, rec.DPRank = int(last.id), int(last.dpRank)
	rec.QueueWaitMS = r.work.PrefillStart - r.Arrival
	rec.TTFTMS, rec.E2ELMS = r.work.FirstToken-r.Arrival, r.doneAt-r.Arrival
	if r.OutputTokens > 1 {
		rec.TPOTMS = (rec.E2ELMS - rec.TTFTMS) / float64(r.OutputTokens-1)
	}
	return rec
}

// Record file formats (--requests-out), by the file's extension.
const (
	RecordsCSV   = ".csv"
	RecordsJSONL = ".jsonl"
)

// RecordColumns are a records file's columns, in order: the CSV header,
// and the JSONL objects' keys. The Record's follow contender and repeat.
var RecordColumns = []string{"contender", "repeat", "request_id", "session_id", "arrival_ms", "pool", "worker_id", "dp_rank",
	"prefill_worker_id", "prefill_dp_rank", "input_tokens", "cached_tokens", "output_tokens",
	"queue_wait_ms", "ttft_ms", "tpot_ms", "e2el_ms", "preemptions", "rejection_reason", "play_id", "conversation_id", "request_kind"}

// RecordWriter writes records, one row per request, each led by its
// contender and repeat, as CSV (the header first) or JSON lines.
type RecordWriter struct {
	csv  *csv.Writer   // CSV, else
	json *json.Encoder // JSON lines
	row  []string
}

// recordRow is a JSON line: the Record's keys after contender and repeat.
type recordRow struct {
	Contender string `json:"contender"`
	Repeat    int    `json:"repeat"`
	*Record
}

// NewRecordWriter writes records to w in format (RecordsCSV or
// RecordsJSONL); a CSV's header is written at once.
func NewRecordWriter(w io.Writer, format string) (*RecordWriter, error) {
	switch format {
	case RecordsCSV:
		rw := &RecordWriter{csv: csv.NewWriter(w), row: make([]string, len(RecordColumns))}
		return rw, rw.csv.Write(RecordColumns)
	case RecordsJSONL:
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false) // ids as they are: the lines are data, not HTML
		return &RecordWriter{json: enc}, nil
	}
	return nil, fmt.Errorf("records format %q: expected %s or %s", format, RecordsCSV, RecordsJSONL)
}

// Write writes one contender's repeat's records, in their order. Numbers
// are written in full, fixed-point (the shortest decimal that reads back
// to the same float64), so a file is the same bytes on every machine.
func (rw *RecordWriter) Write(contender string, repeat int, recs []Record) error {
	for i := range recs {
		r := &recs[i]
		if rw.json != nil {
			if err := rw.json.Encode(recordRow{contender, repeat, r}); err != nil {
				return err
			}
			continue
		}
		f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
		u := func(v uint64) string { return strconv.FormatUint(v, 10) }
		rw.row = append(rw.row[:0], contender, strconv.Itoa(repeat), r.RequestID, r.SessionID, f(r.ArrivalMS), r.Pool,
			strconv.Itoa(r.WorkerID), strconv.Itoa(r.DPRank), strconv.Itoa(r.PrefillWorkerID), strconv.Itoa(r.PrefillDPRank),
			u(r.InputTokens), u(r.CachedTokens), u(r.OutputTokens),
			f(r.QueueWaitMS), f(r.TTFTMS), f(r.TPOTMS), f(r.E2ELMS), strconv.Itoa(r.Preemptions), r.Rejected,
			r.PlayID, r.ConversationID, r.RequestKind)
		if err := rw.csv.Write(rw.row); err != nil {
			return err
		}
	}
	return rw.Flush()
}

// Flush writes out what is buffered (CSV's), returning any write error.
func (rw *RecordWriter) Flush() error {
	if rw.csv != nil {
		rw.csv.Flush()
		return rw.csv.Error()
	}
	return nil
}
