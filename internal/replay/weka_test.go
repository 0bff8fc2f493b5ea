package replay

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var sharedWeka = filepath.Join("..", "..", "..", "shared", "traces", "weka-two-plays.jsonl")

// The shared fixture, AISimulate's own two plays, lowered by the rule
// with the basis given (the file does not show it).
func TestWekaSharedFixture(t *testing.T) {
	if _, err := os.Stat(sharedWeka); err != nil {
		t.Skipf("%s is absent: ../shared is not beside the repository", sharedWeka)
	}
	checkLowered(t, sharedWeka, FormatWeka, filepath.Join("testdata", "traces", "weka-shared-two-plays.lowered"))
}

// wekaRead reads trace as Weka at 4-token blocks, the basis given.
func wekaRead(trace string, basis NestedBasis) ([]Request, error) {
	reqs, _, err := readTrace(strings.NewReader(trace), FormatWeka, readOptions{blockSize: 4, maxLineBytes: 1 << 20, basis: basis})
	return reqs, err
}

// wekaPlayLine is a play whose requests are reqs (JSON array members).
func wekaPlayLine(id, reqs string) string {
	return `{"id":"` + id + `","block_size":4,"hash_id_scope":"local","requests":[` + reqs + `]}`
}

const wekaReq = `{"t":0,"type":"s","model":"m","in":4,"out":1,"hash_ids":[1],"api_time":1}`

func wekaSub(fields, children string) string {
	return `{"t":0.5,"type":"subagent","agent_id":"a","subagent_type":"Explore","status":"completed"` + fields + `,"requests":[` + children + `]}`
}

func TestWekaRefuses(t *testing.T) {
	child := `{"t":0.5,"type":"n","model":"m","in":4,"out":1}`
	for trace, want := range map[string]string{
		`{"block_size":4,"hash_id_scope":"local","requests":[` + wekaReq + `]}`: `trace line 1: field "id": missing`,
		wekaPlayLine("", wekaReq): `trace line 1: field "id": missing`,
		`{"id":"p","hash_id_scope":"local","requests":[` + wekaReq + `]}`:                 `trace line 1: field "block_size": missing`,
		`{"id":"p","block_size":16,"hash_id_scope":"local","requests":[` + wekaReq + `]}`: `trace line 1: field "block_size": the trace's blocks are 16 tokens, the replay's --block-size is 4`,
		`{"id":"p","block_size":4,"hash_id_scope":"global","requests":[` + wekaReq + `]}`: `trace line 1: field "hash_id_scope": "global": the only scope is "local"`,
		`{"id":"p","block_size":4,"hash_id_scope":"local","Block_Size":4,"requests":[]}`:  `trace line 1: field "Block_Size": is not a Weka play field (did you mean "block_size"?)`,
		wekaPlayLine("p", ""): `trace line 1: field "requests": a play has at least one request of its main agent`,
		wekaPlayLine("p", wekaReq) + "\n" + wekaPlayLine("p", wekaReq):                                  `trace line 2: field "id": play "p" is on line 1 too`,
		wekaPlayLine("p", `{"t":0,"type":"x","model":"m","in":4,"out":1}`):                              `trace line 1: field "requests[0]": field "type": "x": expected "s", "n" or "subagent"`,
		wekaPlayLine("p", `{"type":"s","model":"m","in":4,"out":1}`):                                    `field "requests[0]": field "t": missing`,
		wekaPlayLine("p", `{"t":-1,"type":"s","model":"m","in":4,"out":1}`):                             `trace line 1: field "requests[0].t": expected seconds from 0 to`,
		wekaPlayLine("p", `{"t":0,"type":"s","in":4,"out":1}`):                                          `field "requests[0]": field "model": missing`,
		wekaPlayLine("p", `{"t":0,"type":"s","model":"m","in":0,"out":1}`):                              `field "requests[0]": field "in": a request has a prompt of at least 1 token`,
		wekaPlayLine("p", `{"t":0,"type":"s","model":"m","in":4}`):                                      `field "requests[0]": field "out": missing (0 is a prefill-only request)`,
		wekaPlayLine("p", `{"t":0,"type":"s","model":"m","in":4,"out":1,"hash_ids":[1,-2]}`):            `trace line 1: field "requests[0].hash_ids[1]": expected an unsigned 64-bit integer, got -2`,
		wekaPlayLine("p", `{"t":0,"type":"s","model":"m","in":4,"out":1,"apiTime":1}`):                  `field "requests[0].apiTime": is not a Weka request or subagent field (did you mean "api_time"?)`,
		wekaPlayLine("p", `{"t":0,"type":"s","model":"m","in":4,"out":1,"status":"completed"}`):         `field "type": "s" is a request, but the record has a subagent's fields`,
		`{"id":"p","models":["a"],"block_size":4,"hash_id_scope":"local","requests":[` + wekaReq + `]}`: `trace line 1: field "requests[0].model": model "m" is not one of the play's models ["a"]`,
		// Subagents.
		wekaPlayLine("p", wekaSub("", child)+","+wekaReq):                                                                  `trace line 1: play "p": requests[0]: a subagent before any request of the main agent: nothing spawned it`,
		wekaPlayLine("p", wekaReq+","+wekaSub(`,"in":4`, child)):                                                           `field "requests[1]": field "type": "subagent" is a subagent, but the record has a request's fields`,
		wekaPlayLine("p", wekaReq+","+wekaSub(`,"status":"failed"`, child)):                                                `field "requests[1].status": appears more than once`,
		wekaPlayLine("p", wekaReq+","+wekaSub(`,"duration_ms":-5`, child)):                                                 `field "requests[1].duration_ms": expected a duration from 0`,
		wekaPlayLine("p", wekaReq+","+wekaSub("", "")):                                                                     `field "requests[1]": field "requests": a subagent without requests`,
		wekaPlayLine("p", wekaReq+","+wekaSub("", wekaSub("", child))):                                                     `field "requests[1].requests[0].requests": a subagent's request holds no requests`,
		wekaPlayLine("p", wekaReq+","+strings.Replace(wekaSub("", child), `"status":"completed"`, `"status":"failed"`, 1)): `field "requests[1]": field "status": "failed": replay takes completed and async_launched subagents`,
		wekaPlayLine("p", wekaReq+","+strings.Replace(wekaSub("", child), `"agent_id":"a",`, ``, 1)):                       `field "requests[1]": field "agent_id": missing`,
		wekaPlayLine("p", wekaReq+","+strings.Replace(wekaSub("", child), `"subagent_type":"Explore",`, ``, 1)):            `field "requests[1]": field "subagent_type": missing`,
		wekaPlayLine("p", `{"t":1,"type":"s","model":"m","in":4,"out":1},`+wekaSub("", child)):                             `trace line 1: play "p": requests[1]: the subagent's marker (t 0.5) is before its owner, requests[0] (t 1), spawned it`,
		wekaPlayLine("p", wekaReq+","+wekaSub(`,"duration_ms":100`, `{"t":0.7,"type":"n","model":"m","in":4,"out":1}`)):    `trace line 1: play "p": requests[1].requests[0]: starts at t 0.7, after its subagent's end (t 0.5 + duration_ms 100): duration_ms understates its own requests`,
		// The line's own limits.
		wekaPlayLine("p", `{"t":0,"type":"s","model":"m","in":4,"out":1,"hash_ids":[1]`): `trace line 1: field "requests[0]": expected ',' or '}' after the value of "hash_ids"`,
	} {
		_, err := wekaRead(trace, BasisAbsolute)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s:\n got %v\nwant %q", trace, err, want)
		}
	}
}

// The basis: given, checked against the file; else the file's where it
// shows one, refused where it shows both or neither.
func TestWekaNestedBasis(t *testing.T) {
	sub := func(id, marker, t, duration string) string {
		return wekaPlayLine(id, wekaReq+","+`{"t":`+marker+`,"type":"subagent","agent_id":"a","subagent_type":"E","status":"completed","duration_ms":`+duration+
			`,"requests":[{"t":`+t+`,"type":"n","model":"m","in":4,"out":1}]}`)
	}
	before := sub("p", "5", "1", "3000")   // before its marker: relative only
	afterEnd := sub("q", "5", "6", "3000") // read as relative, at 11 s, after its end (8 s): absolute only
	either := sub("p", "1", "2", "5000")   // within the subagent (1 to 6 s) either way
	for _, c := range []struct {
		trace string
		basis NestedBasis
		start float64 // ms, the child's delay after its owner's dispatch
		err   string
	}{
		{before, BasisFromFile, 6000, ""},
		{before, BasisRelative, 6000, ""},
		{before, BasisAbsolute, 0, "starts before its subagent's marker, which no absolute time can (--weka-nested-basis absolute)"},
		{afterEnd, BasisFromFile, 6000, ""},
		{afterEnd, BasisAbsolute, 6000, ""},
		{afterEnd, BasisRelative, 0, "read as relative, it would start after its subagent ended (--weka-nested-basis relative)"},
		{either, BasisFromFile, 0, "give --weka-nested-basis absolute"},
		{either, BasisAbsolute, 2000, ""},
		{either, BasisRelative, 3000, ""},
		{before + "\n" + afterEnd, BasisFromFile, 0, "so times look relative, but"},
		{wekaPlayLine("p", wekaReq), BasisFromFile, -1, ""}, // no subagent: nothing to decide
	} {
		reqs, err := wekaRead(c.trace, c.basis)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s (%q): got %v, want %q", c.trace, c.basis, err, c.err)
			}
		case err != nil:
			t.Errorf("%s (%q): %v", c.trace, c.basis, err)
		case c.start >= 0 && (len(reqs) != 2 || reqs[1].Deps[0].DelayMS != c.start):
			t.Errorf("%s (%q): got %s, want the child %v ms after its owner's dispatch", c.trace, c.basis, dumpTrace(reqs), c.start)
		}
	}
}

// The reader is linear: 10^5 plays of ten requests (a subagent of two
// among them) read in one pass, ids scoped per play.
func TestWekaMillionRequests(t *testing.T) {
	const plays = 100_000
	var b strings.Builder
	for p := range plays {
		fmt.Fprintf(&b, `{"id":"p%d","block_size":4,"hash_id_scope":"local","requests":[`, p)
		for k := range 8 {
			if k == 4 {
				b.WriteString(`{"t":4.5,"type":"subagent","agent_id":"a","subagent_type":"E","status":"completed","duration_ms":1000,"requests":[` +
					`{"t":4.5,"type":"n","model":"m","in":8,"out":1,"hash_ids":[9,10],"api_time":0.2},{"t":5,"type":"n","model":"m","in":8,"out":1,"hash_ids":[9,11]}]},`)
			}
			fmt.Fprintf(&b, `{"t":%d,"type":"s","model":"m","in":%d,"out":2,"hash_ids":[1,2,3,4,5,6,7,8],"api_time":0.5}`, k, 4*(k+1))
			if k < 7 {
				b.WriteByte(',')
			}
		}
		b.WriteString("]}\n")
	}
	reqs, err := wekaRead(b.String(), BasisAbsolute)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 10*plays {
		t.Fatalf("%d requests, want %d", len(reqs), 10*plays)
	}
	// The last play: its main request at 5 s (after the subagent's
	// marker) joins the subagent, which ends at 5.5 s, not; the one at 6 s
	// does; its ids are not the first play's.
	p := reqs[len(reqs)-10:]
	if len(p[7].Deps) != 1 || len(p[8].Deps) != 2 || p[8].Deps[1].Relation != Join || p[5].Agent.Kind != KindSubagent ||
		p[0].appendIDs(nil)[0] == reqs[0].appendIDs(nil)[0] {
		t.Errorf("the last play lowered as %+v", p)
	}
}
