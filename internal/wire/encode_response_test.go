package wire

import (
	"testing"

	"github.com/goccy/go-json"
	"pgregory.net/rapid"

	"github.com/offline-router/offline-router/internal/protocol"
)

// TestEncodeMatchesGoccy: the hand-written encoder gives the bytes goccy
// gives for the same response (placements always a list), for responses
// with every optional part and strings that need escaping.
func TestEncodeMatchesGoccy(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genResponse(t)
		ref := *r
		if ref.Placements == nil {
			ref.Placements = []protocol.Placement{}
		}
		want, err := json.MarshalWithOption(&ref, json.DisableHTMLEscape())
		if err != nil {
			t.Fatal(err)
		}
		got, err := Encode(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want)+"\n" {
			t.Fatalf("Encode:\n%s\ngoccy:\n%s", got, want)
		}
	})
}

// genString draws plain strings mostly, and sometimes ones with quotes,
// control characters, DEL, U+2028 and non-ASCII letters.
func genString(t *rapid.T, label string) string {
	return rapid.OneOf(
		rapid.StringMatching(`[a-z0-9_-]{0,8}`),
		rapid.SampledFrom([]string{"a\"b", `back\slash`, "tab\there", "nl\n", "\x00\x1f", "del\x7f", "line\u2028sep", "é<&>", "bad\xffutf8", ""}),
		rapid.String(),
	).Draw(t, label)
}

func genNum(t *rapid.T, label string) protocol.Num {
	return protocol.Num(rapid.OneOf(
		rapid.Float64Range(-1e6, 1e6),
		rapid.SampledFrom([]float64{0, 1e-9, 1e21, 0.1, 3, 175.375}),
	).Draw(t, label))
}

func genPtr[T any](t *rapid.T, label string, g func(*rapid.T, string) T) *T {
	if !rapid.Bool().Draw(t, label+"_set") {
		return nil
	}
	v := g(t, label)
	return &v
}

func genCount(t *rapid.T, label string) int {
	return rapid.SampledFrom([]int{0, 0, 1, 7, -2}).Draw(t, label)
}

func genResponse(t *rapid.T) *protocol.Response {
	r := &protocol.Response{
		Seq:          rapid.Uint64().Draw(t, "seq"),
		Op:           genPtr(t, "op", genString),
		OK:           rapid.Bool().Draw(t, "ok"),
		NowMS:        genNum(t, "now"),
		Cancelled:    genPtr(t, "cancelled", func(t *rapid.T, l string) bool { return rapid.Bool().Draw(t, l) }),
		PendingCount: genCount(t, "pending"),
		NextWakeupMS: genPtr(t, "wakeup", genNum),
	}
	if rapid.Bool().Draw(t, "has_id") {
		r.ID = protocol.RawJSON(rapid.SampledFrom([]string{`7`, `"x"`, `-0.5e3`, `"caf\u00e9 \"q\""`}).Draw(t, "id"))
	}
	for i := range rapid.IntRange(0, 3).Draw(t, "placements") {
		r.Placements = append(r.Placements, genPlacement(t, i))
	}
	for range rapid.IntRange(0, 2).Draw(t, "queued") {
		r.Queued = append(r.Queued, genString(t, "queued_id"))
	}
	for range rapid.IntRange(0, 2).Draw(t, "rejected") {
		r.Rejected = append(r.Rejected, protocol.Rejection{RequestID: genString(t, "rej_id"), Code: protocol.Code(genString(t, "rej_code")), Message: genString(t, "rej_msg")})
	}
	if rapid.Bool().Draw(t, "has_evidence") {
		r.Evidence = genCommandEvidence(t)
	}
	if rapid.Bool().Draw(t, "has_state") {
		r.State = &protocol.State{IndexNodes: genCount(t, "nodes"), Bindings: []protocol.BindingState{{Key: genString(t, "key"), ExpiresAtMS: genPtr(t, "expires", genNum)}}}
	}
	if rapid.Bool().Draw(t, "has_error") {
		r.Error = &protocol.Error{Code: protocol.Code(genString(t, "code")), Message: genString(t, "message")}
	}
	return r
}

func genPlacement(t *rapid.T, i int) protocol.Placement {
	p := protocol.Placement{
		RequestID:                  genString(t, "request_id"),
		WorkerID:                   rapid.Uint64().Draw(t, "worker"),
		DPRank:                     rapid.Uint32().Draw(t, "rank"),
		Role:                       protocol.Role(genString(t, "role")),
		OverlapBlocks:              rapid.Uint64().Draw(t, "overlap"),
		BestAvailableOverlapBlocks: rapid.Uint64().Draw(t, "best"),
		ISLBlocks:                  rapid.Uint64().Draw(t, "isl"),
		CachedTokens:               rapid.Uint64().Draw(t, "cached"),
		PrefillTokens:              rapid.Uint64().Draw(t, "prefill"),
		QueuedMS:                   genNum(t, "queued_ms"),
		Reason:                     genString(t, "reason"),
		Binding:                    genString(t, "binding"),
	}
	if !rapid.Bool().Draw(t, "has_evidence") {
		return p
	}
	ev := &protocol.PlacementEvidence{Candidates: genCount(t, "candidates"), Ties: genCount(t, "ties"), SelectedCost: genNum(t, "selected"), BestCost: genNum(t, "best_cost")}
	if rapid.Bool().Draw(t, "has_filtered") {
		ev.Filtered = &protocol.FilterCounts{Affinity: genCount(t, "f_affinity"), NotAllowed: genCount(t, "f_not_allowed"), NotPinned: genCount(t, "f_not_pinned"), Busy: genCount(t, "f_busy")}
	}
	for range rapid.IntRange(0, 2).Draw(t, "candidate_set") {
		ev.CandidateSet = append(ev.CandidateSet, protocol.CandidateScore{WorkerID: rapid.Uint64().Draw(t, "c_worker"), DPRank: rapid.Uint32().Draw(t, "c_rank"), OverlapBlocks: rapid.Uint64().Draw(t, "c_overlap"), PrefillBlocks: genNum(t, "c_prefill"), DecodeBlocks: rapid.Uint64().Draw(t, "c_decode"), Cost: genNum(t, "c_cost"), Probability: genNum(t, "c_p")})
	}
	for range rapid.IntRange(0, 2).Draw(t, "filtered_set") {
		ev.FilteredSet = append(ev.FilteredSet, protocol.FilteredRank{WorkerID: rapid.Uint64().Draw(t, "fr_worker"), DPRank: rapid.Uint32().Draw(t, "fr_rank"), Reason: genString(t, "fr_reason")})
	}
	p.Evidence = ev
	return p
}

func genCommandEvidence(t *rapid.T) *protocol.CommandEvidence {
	e := &protocol.CommandEvidence{
		EventsApplied:     genPtr(t, "applied", genCount),
		EventsIgnored:     genCount(t, "ignored"),
		BlocksDropped:     genCount(t, "dropped"),
		ApproxBlocksAdded: genCount(t, "approx_added"),
		ApproxExpired:     genCount(t, "approx_expired"),
	}
	for range rapid.IntRange(0, 2).Draw(t, "skipped") {
		e.EventsSkipped = append(e.EventsSkipped, protocol.SkippedEvent{EventRef: genEventRef(t), Reason: genString(t, "s_reason")})
	}
	note := func() protocol.EventIDNote {
		return protocol.EventIDNote{EventRef: genEventRef(t), LastEventID: rapid.Uint64().Draw(t, "n_last")}
	}
	for range rapid.IntRange(0, 2).Draw(t, "gaps") {
		e.EventIDGaps = append(e.EventIDGaps, note())
	}
	for range rapid.IntRange(0, 2).Draw(t, "repeats") {
		e.EventIDRepeats = append(e.EventIDRepeats, note())
	}
	for range rapid.IntRange(0, 2).Draw(t, "orphaned") {
		e.RequestsOrphaned = append(e.RequestsOrphaned, genString(t, "orphan"))
	}
	for range rapid.IntRange(0, 2).Draw(t, "expired") {
		e.BindingsExpired = append(e.BindingsExpired, protocol.BindingRef{Role: protocol.Role(genString(t, "e_role")), Key: genString(t, "e_key")})
	}
	for range rapid.IntRange(0, 2).Draw(t, "invalidated") {
		e.BindingsInvalidated = append(e.BindingsInvalidated, protocol.BindingRef{Role: protocol.Role(genString(t, "i_role")), Key: genString(t, "i_key")})
	}
	return e
}

func genEventRef(t *rapid.T) protocol.EventRef {
	return protocol.EventRef{Index: genCount(t, "e_index"), WorkerID: rapid.Uint64().Draw(t, "e_worker"),
		DPRank: rapid.Uint32().Draw(t, "e_rank"), EventID: rapid.Uint64().Draw(t, "e_event")}
}
