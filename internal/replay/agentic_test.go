package replay

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offline-router/offline-router/internal/wire"
)

const agHeader = `{"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 4, "hash_id_scope": "local", "source": {"format": "f", "digest": "d"}}`

// agRow is a valid v2 row of 4 tokens in conversation main, with extra
// fields appended.
func agRow(id, play, extra string) string {
	return `{"request_id": "` + id + `", "play_id": "` + play + `", "session_id": "main", "model": "m", "input_length": 4, "output_length": 1, "hash_ids": [1], "not_before_ms": 0` + extra + "}"
}

// agDep is a dependencies field of one dependency.
func agDep(on, trigger, relation string) string {
	return `, "dependencies": [{"request_id": "` + on + `", "trigger": "` + trigger + `", "relation": "` + relation + `", "delay_ms": 0}]`
}

// v1Row is a valid v1 row of 4 tokens, with extra fields appended.
func v1Row(id, extra string) string {
	return `{"request_id": "` + id + `", "input_length": 4, "output_length": 1, "hash_ids": [1]` + extra + "}"
}

func readAgentic(trace string) ([]Request, error) {
	reqs, _, err := readTrace(strings.NewReader(trace), FormatAgenticMooncake, readOptions{blockSize: 4, maxLineBytes: wire.DefaultMaxLineBytes})
	return reqs, err
}

// TestAgenticRefuses: each file is refused, through readTrace, with an
// error naming the line and the field, or the requests (what checkGraph
// refuses). Each case is the mutation it catches: the check it names
// removed, the file is read.
func TestAgenticRefuses(t *testing.T) {
	h := func(fields string) string { // a header with fields, then a row
		return `{"schema": "dynamo.agentic_mooncake"` + fields + "}\n" + agRow("a", "p", "")
	}
	const okSource = `, "source": {"format": "f", "digest": "d"}`
	lines := func(ls ...string) string { return strings.Join(ls, "\n") }
	for _, c := range []struct {
		name, trace string
		want        []string
	}{
		// The header's fields, one by one.
		{"no version", h(`, "block_size": 4, "hash_id_scope": "local"` + okSource), []string{"trace line 1:", `field "version": missing`}},
		{"version 1", h(`, "version": 1, "block_size": 4, "hash_id_scope": "local"` + okSource), []string{"trace line 1:", `field "version": version 1 is not read here`}},
		{"version a string", h(`, "version": "2", "block_size": 4, "hash_id_scope": "local"` + okSource), []string{"trace line 1:", `field "version": expected an unsigned`}},
		{"no block_size", h(`, "version": 2, "hash_id_scope": "local"` + okSource), []string{"trace line 1:", `field "block_size": missing`}},
		{"block_size 0", h(`, "version": 2, "block_size": 0, "hash_id_scope": "local"` + okSource), []string{"trace line 1:", `field "block_size": expected a block size of at least 1 token`}},
		{"block size differs", h(`, "version": 2, "block_size": 16, "hash_id_scope": "local"` + okSource), []string{"trace line 1:", `field "block_size": the file's block_size 16 is authoritative; --block-size 4 differs`}},
		{"no scope", h(`, "version": 2, "block_size": 4` + okSource), []string{"trace line 1:", `field "hash_id_scope": missing`}},
		{"scope global", h(`, "version": 2, "block_size": 4, "hash_id_scope": "global"` + okSource), []string{"trace line 1:", `field "hash_id_scope": expected "local"`, `got "global"`}},
		{"no source", h(`, "version": 2, "block_size": 4, "hash_id_scope": "local"`), []string{"trace line 1:", `field "source": missing`}},
		{"source a string", h(`, "version": 2, "block_size": 4, "hash_id_scope": "local", "source": "weka"`), []string{"trace line 1:", `field "source": expected an object`}},
		{"empty source format", h(`, "version": 2, "block_size": 4, "hash_id_scope": "local", "source": {"format": "", "digest": "d"}`), []string{"trace line 1:", `field "source.format": expected a non-empty string`}},
		{"no source digest", h(`, "version": 2, "block_size": 4, "hash_id_scope": "local", "source": {"format": "f"}`), []string{"trace line 1:", `field "source.digest": missing`}},
		{"header key slip", h(`, "version": 2, "blockSize": 4, "hash_id_scope": "local"` + okSource), []string{"trace line 1:", `field "blockSize": is not an Agentic Mooncake header field (did you mean "block_size"?)`}},
		{"header alone", "\n" + agHeader + "\n\n", []string{"trace line 2: the v2 header is followed by no rows"}},
		{"a second header", lines(agHeader, agRow("a", "p", ""), agHeader), []string{"trace line 3:", `field "schema": a row has none: only the v2 header has a schema`}},
		{"a header after a v1 row", lines(v1Row("a", ""), agHeader), []string{"trace line 2:", `field "schema": a row has none: only the v2 header has a schema`}},

		// A v2 row's fields.
		{"no request_id", lines(agHeader, `{"play_id": "p", "session_id": "s", "model": "m", "input_length": 4, "output_length": 1, "hash_ids": [1], "not_before_ms": 0}`), []string{"trace line 2:", `field "request_id": missing`}},
		{"blank request_id", lines(agHeader, agRow(" ", "p", "")), []string{"trace line 2:", `field "request_id": expected a non-empty string`}},
		{"no play_id", lines(agHeader, `{"request_id": "a", "session_id": "s", "model": "m", "input_length": 4, "output_length": 1, "hash_ids": [1], "not_before_ms": 0}`), []string{"trace line 2:", `field "play_id": missing`}},
		{"empty play_id", lines(agHeader, agRow("a", "", "")), []string{"trace line 2:", `field "play_id": expected a non-empty string`}},
		{"no session_id", lines(agHeader, `{"request_id": "a", "play_id": "p", "model": "m", "input_length": 4, "output_length": 1, "hash_ids": [1], "not_before_ms": 0}`), []string{"trace line 2:", `field "session_id": missing`}},
		{"integer session_id", lines(agHeader, `{"request_id": "a", "play_id": "p", "session_id": 3, "model": "m", "input_length": 4, "output_length": 1, "hash_ids": [1], "not_before_ms": 0}`), []string{"trace line 2:", `field "session_id": expected a string`}},
		{"no model", lines(agHeader, `{"request_id": "a", "play_id": "p", "session_id": "s", "input_length": 4, "output_length": 1, "hash_ids": [1], "not_before_ms": 0}`), []string{"trace line 2:", `field "model": missing`}},
		{"no not_before_ms", lines(agHeader, `{"request_id": "a", "play_id": "p", "session_id": "s", "model": "m", "input_length": 4, "output_length": 1, "hash_ids": [1]}`), []string{"trace line 2:", `field "not_before_ms": missing`}},
		{"negative not_before_ms", lines(agHeader, `{"request_id": "a", "play_id": "p", "session_id": "s", "model": "m", "input_length": 4, "output_length": 1, "hash_ids": [1], "not_before_ms": -1}`), []string{"trace line 2:", `field "not_before_ms": expected a time from 0`}},
		{"negative recorded_api_time_ms", lines(agHeader, agRow("a", "p", `, "recorded_api_time_ms": -1`)), []string{"trace line 2:", `field "recorded_api_time_ms": expected a time from 0`}},
		{"no input", lines(agHeader, `{"request_id": "a", "play_id": "p", "session_id": "s", "model": "m", "output_length": 1, "hash_ids": [1], "not_before_ms": 0}`), []string{"trace line 2:", `field "input_length": missing`}},
		{"input twice", lines(agHeader, agRow("a", "p", `, "input_tokens": 4`)), []string{"trace line 2:", `field "input_tokens": give input_length or input_tokens, not both`}},
		{"input 0", lines(agHeader, `{"request_id": "a", "play_id": "p", "session_id": "s", "model": "m", "input_length": 0, "output_length": 1, "hash_ids": [], "not_before_ms": 0}`), []string{"trace line 2:", `field "input_length": expected at least 1 token`}},
		{"no output", lines(agHeader, `{"request_id": "a", "play_id": "p", "session_id": "s", "model": "m", "input_length": 4, "hash_ids": [1], "not_before_ms": 0}`), []string{"trace line 2:", `field "output_length": missing`}},
		{"output twice", lines(agHeader, agRow("a", "p", `, "output_tokens": 4`)), []string{"trace line 2:", `field "output_tokens": give output_length or output_tokens, not both`}},
		{"no hash_ids", lines(agHeader, `{"request_id": "a", "play_id": "p", "session_id": "s", "model": "m", "input_length": 4, "output_length": 1, "not_before_ms": 0}`), []string{"trace line 2:", `field "hash_ids": missing`}},
		{"hash id count", lines(agHeader, `{"request_id": "a", "play_id": "p", "session_id": "s", "model": "m", "input_length": 5, "output_length": 1, "hash_ids": [1], "not_before_ms": 0}`), []string{"trace line 2:", `field "hash_ids": 1 ids for input_length 5: it takes exactly 2 blocks of 4 tokens`}},
		{"output_token_ids count", lines(agHeader, agRow("a", "p", `, "output_token_ids": [1, 2]`)), []string{"trace line 2:", `field "output_token_ids": 2 ids for output_length 1`}},
		{"output token id past 32 bits", lines(agHeader, agRow("a", "p", `, "output_token_ids": [4294967296]`)), []string{"trace line 2:", `field "output_token_ids[0]": expected a token id of 32 bits`}},
		{"duplicate request_id", lines(agHeader, agRow("a", "p", ""), "", agRow("a", "p", "")), []string{"trace line 4:", `field "request_id": "a" is also the request_id of line 2`}},
		{"wait_for in v2", lines(agHeader, agRow("a", "p", `, "wait_for": []`)), []string{"trace line 2:", `field "wait_for": is v1's`}},
		{"row key slip", lines(agHeader, agRow("a", "p", `, "Play_ID": "q"`)), []string{"trace line 2:", `field "Play_ID": is not an Agentic Mooncake row field (did you mean "play_id"?)`}},
		{"priority as Mooncake's", lines(agHeader, agRow("a", "p", `, "strict_priority": 1.5`)), []string{"trace line 2:", `field "strict_priority"`}},

		// Dependencies.
		{"dangling", lines(agHeader, agRow("a", "p", ""), agRow("b", "p", agDep("ghost", "completion", "sequence"))), []string{"trace line 3:", `field "dependencies[0].request_id": "ghost" is not a request_id of the file`}},
		{"self", lines(agHeader, agRow("a", "p", ""), agRow("b", "p", agDep("b", "completion", "sequence"))), []string{"trace line 3:", `field "dependencies[0].request_id": request b cannot depend on itself`}},
		{"cross-play", lines(agHeader, agRow("a", "p", ""), agRow("b", "q", agDep("a", "completion", "sequence"))), []string{"trace line 3:", `field "dependencies[0].request_id": request a is in play p, not in this row's play q`}},
		{"cycle", lines(agHeader, agRow("a", "p", ""), agRow("x", "p", agDep("y", "completion", "sequence")), agRow("y", "p", agDep("x", "completion", "sequence"))), []string{"a cycle of dependencies: 2 requests", "x", "y"}},
		{"sequence on dispatch", lines(agHeader, agRow("a", "p", ""), agRow("b", "p", agDep("a", "dispatch", "sequence"))), []string{"trace line 3:", `field "dependencies[0]": a sequence dependency waits for completion: only a spawn may wait for a dispatch`}},
		{"join on dispatch", lines(agHeader, agRow("a", "p", ""), agRow("b", "p", agDep("a", "dispatch", "join"))), []string{"trace line 3:", `field "dependencies[0]": a join dependency`}},
		{"barrier on dispatch", lines(agHeader, agRow("a", "p", ""), agRow("b", "p", agDep("a", "dispatch", "replay_barrier"))), []string{"trace line 3:", `field "dependencies[0]": a replay_barrier dependency`}},
		{"unknown trigger", lines(agHeader, agRow("a", "p", ""), agRow("b", "p", agDep("a", "start", "spawn"))), []string{"trace line 3:", `field "dependencies[0].trigger": expected one of completion, dispatch, got "start"`}},
		{"unknown relation", lines(agHeader, agRow("a", "p", ""), agRow("b", "p", agDep("a", "completion", "fork"))), []string{"trace line 3:", `field "dependencies[0].relation": expected one of sequence, spawn, join, replay_barrier, got "fork"`}},
		{"dependency without delay", lines(agHeader, agRow("a", "p", ""), agRow("b", "p", `, "dependencies": [{"request_id": "a", "trigger": "completion", "relation": "join"}]`)), []string{"trace line 3:", `field "dependencies[0].delay_ms": missing`}},
		{"dependency without trigger", lines(agHeader, agRow("a", "p", ""), agRow("b", "p", `, "dependencies": [{"request_id": "a", "relation": "join", "delay_ms": 0}]`)), []string{"trace line 3:", `field "dependencies[0].trigger": missing`}},
		{"dependency key slip", lines(agHeader, agRow("a", "p", ""), agRow("b", "p", `, "dependencies": [{"request_id": "a", "trigger": "completion", "relation": "join", "delayMs": 0}]`)), []string{"trace line 3:", `field "dependencies[0].delayMs": is not a dependency field (did you mean "delay_ms"?)`}},
		{"dependency named twice", lines(agHeader, agRow("a", "p", ""), agRow("b", "p", `, "dependencies": [{"request_id": "a", "trigger": "completion", "relation": "join", "delay_ms": 0}, {"request_id": "a", "trigger": "completion", "relation": "join", "delay_ms": 5}]`)),
			[]string{"trace line 3:", `field "dependencies[1].request_id": request a is named twice as a join on completion`}},
		{"play without a root", lines(agHeader, agRow("a", "p", ""), agRow("x", "q", agDep("y", "completion", "sequence")), agRow("y", "q", agDep("x", "completion", "sequence"))), []string{"trace line 3: play q has no root"}},
		{"two parents", lines(agHeader, agRow("a", "p", ""), `{"request_id": "b", "play_id": "p", "session_id": "other", "model": "m", "input_length": 4, "output_length": 1, "hash_ids": [1], "not_before_ms": 0}`,
			`{"request_id": "c", "play_id": "p", "session_id": "sub", "model": "m", "input_length": 4, "output_length": 1, "hash_ids": [1], "not_before_ms": 0`+agDep("a", "dispatch", "spawn")+`}`,
			`{"request_id": "d", "play_id": "p", "session_id": "sub", "model": "m", "input_length": 4, "output_length": 1, "hash_ids": [1], "not_before_ms": 0`+agDep("b", "completion", "spawn")+`}`),
			[]string{"request d", "conversation sub of play p is spawned by two conversations, main and other"}},

		// source_play_ordinal.
		{"ordinal partial", lines(agHeader, agRow("a", "p", `, "source_play_ordinal": 0`), agRow("b", "q", "")), []string{"trace line 3:", `field "source_play_ordinal": on every row or on none, and the first row's (line 2) is given`}},
		{"ordinal partial, the first without", lines(agHeader, agRow("a", "p", ""), agRow("b", "q", `, "source_play_ordinal": 0`)), []string{"trace line 3:", `field "source_play_ordinal": on every row or on none, and the first row's (line 2) is not`}},
		{"ordinal differs in a play", lines(agHeader, agRow("a", "p", `, "source_play_ordinal": 0`), agRow("b", "p", `, "source_play_ordinal": 1`)), []string{"trace line 3:", `field "source_play_ordinal": 1, but play p's is 0 on line 2`}},
		{"ordinal gap", lines(agHeader, agRow("a", "p", `, "source_play_ordinal": 0`), agRow("b", "q", `, "source_play_ordinal": 2`)), []string{"trace line 3:", `field "source_play_ordinal": play q's is 2, but 2 plays have 0 to 1`}},
		{"ordinal twice", lines(agHeader, agRow("a", "p", `, "source_play_ordinal": 1`), agRow("b", "q", `, "source_play_ordinal": 1`)), []string{"trace line 3:", `field "source_play_ordinal": play q's is 1, as play p's is`}},

		// v1 rows.
		{"v1 without request_id", `{"input_length": 4, "output_length": 1, "hash_ids": [1]}`, []string{"trace line 1:", `field "request_id": missing`}},
		{"v1 without hash_ids", `{"request_id": "a", "input_length": 4, "output_length": 1}`, []string{"trace line 1:", `field "hash_ids": missing`}},
		{"v1 hash id count", `{"request_id": "a", "input_length": 4, "output_length": 1, "hash_ids": [1, 2]}`, []string{"trace line 1:", `field "hash_ids": 2 ids for input_length 4: it takes exactly 1 blocks`}},
		{"v1 without output", `{"request_id": "a", "input_tokens": 4, "hash_ids": [1]}`, []string{"trace line 1:", `field "output_length": missing`}},
		{"v1 dependencies", v1Row("a", `, "dependencies": []`), []string{"trace line 1:", `field "dependencies": is v2's, and a v2 file opens with its header`}},
		{"v1 play_id", v1Row("a", `, "play_id": "p"`), []string{"trace line 1:", `field "play_id": is v2's`}},
		{"v1 not_before_ms", v1Row("a", `, "not_before_ms": 0`), []string{"trace line 1:", `field "not_before_ms": is v2's`}},
		{"v1 delay twice", lines(v1Row("a", ""), v1Row("b", `, "wait_for": ["a"], "delay": 1, "delay_ms": 2`)), []string{"trace line 2:", `field "delay_ms": give delay or delay_ms, not both`}},
		{"v1 timestamp twice", v1Row("a", `, "created_time": 1, "timestamp": 2`), []string{"trace line 1:", `field "timestamp": give timestamp or created_time, not both`}},
		{"v1 negative tool wait", lines(v1Row("a", ""), v1Row("b", `, "wait_for": ["a"], "tool_wait_ms": -5`)), []string{"trace line 2:", `field "tool_wait_ms": expected a delay from 0`}},
		{"v1 wait_for of a number", lines(v1Row("a", ""), v1Row("b", `, "wait_for": [5]`)), []string{"trace line 2:", `field "wait_for[0]": expected a string`}},
		{"v1 wait_for of null", lines(v1Row("a", ""), v1Row("b", `, "wait_for": [null]`)), []string{"trace line 2:", `field "wait_for[0]": expected a request id, got null`}},
		{"v1 duplicate request_id", lines(v1Row("a", ""), v1Row("a", "")), []string{"trace line 2:", `field "request_id": "a" is also the request_id of line 1`}},
		{"v1 dangling", lines(v1Row("a", ""), v1Row("b", `, "wait_for": ["a", "ghost"]`)), []string{"trace line 2:", `field "wait_for[1]": "ghost" is not a request_id of the file`}},
		{"v1 self", lines(v1Row("a", ""), v1Row("b", `, "wait_for": ["b"]`)), []string{"trace line 2:", `field "wait_for[0]": request b cannot depend on itself`}},
		{"v1 named twice", lines(v1Row("a", ""), v1Row("b", `, "wait_for": ["a", "a"]`)), []string{"trace line 2:", `field "wait_for[1]": request a is named twice as a join on completion`}},
		{"v1 no root", lines(v1Row("a", ""), v1Row("x", `, "wait_for": ["y"]`), v1Row("y", `, "wait_for": ["x"]`)), []string{"trace line 2: request x and all it waits for", "have no root"}},
		{"v1 key slip", v1Row("a", `, "Wait-For": []`), []string{"trace line 1:", `field "Wait-For": is not an Agentic Mooncake v1 row field (did you mean "wait_for"?)`}},
		{"v1 not JSON", `{"request_id": "a",`, []string{"trace line 1:", "expected a quoted key"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := readAgentic(c.trace)
			if err == nil {
				t.Fatalf("read without error, want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q, want it to mention %q", err, w)
				}
			}
		})
	}
}

// TestAgenticBlockSize: the caller's pre-read of a file's block size, on
// its first line: a v2 header's, none for a v1 row, and a bad header's or
// a broken line's error.
func TestAgenticBlockSize(t *testing.T) {
	for _, c := range []struct {
		line string
		bs   uint64
		v2   bool
		err  string
	}{
		{agHeader, 4, true, ""},
		{strings.Replace(agHeader, `"block_size": 4`, `"block_size": 512`, 1), 512, true, ""},
		{v1Row("a", ""), 0, false, ""},
		{v1Row("a", `, "schema": 3`), 0, false, ""}, // not v2's schema: a row (which the reader then refuses)
		{strings.Replace(agHeader, `"local"`, `"global"`, 1), 0, true, `field "hash_id_scope"`},
		{`{"schema": "dynamo.agentic_mooncake"`, 0, false, `after the value of "schema"`},
	} {
		bs, v2, err := agenticBlockSize([]byte(c.line))
		if bs != c.bs || v2 != c.v2 || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%.60s: got %d, %v, %v; want %d, %v, %q", c.line, bs, v2, err, c.bs, c.v2, c.err)
		}
	}
}

// TestAgenticNullIsAbsent: null is an absent field, so a null optional
// field changes nothing and a null required one is missing.
func TestAgenticNullIsAbsent(t *testing.T) {
	reqs, err := readAgentic(agHeader + "\n" + agRow("a", "p", `, "dependencies": null, "source_play_ordinal": null, "output_token_ids": null, "priority": null, "recorded_api_time_ms": null`))
	if err != nil || len(reqs) != 1 || reqs[0].Deps != nil || reqs[0].Priority != nil {
		t.Fatalf("%v, %+v", err, reqs)
	}
	if _, err := readAgentic(agHeader + "\n" + `{"request_id": "a", "play_id": "p", "session_id": "s", "model": null, "input_length": 4, "output_length": 1, "hash_ids": [1], "not_before_ms": 0}`); err == nil || !strings.Contains(err.Error(), `field "model": missing`) {
		t.Errorf("a null model: %v, want it missing", err)
	}
	reqs, err = readAgentic(v1Row("a", `, "session_id": null, "wait_for": null, "timestamp": null, "delay": null, "tool_wait_ms": null`))
	if err != nil || reqs[0].Agent.Conversation != agenticSession || reqs[0].Arrival != 0 {
		t.Fatalf("%v, %+v", err, reqs)
	}
}

// TestAgenticDependentsArriveByTheirDependencies: a dependent's own time
// (v2's not_before_ms, v1's timestamp) is checked but not its Arrival, which
// is 0; a root's is its time.
func TestAgenticDependentsArriveByTheirDependencies(t *testing.T) {
	for _, trace := range []string{
		agHeader + "\n" + agRow("a", "p", "") + "\n" +
			`{"request_id": "b", "play_id": "p", "session_id": "s", "model": "m", "input_length": 4, "output_length": 1, "hash_ids": [1], "not_before_ms": 99` + agDep("a", "completion", "sequence") + "}",
		v1Row("a", `, "timestamp": 0`) + "\n" + v1Row("b", `, "timestamp": 99, "wait_for": ["a"]`),
	} {
		reqs, err := readAgentic(trace)
		if err != nil {
			t.Fatal(err)
		}
		if reqs[1].Arrival != 0 || len(reqs[1].Deps) != 1 {
			t.Errorf("%.40s: the dependent arrives at %v, want 0 (released by its dependency)", trace, reqs[1].Arrival)
		}
	}
	reqs, err := readAgentic(v1Row("a", `, "timestamp": 12.5, "delay": 3, "tool_wait_ms": 4`))
	if err != nil || reqs[0].Arrival != 12.5 || reqs[0].Deps != nil || reqs[0].DelayMS != nil {
		t.Errorf("a v1 root: %v, %+v; want it at its timestamp, its delays ignored", err, reqs)
	}
}

// TestAgenticMillion: 10^6 requests, v2, 10^5 plays of 10, streamed
// through a pipe, each play a root, a subagent spawned on its dispatch, a
// chain of tool continuations and a join; every play's raw ids the same.
// It catches what is not linear (a scan per request, per play or per
// dependency would take hours) and checks the order, the indices and the
// ids' play scope at that size.
func TestAgenticMillion(t *testing.T) {
	const plays, per = 100_000, 10
	// A play's lines, P standing for its number (they are written with
	// each P replaced, not formatted: formatting took a core of its own).
	var play [][]string
	for i := range per {
		conv, deps := "main", ""
		dep := func(on int, trigger, relation string) string {
			return fmt.Sprintf(`{"request_id": "pP-%d", "trigger": "%s", "relation": "%s", "delay_ms": 1}`, on, trigger, relation)
		}
		switch {
		case i == 0:
		case i == 1:
			conv, deps = "sub", dep(0, "dispatch", "spawn")
		case i == 2:
			deps = dep(0, "completion", "sequence")
		case i < per-1:
			deps = dep(i-1, "completion", "sequence")
		default:
			deps = dep(1, "completion", "join") + ", " + dep(i-1, "completion", "sequence")
		}
		play = append(play, strings.Split(fmt.Sprintf(`{"request_id": "pP-%d", "play_id": "play-P", "session_id": "%s", "model": "m", "input_length": 12, "output_length": %d, "hash_ids": [1, 2, %d], "not_before_ms": P, "dependencies": [%s]}`+"\n",
			i, conv, i%3, 3+i, deps), "P"))
	}
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriter(pw)
		w.WriteString(agHeader + "\n")
		var num []byte
		for p := range plays {
			num = strconv.AppendInt(num[:0], int64(p), 10)
			for _, line := range play {
				for k, part := range line {
					if k > 0 {
						w.Write(num)
					}
					w.WriteString(part)
				}
			}
		}
		pw.CloseWithError(w.Flush())
	}()
	start := time.Now()
	reqs, _, err := readTrace(pr, FormatAgenticMooncake, readOptions{blockSize: 4, maxLineBytes: wire.DefaultMaxLineBytes, pack: true})
	pr.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests in %v", len(reqs), time.Since(start))
	if len(reqs) != plays*per {
		t.Fatalf("%d requests, want %d", len(reqs), plays*per)
	}
	last := &reqs[len(reqs)-1]
	if last.ID != fmt.Sprintf("p%d-%d", plays-1, per-1) || last.Agent.Play != fmt.Sprintf("play-%d", plays-1) || last.Agent.Kind != KindToolContinuation ||
		len(last.Deps) != 2 || reqs[last.Deps[0].On].ID != fmt.Sprintf("p%d-1", plays-1) || reqs[last.Deps[1].On].ID != fmt.Sprintf("p%d-8", plays-1) {
		t.Errorf("last request %+v, deps %+v", last, last.Deps)
	}
	if sub := reqs[len(reqs)-per+1].Agent; sub.Kind != KindSubagent || sub.Parent != "main" {
		t.Errorf("a play's second request: %+v, want a subagent of main", sub)
	}
	if r := reqs[0]; r.Arrival != 0 || len(r.Deps) != 0 || reqs[per].Arrival != 1 {
		t.Errorf("roots arrive at %v and %v, want 0 and 1", r.Arrival, reqs[per].Arrival)
	}
	first, other := reqs[0].appendIDs(nil), reqs[len(reqs)-per].appendIDs(nil)
	if len(first) != 3 || first[0] == other[0] || first[1] == other[1] {
		t.Errorf("raw ids 1 and 2 of the first and last plays lowered to %v and %v: want the plays' ids apart", first, other)
	}
}
