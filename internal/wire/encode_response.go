package wire

import (
	"strconv"

	"github.com/goccy/go-json"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Every line gets a response, so the response and what most lines carry
// (placements, their evidence, command evidence, errors) are written by
// hand; goccy's reflection and its re-compacting of each number a Marshaler
// returns were a tenth of a run. The rare parts (inspect's state; strings
// that need escaping) still go through goccy, so the bytes are the same as
// encoding the whole response with it, which encode_response_test.go checks.

// Encode appends the response as one JSON line.
func Encode(b []byte, r *protocol.Response) ([]byte, error) {
	var err error
	b = strconv.AppendUint(append(b, `{"seq":`...), r.Seq, 10)
	if len(r.ID) > 0 {
		// The decoder let through only a string or a number, with nothing
		// around it: echoed as it came (goccy re-parsed a number as float64,
		// and failed on one past its range, such as 1e400).
		b = append(append(b, `,"id":`...), r.ID...)
	}
	b = append(b, `,"op":`...)
	if r.Op == nil {
		b = append(b, "null"...)
	} else {
		b = appendGoccyString(b, *r.Op)
	}
	b = strconv.AppendBool(append(b, `,"ok":`...), r.OK)
	b = protocol.AppendNum(append(b, `,"now_ms":`...), float64(r.NowMS))
	b = appendArray(append(b, `,"placements":`...), r.Placements, appendPlacement)
	if r.Cancelled != nil {
		b = strconv.AppendBool(append(b, `,"cancelled":`...), *r.Cancelled)
	}
	if len(r.Queued) > 0 {
		b = appendArray(append(b, `,"queued":`...), r.Queued, appendStringAt)
	}
	if len(r.Rejected) > 0 {
		b = appendArray(append(b, `,"rejected":`...), r.Rejected, func(b []byte, rj *protocol.Rejection) []byte {
			b = appendGoccyString(append(b, `{"request_id":`...), rj.RequestID)
			b = appendGoccyString(append(b, `,"code":`...), string(rj.Code))
			return append(appendGoccyString(append(b, `,"message":`...), rj.Message), '}')
		})
	}
	if r.Evidence != nil {
		b = appendCommandEvidence(append(b, `,"evidence":`...), r.Evidence)
	}
	if r.State != nil {
		if b, err = appendGoccy(append(b, `,"state":`...), r.State); err != nil {
			return b, err
		}
	}
	if r.Config != nil {
		b = appendConfig(append(b, `,"config":`...), r.Config)
	}
	if v := r.Versions; v != nil {
		b = strconv.AppendInt(append(b, `,"versions":{"protocol":`...), int64(v.Protocol), 10)
		b = append(strconv.AppendInt(append(b, `,"report_schema":`...), int64(v.ReportSchema), 10), '}')
	}
	if r.Error != nil {
		b = appendGoccyString(append(b, `,"error":{"code":`...), string(r.Error.Code))
		b = append(appendGoccyString(append(b, `,"message":`...), r.Error.Message), '}')
	}
	b = strconv.AppendInt(append(b, `,"pending_count":`...), int64(r.PendingCount), 10)
	b = append(b, `,"next_wakeup_ms":`...)
	if r.NextWakeupMS == nil {
		b = append(b, "null"...)
	} else {
		b = protocol.AppendNum(b, float64(*r.NextWakeupMS))
	}
	return append(b, "}\n"...), nil
}

// appendTierBlocks writes a placement's or a candidate's lower-tier
// blocks, each only when nonzero (omitempty, as the struct says).
func appendTierBlocks(b []byte, host, disk uint64) []byte {
	if host != 0 {
		b = strconv.AppendUint(append(b, `,"host_overlap_blocks":`...), host, 10)
	}
	if disk != 0 {
		b = strconv.AppendUint(append(b, `,"disk_overlap_blocks":`...), disk, 10)
	}
	return b
}

func appendPlacement(b []byte, p *protocol.Placement) []byte {
	b = appendGoccyString(append(b, `{"request_id":`...), p.RequestID)
	b = strconv.AppendUint(append(b, `,"worker_id":`...), p.WorkerID, 10)
	b = strconv.AppendUint(append(b, `,"dp_rank":`...), uint64(p.DPRank), 10)
	b = appendGoccyString(append(b, `,"role":`...), string(p.Role))
	b = strconv.AppendUint(append(b, `,"overlap_blocks":`...), p.OverlapBlocks, 10)
	b = appendTierBlocks(b, p.HostOverlapBlocks, p.DiskOverlapBlocks)
	b = strconv.AppendUint(append(b, `,"best_available_overlap_blocks":`...), p.BestAvailableOverlapBlocks, 10)
	b = strconv.AppendUint(append(b, `,"isl_blocks":`...), p.ISLBlocks, 10)
	b = strconv.AppendUint(append(b, `,"cached_tokens":`...), p.CachedTokens, 10)
	b = strconv.AppendUint(append(b, `,"prefill_tokens":`...), p.PrefillTokens, 10)
	b = protocol.AppendNum(append(b, `,"queued_ms":`...), float64(p.QueuedMS))
	b = appendGoccyString(append(b, `,"reason":`...), p.Reason)
	b = appendGoccyString(append(b, `,"binding":`...), p.Binding)
	if p.LoRALoad != "" {
		b = appendGoccyString(append(b, `,"lora_load":`...), p.LoRALoad)
	}
	if p.LoRAEvicted != "" {
		b = appendGoccyString(append(b, `,"lora_evicted":`...), p.LoRAEvicted)
	}
	if ev := p.Evidence; ev != nil {
		b = strconv.AppendInt(append(b, `,"evidence":{"candidates":`...), int64(ev.Candidates), 10)
		b = strconv.AppendInt(append(b, `,"ties":`...), int64(ev.Ties), 10)
		b = protocol.AppendNum(append(b, `,"selected_cost":`...), float64(ev.SelectedCost))
		b = protocol.AppendNum(append(b, `,"best_cost":`...), float64(ev.BestCost))
		if f := ev.Filtered; f != nil {
			b = append(b, `,"filtered":{`...)
			mark := len(b)
			b = appendCount(b, mark, "affinity", f.Affinity)
			b = appendCount(b, mark, "not_allowed", f.NotAllowed)
			b = appendCount(b, mark, "not_pinned", f.NotPinned)
			b = appendCount(b, mark, "busy", f.Busy)
			b = append(appendCount(b, mark, "lora", f.LoRA), '}')
		}
		if len(ev.CandidateSet) > 0 {
			b = appendArray(append(b, `,"candidate_set":`...), ev.CandidateSet, func(b []byte, c *protocol.CandidateScore) []byte {
				b = strconv.AppendUint(append(b, `{"worker_id":`...), c.WorkerID, 10)
				b = strconv.AppendUint(append(b, `,"dp_rank":`...), uint64(c.DPRank), 10)
				b = strconv.AppendUint(append(b, `,"overlap_blocks":`...), c.OverlapBlocks, 10)
				b = appendTierBlocks(b, c.HostBlocks, c.DiskBlocks)
				b = protocol.AppendNum(append(b, `,"prefill_blocks":`...), float64(c.PrefillBlocks))
				b = strconv.AppendUint(append(b, `,"decode_blocks":`...), c.DecodeBlocks, 10)
				b = protocol.AppendNum(append(b, `,"cost":`...), float64(c.Cost))
				return append(protocol.AppendNum(append(b, `,"probability":`...), float64(c.Probability)), '}')
			})
		}
		if len(ev.FilteredSet) > 0 {
			b = appendArray(append(b, `,"filtered_set":`...), ev.FilteredSet, func(b []byte, f *protocol.FilteredRank) []byte {
				b = strconv.AppendUint(append(b, `{"worker_id":`...), f.WorkerID, 10)
				b = strconv.AppendUint(append(b, `,"dp_rank":`...), uint64(f.DPRank), 10)
				return append(appendGoccyString(append(b, `,"reason":`...), f.Reason), '}')
			})
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendEventIDNotes(b []byte, mark int, key string, notes []protocol.EventIDNote) []byte {
	if len(notes) == 0 {
		return b
	}
	b = append(append(append(memberStart(b, mark), '"'), key...), `":`...)
	return appendArray(b, notes, func(b []byte, n *protocol.EventIDNote) []byte {
		b = appendEventRef(b, &n.EventRef)
		return append(strconv.AppendUint(append(b, `,"last_event_id":`...), n.LastEventID, 10), '}')
	})
}

// appendEventRef opens an event's object with the members that name it.
func appendEventRef(b []byte, r *protocol.EventRef) []byte {
	b = strconv.AppendInt(append(b, `{"index":`...), int64(r.Index), 10)
	b = strconv.AppendUint(append(b, `,"worker_id":`...), r.WorkerID, 10)
	b = strconv.AppendUint(append(b, `,"dp_rank":`...), uint64(r.DPRank), 10)
	return strconv.AppendUint(append(b, `,"event_id":`...), r.EventID, 10)
}

func appendCommandEvidence(b []byte, e *protocol.CommandEvidence) []byte {
	b = append(b, '{')
	mark := len(b)
	if e.EventsApplied != nil {
		b = strconv.AppendInt(append(b, `"events_applied":`...), int64(*e.EventsApplied), 10)
	}
	b = appendCount(b, mark, "events_ignored", e.EventsIgnored)
	if len(e.EventsSkipped) > 0 {
		b = appendArray(append(memberStart(b, mark), `"events_skipped":`...), e.EventsSkipped, func(b []byte, s *protocol.SkippedEvent) []byte {
			b = appendEventRef(b, &s.EventRef)
			return append(appendGoccyString(append(b, `,"reason":`...), s.Reason), '}')
		})
	}
	if len(e.EventKeysIgnored) > 0 {
		b = appendArray(append(memberStart(b, mark), `"event_keys_ignored":`...), e.EventKeysIgnored, func(b []byte, k *protocol.IgnoredKey) []byte {
			b = appendGoccyString(append(b, `{"key":`...), k.Key)
			return append(strconv.AppendInt(append(b, `,"count":`...), int64(k.Count), 10), '}')
		})
	}
	b = appendEventIDNotes(b, mark, "event_id_gaps", e.EventIDGaps)
	b = appendEventIDNotes(b, mark, "event_id_repeats", e.EventIDRepeats)
	b = appendCount(b, mark, "blocks_dropped", e.BlocksDropped)
	b = appendCount(b, mark, "approx_blocks_added", e.ApproxBlocksAdded)
	b = appendCount(b, mark, "approx_blocks_expired", e.ApproxExpired)
	if len(e.RequestsOrphaned) > 0 {
		b = appendArray(append(memberStart(b, mark), `"requests_orphaned":`...), e.RequestsOrphaned, appendStringAt)
	}
	b = appendBindingRefs(b, mark, "bindings_expired", e.BindingsExpired)
	b = appendBindingRefs(b, mark, "bindings_invalidated", e.BindingsInvalidated)
	return append(b, '}')
}

func appendBindingRefs(b []byte, mark int, key string, refs []protocol.BindingRef) []byte {
	if len(refs) == 0 {
		return b
	}
	b = append(append(append(memberStart(b, mark), '"'), key...), `":`...)
	return appendArray(b, refs, func(b []byte, r *protocol.BindingRef) []byte {
		b = appendGoccyString(append(b, `{"role":`...), string(r.Role))
		return append(appendGoccyString(append(b, `,"key":`...), r.Key), '}')
	})
}

// appendCount writes an omitempty integer member of the object whose first
// member would start at mark.
func appendCount(b []byte, mark int, key string, v int) []byte {
	if v == 0 {
		return b
	}
	b = append(append(append(memberStart(b, mark), '"'), key...), `":`...)
	return strconv.AppendInt(b, int64(v), 10)
}

// memberStart puts the comma before a member unless it is the object's first.
func memberStart(b []byte, mark int) []byte {
	if len(b) > mark {
		return append(b, ',')
	}
	return b
}

// appendArray writes items as a JSON array, each by one.
func appendArray[T any](b []byte, items []T, one func([]byte, *T) []byte) []byte {
	b = append(b, '[')
	for i := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = one(b, &items[i])
	}
	return append(b, ']')
}

func appendStringAt(b []byte, s *string) []byte { return appendGoccyString(b, *s) }

// appendGoccyString writes s as a JSON string, byte for byte as goccy does:
// printable ASCII other than quote and backslash is the same in every
// encoder; anything else goes through goccy.
func appendGoccyString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			out, err := appendGoccy(b, s)
			if err != nil {
				panic(err) // a Go string always encodes
			}
			return out
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

func appendGoccy(b []byte, v any) ([]byte, error) {
	out, err := json.MarshalWithOption(v, json.DisableHTMLEscape())
	if err != nil {
		return b, err
	}
	return append(b, out...), nil
}
