package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/offline-router/offline-router/internal/protocol"
)

// echo is a Stepper that accepts every command and counts them.
type echo struct{ applied int }

func (e *echo) Apply(_ *protocol.Command, r *protocol.Response) { e.applied++; r.OK = true }
func (e *echo) Status(*protocol.Response)                       {}

func serveString(t *testing.T, input string, opt ServeOptions) ([]map[string]any, Stats, error) {
	t.Helper()
	var out bytes.Buffer
	st, err := Serve(strings.NewReader(input), &out, &echo{}, opt)
	var resps []map[string]any
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("response is not JSON: %s", sc.Bytes())
		}
		resps = append(resps, m)
	}
	return resps, st, err
}

func TestServeOneResponsePerCommandLine(t *testing.T) {
	in := "# comment\n\n   \n{\"op\":\"inspect\",\"id\":1}\r\n  # indented comment\n{\"op\":\"topology_settled\"}\n{\"op\":\"inspect\"}"
	resps, st, err := serveString(t, in, ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resps) != 3 || st.Commands != 3 {
		t.Fatalf("got %d responses for 3 commands", len(resps))
	}
	for i, r := range resps {
		if r["seq"] != float64(i+1) || r["ok"] != true {
			t.Fatalf("response %d: %v", i, r)
		}
	}
}

func TestServeAnswersPartialLastLine(t *testing.T) {
	resps, _, err := serveString(t, "{\"op\":\"inspect\"}\n{\"op\":\"place\",\"requ", ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resps) != 2 || resps[1]["ok"] != false {
		t.Fatalf("the truncated last line needs an error response, got %v", resps)
	}
}

func TestServeLineTooLongIsDiscardedAndServingGoesOn(t *testing.T) {
	huge := `{"op":"inspect","id":"` + strings.Repeat("x", 3<<20) + `"}`
	resps, _, err := serveString(t, huge+"\n"+`{"op":"inspect"}`+"\n"+huge, ServeOptions{MaxLineBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(resps) != 3 {
		t.Fatalf("got %d responses, want 3", len(resps))
	}
	for _, i := range []int{0, 2} {
		e, _ := resps[i]["error"].(map[string]any)
		if e["code"] != "line_too_long" || resps[i]["op"] != nil {
			t.Fatalf("response %d: %v", i, resps[i])
		}
	}
	if resps[1]["ok"] != true {
		t.Fatalf("the line after an oversize one must work: %v", resps[1])
	}
}

func TestServeLineExactlyAtTheLimitIsRead(t *testing.T) {
	line := `{"op":"inspect"}`
	resps, _, err := serveString(t, line+"\n"+line, ServeOptions{MaxLineBytes: len(line)})
	if err != nil || len(resps) != 2 || resps[0]["ok"] != true || resps[1]["ok"] != true {
		t.Fatalf("lines of exactly max bytes must be read: %v, %v", resps, err)
	}
	resps, _, err = serveString(t, line+" \n", ServeOptions{MaxLineBytes: len(line)})
	if err != nil || len(resps) != 1 || resps[0]["ok"] != false {
		t.Fatalf("a line one byte over must be refused: %v, %v", resps, err)
	}
}

func TestServeFailFastStopsAtFirstError(t *testing.T) {
	resps, st, err := serveString(t, "{\"op\":\"inspect\"}\nbad\n{\"op\":\"inspect\"}\n", ServeOptions{FailFast: true})
	if !errors.Is(err, ErrFailFast) || len(resps) != 2 || st.Errors != 1 {
		t.Fatalf("err=%v responses=%d stats=%+v", err, len(resps), st)
	}
}

// TestServeFlushesBeforeBlocking drives Serve the way a host does: write one
// line, wait for its answer, then write the next. Without the flush before
// blocking on input this deadlocks.
func TestServeFlushesBeforeBlocking(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := Serve(inR, outW, &echo{}, ServeOptions{})
		outW.Close()
		done <- err
	}()
	replies := bufio.NewReader(outR)
	for i := range 3 {
		if _, err := io.WriteString(inW, `{"op":"inspect"}`+"\n"); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 1)
		go func() { line, _ := replies.ReadString('\n'); got <- line }()
		select {
		case line := <-got:
			if !strings.Contains(line, `"ok":true`) {
				t.Fatalf("reply %d: %s", i, line)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no reply to command %d while the host waits: responses are not flushed", i)
		}
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestServeReportsClosedOutput: when the reader of stdout goes away, Serve
// stops with an error instead of running on.
func TestServeReportsClosedOutput(t *testing.T) {
	outR, outW := io.Pipe()
	outR.Close()
	_, err := Serve(strings.NewReader(`{"op":"inspect"}`+"\n"), outW, &echo{}, ServeOptions{})
	if err == nil || !strings.Contains(err.Error(), "writing responses") {
		t.Fatalf("got %v", err)
	}
}

// TestServeSkipsLongComments: a # line or a blank line over the limit is
// still a comment (a scenario records long responses on "#< " lines), even
// when its first non-blank byte comes past the limit, while a long line of
// anything else is line_too_long, even when it opens with blanks.
func TestServeSkipsLongComments(t *testing.T) {
	long, blanks := strings.Repeat("x", 200), strings.Repeat(" ", 150)
	in := "  #< " + long + "\n" + blanks + "# late comment\n" + blanks + "\t" + blanks + "\n" +
		`{"op":"inspect"}` + "\n" + long + "\n" + blanks + `{"op":"inspect"}` + "\n" + blanks
	resps, st, err := serveString(t, in, ServeOptions{MaxLineBytes: 100})
	if err != nil || st.Commands != 3 || len(resps) != 3 || resps[0]["ok"] != true {
		t.Fatalf("got %v, %+v, %v", resps, st, err)
	}
	for _, r := range resps[1:] {
		if e, _ := r["error"].(map[string]any); e["code"] != "line_too_long" {
			t.Fatalf("a long command line: %v", r)
		}
	}
}
