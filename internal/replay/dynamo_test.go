package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/offline-router/offline-router/internal/wire"
)

// dynReq is a request_end record: request id received at start ms (from
// 1000), 10 ms long, of one 4-token block, in session sess ("" for no
// agent_context) with parent ("" for none).
func dynReq(id, sess, parent string, start int) string {
	ctx := ""
	if sess != "" {
		ctx = fmt.Sprintf(`,"agent_context":{"session_id":%q`, sess)
		if parent != "" {
			ctx += fmt.Sprintf(`,"parent_session_id":%q`, parent)
		}
		ctx += "}"
	}
	return fmt.Sprintf(`{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":%d%s,`+
		`"request":{"request_id":%q,"output_tokens":1,"request_received_ms":%d,"total_time_ms":10,`+
		`"replay":{"trace_block_size":4,"input_length":4,"input_sequence_hashes":[7]}}}`, 1000+start+10, ctx, id, 1000+start)
}

// dynTool is a tool_end of session sess with claude evidence (consumer and
// child "" for none).
func dynTool(call, sess, source, consumer, child, mode string) string {
	c := fmt.Sprintf(`"source_request_id":%q,"execution_mode":%q`, source, mode)
	if child != "" {
		c += fmt.Sprintf(`,"child_session_id":%q`, child)
	}
	if consumer != "" {
		c += fmt.Sprintf(`,"consumer_request_id":%q`, consumer)
	}
	return fmt.Sprintf(`{"schema":"dynamo.request.trace.v1","event_type":"tool_end","event_time_unix_ms":1500,`+
		`"agent_context":{"session_id":%q},"tool":{"tool_call_id":%q,"tool_class":"agent","claude":{%s}}}`, sess, call, c)
}

func readDynamoText(t *testing.T, trace string) ([]Request, error) {
	t.Helper()
	reqs, _, err := readTrace(strings.NewReader(trace), FormatDynamo, readOptions{blockSize: 4, maxLineBytes: wire.DefaultMaxLineBytes})
	return reqs, err
}

// dynLines joins records a line each.
func dynLines(records ...string) string { return strings.Join(records, "\n") + "\n" }

// TestDynamoRefuses: each malformed trace is refused, naming the line and
// the field (or, for what is found once the trace is read, the line of the
// record behind it).
func TestDynamoRefuses(t *testing.T) {
	a := dynReq("a", "", "", 0)
	sa := dynReq("a", "s", "", 0)
	for _, c := range []struct {
		name, trace string
		want        []string
	}{
		{"wrong schema", strings.Replace(a, ".v1", ".v2", 1),
			[]string{`trace line 1: field "schema": expected "dynamo.request.trace.v1", got "dynamo.request.trace.v2"`}},
		{"no schema", strings.Replace(a, `"schema"`, `"x"`, 1), []string{`trace line 1: field "schema": missing`}},
		{"unknown event_type", dynLines(a, strings.Replace(a, "request_end", "request_start", 1)),
			[]string{`trace line 2: field "event_type": expected request_end, tool_end, tool_error, request_payload or tool_start, got "request_start"`}},
		{"missing replay", strings.Replace(a, `"replay"`, `"x"`, 1), []string{`trace line 1: field "request.replay": missing`}},
		{"missing output_tokens", strings.Replace(a, `"output_tokens":1,`, ``, 1), []string{`trace line 1: field "request.output_tokens": missing`}},
		{"missing event time", strings.Replace(a, `"event_time_unix_ms":1010,`, ``, 1), []string{`trace line 1: field "event_time_unix_ms": missing`}},
		{"empty request_id", strings.Replace(a, `"request_id":"a"`, `"request_id":" "`, 1),
			[]string{`trace line 1: field "request.request_id": expected a non-empty string, got " "`}},
		{"no prompt", strings.Replace(strings.Replace(a, `"input_length":4`, `"input_length":0`, 1), `[7]`, `[]`, 1),
			[]string{`trace line 1: field "request.replay.input_length": expected at least 1 token: a request has a prompt`}},
		{"block size 0", strings.Replace(a, `"trace_block_size":4`, `"trace_block_size":0`, 1),
			[]string{`trace line 1: field "request.replay.trace_block_size": expected a block size of at least 1 token, got 0`}},
		{"block size not the replay's", strings.Replace(a, `"trace_block_size":4`, `"trace_block_size":8`, 1),
			[]string{`trace line 1: field "request.replay.trace_block_size": --block-size 4 differs from the trace's trace_block_size 8`}},
		{"mixed block sizes", dynLines(a, strings.Replace(dynReq("b", "", "", 5), `"trace_block_size":4`, `"trace_block_size":2`, 1)+"\n"),
			[]string{`trace line 2: field "request.replay.input_sequence_hashes": 1 hashes for input_length 4: it takes 2 blocks of trace_block_size 2`}},
		{"mixed block sizes, hashes right", dynLines(a, strings.Replace(strings.Replace(dynReq("b", "", "", 5), `"trace_block_size":4`, `"trace_block_size":2`, 1), `[7]`, `[7,8]`, 1)),
			[]string{`trace line 2: field "request.replay.trace_block_size": 2, but line 1's is 4: a trace has one block size`}},
		{"hash count", strings.Replace(a, `[7]`, `[7,8]`, 1),
			[]string{`trace line 1: field "request.replay.input_sequence_hashes": 2 hashes for input_length 4: it takes 1 blocks of trace_block_size 4`}},
		{"hash not u64", strings.Replace(a, `[7]`, `[-7]`, 1),
			[]string{`trace line 1: field "request.replay.input_sequence_hashes[0]": expected an unsigned 64-bit integer, got -7`}},
		{"duplicate id", dynLines(a, dynReq("b", "", "", 1), "", dynReq("a", "", "", 2)),
			[]string{`trace line 4: field "request.request_id": "a" is line 1's too: a request_id names one request`}},
		{"agent_context then none", dynLines(sa, dynReq("b", "", "", 1)),
			[]string{`trace line 2: field "agent_context": missing, and line 1's request has one`}},
		{"none then agent_context", dynLines(a, dynReq("b", "s", "", 1)),
			[]string{`trace line 2: field "agent_context": this request has one and line 1's has none`}},
		{"conflicting parent", dynLines(dynReq("p1", "p", "", 0), dynReq("q1", "q", "", 0), dynReq("c1", "c", "p", 5), dynReq("c2", "c", "q", 6)),
			[]string{`trace line 4: field "agent_context.parent_session_id": "q", but line 3 gives session "c" the parent "p": a session has one parent`}},
		{"unknown parent", dynLines(sa, dynReq("c1", "c", "nope", 5)),
			[]string{`trace line 2: field "agent_context.parent_session_id": session "c" names parent session "nope", which has no requests in the trace`}},
		{"own parent", dynLines(dynReq("a", "s", "s", 0)),
			[]string{`trace line 1: field "agent_context.parent_session_id": session "s" names itself as its parent`}},
		{"empty parent", dynLines(dynReq("a", "s", " ", 0)),
			[]string{`trace line 1: field "agent_context.parent_session_id": expected a non-empty string`}},
		{"no session_id", strings.Replace(sa, `"session_id":"s"`, `"trajectory_id":"s"`, 1),
			[]string{`trace line 1: field "agent_context.session_id": missing`}},
		{"child before its parent", dynLines(dynReq("p1", "p", "", 10), dynReq("c1", "c", "p", 5)),
			[]string{`trace line 2: session "c" starts (request c1 at 1005 ms) before any request of its parent session "p": nothing can have spawned it`}},
		{"tool naming an unknown request", dynLines(sa, dynTool("t1", "s", "zz", "", "", "blocking")),
			[]string{`trace line 2: field "tool.claude.source_request_id": tool t1 names request "zz", which the trace does not hold`}},
		{"tool naming an unknown consumer", dynLines(sa, dynTool("t1", "s", "a", "zz", "", "blocking")),
			[]string{`trace line 2: field "tool.claude.consumer_request_id": tool t1 names request "zz"`}},
		{"tool naming another session's request", dynLines(sa, dynReq("b", "o", "", 1), dynTool("t1", "s", "b", "", "", "blocking")),
			[]string{`trace line 3: field "tool.claude.source_request_id": tool t1 of session "s" names request "b", of session "o": a tool's requests are of its session`}},
		{"two tools naming one child", dynLines(sa, dynReq("c1", "c", "s", 5), dynTool("t1", "s", "a", "", "c", "background"), dynTool("t2", "s", "a", "", "c", "blocking")),
			[]string{`trace line 4: field "tool.claude.child_session_id": tool t2 names child session "c", as line 3's tool t1 does: a child session has one spawn`}},
		{"tool naming another's child", dynLines(sa, dynReq("o1", "o", "", 1), dynReq("c1", "c", "o", 5), dynTool("t1", "s", "a", "", "c", "blocking")),
			[]string{`trace line 4: field "tool.claude.child_session_id": tool t1 of session "s" names child session "c", whose parent_session_id is "o"`}},
		{"execution_mode", dynLines(sa, dynTool("t1", "s", "a", "", "", "detached")),
			[]string{`trace line 2: field "tool.claude.execution_mode": expected blocking or background, got "detached"`}},
		{"claude without agent_context", dynLines(sa, strings.Replace(dynTool("t1", "s", "a", "", "", "blocking"), `"agent_context":{"session_id":"s"},`, ``, 1)),
			[]string{`trace line 2: field "tool.claude": a tool's spawn evidence names requests of its session, and the record has no agent_context`}},
		{"evidence in a trace without agent_context", dynLines(a, dynTool("t1", "s", "a", "", "", "blocking")),
			[]string{`trace line 2: field "tool.claude": tool t1 gives a subagent's spawn, but no request has agent_context`}},
		{"tool without tool", dynLines(sa, `{"schema":"dynamo.request.trace.v1","event_type":"tool_error","event_time_unix_ms":5}`),
			[]string{`trace line 2: field "tool": missing`}},
		{"tool ending before it starts", dynLines(sa, `{"schema":"dynamo.request.trace.v1","event_type":"tool_end","event_time_unix_ms":5,"tool":{"tool_call_id":"t","tool_class":"x","started_at_unix_ms":6}}`),
			[]string{`trace line 2: field "tool": the tool ends at 5, before it starts at 6`}},
		{"request ending before it starts", strings.Replace(strings.Replace(a, `"total_time_ms":10,`, ``, 1), `"event_time_unix_ms":1010`, `"event_time_unix_ms":999`, 1),
			[]string{`trace line 1: field "event_time_unix_ms": the request ends at 999, before it was received at 1000 (request_received_ms)`}},
		{"negative duration", strings.Replace(a, `"total_time_ms":10`, `"total_time_ms":-1`, 1),
			[]string{`trace line 1: field "request.total_time_ms": expected a duration from 0 to 4503599627370496 ms, got -1`}},
		{"time past 2^52", strings.Replace(a, `"event_time_unix_ms":1010`, `"event_time_unix_ms":4503599627370497`, 1),
			[]string{`trace line 1: field "event_time_unix_ms": expected a time from 0 to 4503599627370496 ms, got 4503599627370497`}},
		{"fractional time", strings.Replace(a, `"request_received_ms":1000`, `"request_received_ms":1000.5`, 1),
			[]string{`trace line 1: field "request.request_received_ms": expected an unsigned 64-bit integer, got 1000.5`}},
		{"a slip of a key", strings.Replace(a, `"request_id"`, `"Request-ID"`, 1),
			[]string{`trace line 1: field "request.Request-ID": is not a request field (did you mean "request_id"?)`}},
		{"a slip of a replay key", strings.Replace(a, `"input_length"`, `"inputLength"`, 1),
			[]string{`trace line 1: field "request.replay.inputLength": is not a replay field (did you mean "input_length"?)`}},
		{"not an object", dynLines(a, `[1, 2]`), []string{`trace line 2: expected an object, got an array`}},
		{"not JSON", dynLines(a, `{"schema":`), []string{`trace line 2: field "schema": expected a string, got end of line`}},
		// A request read before its event_type is read once the type is
		// known, and its errors still name it.
		{"held-back request", `{"request":{"request_id":"a","output_tokens":-1},"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":5}`,
			[]string{`trace line 1: field "request.output_tokens": expected an unsigned 64-bit integer, got -1`}},
		{"held-back request, not an object", `{"request":5,"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":5}`,
			[]string{`trace line 1: field "request": expected an object, got number 5`}},
		{"wrapped", `{"timestamp":3,"event":` + strings.Replace(a, `[7]`, `[7,"8"]`, 1) + `}`,
			[]string{`trace line 1: field "event.request.replay.input_sequence_hashes[1]": expected an unsigned 64-bit integer, got a string`}},
		{"wrapped, held back", `{"event":{"request":{"replay":{"input_length":"4"}},"schema":"dynamo.request.trace.v1","event_type":"request_end"}}`,
			[]string{`trace line 1: field "event.request.replay.input_length": expected an unsigned 64-bit integer, got a string`}},
		{"wrapped, missing", `{"event":{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":5}}`,
			[]string{`trace line 1: field "event.request": missing`}},
		{"wrapped beside a field", `{"schema":"dynamo.request.trace.v1","event":` + a + `}`,
			[]string{`trace line 1: field "event": a record wrapped in "event" holds all its fields, but "schema" stands beside it`}},
		{"a field beside a wrapped record", `{"event":` + a + `,"event_type":"request_end"}`,
			[]string{`trace line 1: field "event_type": a record field beside a record wrapped in "event"`}},
		{"only skipped records", `{"schema":"dynamo.request.trace.v1","event_type":"tool_start"}`, []string{errNoRequests.Error()}},
		{"a skipped record of another schema", dynLines(a, `{"schema":"other","event_type":"tool_start"}`), []string{`trace line 2: field "schema": expected`}},
		// The evidence may make a cycle, which the graph's check refuses.
		{"cycle by evidence", dynLines(dynReq("m1", "m", "", 0), dynReq("m2", "m", "", 100), dynReq("c1", "c", "m", 150), dynTool("t", "m", "m2", "m1", "c", "blocking")),
			[]string{"a cycle of dependencies"}},
		{"gzip broken", "\x1f\x8bnot gzip", []string{"the trace starts as gzip but does not read as it"}},
		{"gzip cut short", string(gzipped(t, dynLines(a, dynReq("b", "", "", 1)))[:40]), []string{"trace line 1: unexpected EOF"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := readDynamoText(t, c.trace)
			if err == nil {
				t.Fatalf("read, want an error with %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q, want it to say %q", err, w)
				}
			}
		})
	}
}

func gzipped(t *testing.T, text string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := io.WriteString(zw, text); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestDynamoFallbackEdges: the fallback's searches by start: the spawn
// from the last parent request to start by the child's start (of two that
// start together, the later in order), no join when no parent request
// starts after the child's end, and a tool naming a session the trace
// does not hold saying nothing.
func TestDynamoFallbackEdges(t *testing.T) {
	reqs, err := readDynamoText(t, dynLines(
		dynReq("p1", "p", "", 0),
		dynReq("p3", "p", "", 20),
		dynReq("p2", "p", "", 20), // starts with p3, and goes before it by id
		dynReq("p4", "p", "", 30),
		dynReq("c1", "c", "p", 20),
		dynReq("c2", "c", "p", 40), // ends at 50, after p4's start: no join
		dynTool("t", "p", "p1", "p4", "elsewhere", "blocking"),
	))
	if err != nil {
		t.Fatal(err)
	}
	got := dumpTrace(reqs)
	for _, want := range []string{
		"p2 play=dynamo-play:p1 conv=p kind=tool_continuation in=4 out=1 ids=[1] after(p1 completion sequence +10)\n",
		"p3 play=dynamo-play:p1 conv=p kind=tool_continuation in=4 out=1 ids=[1] after(p2 completion sequence +0)\n",
		"c1 play=dynamo-play:p1 conv=c kind=subagent parent=p root=p in=4 out=1 ids=[1] after(p3 dispatch spawn +0)\n",
		"p4 play=dynamo-play:p1 conv=p kind=tool_continuation in=4 out=1 ids=[1] after(p3 completion sequence +0)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lowered:\n%s\nwant a line %q", got, want)
		}
	}
	if strings.Contains(got, "join") {
		t.Errorf("lowered:\n%s\nwant no join", got)
	}
}

// TestDynamoJoinsTheLastToEnd: a child joins its parent from the request
// that ends last, not the one that starts last.
func TestDynamoJoinsTheLastToEnd(t *testing.T) {
	reqs, err := readDynamoText(t, dynLines(
		dynReq("p1", "p", "", 0),
		dynReq("p2", "p", "", 200),
		strings.Replace(dynReq("c1", "c", "p", 10), `"total_time_ms":10`, `"total_time_ms":150`, 1), // ends at 160
		dynReq("c2", "c", "p", 20), // ends at 30
	))
	if err != nil {
		t.Fatal(err)
	}
	want := "p2 play=dynamo-play:p1 conv=p kind=tool_continuation in=4 out=1 ids=[1] after(p1 completion sequence +190) after(c1 completion join +40)\n"
	if got := dumpTrace(reqs); !strings.Contains(got, want) {
		t.Errorf("lowered:\n%s\nwant a line %q", got, want)
	}
}

// TestDynamoPacksIDs: the ids are kept through keepIDs, packed when asked.
func TestDynamoPacksIDs(t *testing.T) {
	trace := strings.Replace(dynReq("a", "", "", 0), `"input_length":4,"input_sequence_hashes":[7]`,
		`"input_length":40,"input_sequence_hashes":[1,2,3,4,5,6,7,8,9,10]`, 1)
	reqs, _, err := readTrace(strings.NewReader(trace), FormatDynamo, readOptions{blockSize: 4, maxLineBytes: wire.DefaultMaxLineBytes, pack: true})
	if err != nil {
		t.Fatal(err)
	}
	if reqs[0].packed == nil || reqs[0].HashIDs != nil {
		t.Fatalf("ids not packed: %+v", reqs[0])
	}
	if got := fmt.Sprint(reqs[0].appendIDs(nil)); got != "[1 2 3 4 5 6 7 8 9 10]" {
		t.Errorf("ids %s", got)
	}
}

// TestDynamoMillion reads an agentic trace of 10^6 requests: 10^5 sessions
// of ten, every tenth a child of the session before it, spawned and joined
// by the times, and every twentieth by a blocking tool's evidence instead.
func TestDynamoMillion(t *testing.T) {
	const sessions, per = 100_000, 10
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriterSize(pw, 1<<16)
		for j := range sessions {
			parent, base := "", j*7
			if j%10 == 1 {
				parent, base = fmt.Sprintf(`,"parent_session_id":"s%d"`, j-1), (j-1)*7
			}
			for i := range per {
				start, total := base+100*i, 50
				if parent != "" {
					start, total = base+120+5*i, 2
				}
				fmt.Fprintf(w, `{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":%d,"agent_context":{"session_id":"s%d"%s},`+
					`"request":{"request_id":"r%d-%d","output_tokens":1,"request_received_ms":%d,"total_time_ms":%d,`+
					`"replay":{"trace_block_size":4,"input_length":8,"input_sequence_hashes":[%d,%d]}}}`+"\n",
					start+total, j, parent, j, i, start, total, j, j<<20|i)
			}
			if j%20 == 1 {
				fmt.Fprintf(w, `{"schema":"dynamo.request.trace.v1","event_type":"tool_end","event_time_unix_ms":0,"agent_context":{"session_id":"s%d"},`+
					`"tool":{"tool_call_id":"t%d","tool_class":"agent","claude":{"source_request_id":"r%d-1","consumer_request_id":"r%d-3","child_session_id":"s%d","execution_mode":"blocking"}}}`+"\n",
					j-1, j, j-1, j-1, j)
			}
		}
		pw.CloseWithError(w.Flush())
	}()
	began := time.Now()
	reqs, _, err := readTrace(pr, FormatDynamo, readOptions{blockSize: 4, maxLineBytes: wire.DefaultMaxLineBytes, pack: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read %d requests in %v", len(reqs), time.Since(began))
	if len(reqs) != sessions*per {
		t.Fatalf("%d requests, want %d", len(reqs), sessions*per)
	}
	at := map[string]int{}
	plays := map[string]bool{}
	for i := range reqs {
		plays[reqs[i].Agent.Play] = true
		switch id := reqs[i].ID; id {
		case "r0-0", "r0-3", "r1-0", "r10-2", "r11-0", "r99990-0":
			at[id] = i
		}
	}
	if len(plays) != sessions-sessions/10 {
		t.Errorf("%d plays, want %d (each child in its parent's)", len(plays), sessions-sessions/10)
	}
	deps := func(id string) string {
		var b strings.Builder
		for _, d := range reqs[at[id]].Deps {
			fmt.Fprintf(&b, "(%s %s %s +%v)", reqs[d.On].ID, d.Trigger, d.Relation, d.DelayMS)
		}
		return b.String()
	}
	for id, want := range map[string]string{
		"r0-0":  "",
		"r1-0":  "(r0-1 dispatch spawn +20)",                                 // by the tool
		"r0-3":  "(r0-2 completion sequence +50)(r1-9 completion join +133)", // by the tool: the times would say r0-2
		"r11-0": "(r10-1 dispatch spawn +20)",                                // by the times
		"r10-2": "(r10-1 completion sequence +50)(r11-9 completion join +33)",
	} {
		if got := deps(id); got != want {
			t.Errorf("%s waits for %s, want %s", id, got, want)
		}
	}
	if r := reqs[at["r99990-0"]]; r.Agent.Play != "dynamo-play:r99990-0" || r.Arrival != 99990*7 || at["r0-0"] != 0 {
		t.Errorf("r99990-0 at %d: %+v %+v, want its own play, arriving at %d", at["r99990-0"], r, *r.Agent, 99990*7)
	}
}
