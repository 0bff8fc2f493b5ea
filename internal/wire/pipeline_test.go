package wire_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offline-router/offline-router/internal/engine"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
	"github.com/offline-router/offline-router/internal/workload"
)

// sequential answers a stream one line at a time, decode, apply, encode:
// what Serve did before it became a pipeline, and must still give.
func sequential(t *testing.T, input []byte, maxLine int) []byte {
	eng, err := engine.New(protocol.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var out, buf []byte
	var d wire.Decoded
	seq := uint64(0)
	for _, line := range bytes.SplitAfter(input, []byte("\n")) {
		body := bytes.TrimSuffix(line, []byte("\n"))
		if len(line) == 0 || wire.IsComment(body) {
			continue
		}
		seq++
		resp := protocol.Response{Seq: seq}
		if len(body) > maxLine {
			resp.Error = protocol.Errorf(protocol.CodeLineTooLong, "line is %d bytes, over --max-line-bytes %d; it was discarded", len(body), maxLine)
			eng.Status(&resp)
		} else {
			wire.Decode(body, &d)
			resp.Op, resp.ID = d.Op, d.ID
			if d.Err != nil {
				resp.Error = d.Err
				eng.Status(&resp)
			} else {
				eng.Apply(&d.Cmd, &resp)
			}
		}
		if buf, err = wire.Encode(buf[:0], &resp); err != nil {
			t.Fatal(err)
		}
		out = append(out, buf...)
	}
	return out
}

// TestServeMatchesSequential: the pipeline answers a long mixed stream,
// with bad lines, comments and lines over the limit among its commands,
// byte for byte as one line at a time does, whether the input comes in one
// piece or a few bytes per read.
func TestServeMatchesSequential(t *testing.T) {
	var stream bytes.Buffer
	if err := workload.DefaultMixed(20000, 3).Write(&stream); err != nil {
		t.Fatal(err)
	}
	var input bytes.Buffer
	for i, line := range strings.SplitAfter(stream.String(), "\n") {
		input.WriteString(line)
		switch i % 97 {
		case 13:
			input.WriteString(`{"op":"place","request_id":7}` + "\n")
		case 29:
			input.WriteString("# a comment\n\n")
		case 41:
			input.WriteString(`{"op":"inspect","id":"` + strings.Repeat("x", 9000) + `"}` + "\n")
		case 53:
			input.WriteString("not json\n")
		}
	}
	const maxLine = 8192
	want := sequential(t, input.Bytes(), maxLine)
	for _, r := range []struct {
		name string
		in   io.Reader
	}{
		{"whole", bytes.NewReader(input.Bytes())},
		{"7 bytes a read", &trickle{b: input.Bytes(), n: 7}},
	} {
		eng, _ := engine.New(protocol.DefaultConfig())
		var out bytes.Buffer
		st, err := wire.Serve(r.in, &out, eng, wire.ServeOptions{MaxLineBytes: maxLine})
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Bytes(); !bytes.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Fatalf("%s: the pipeline's output differs at byte %d of %d (%d commands)", r.name, i, len(want), st.Commands)
		}
	}
}

// trickle reads n bytes at a time.
type trickle struct {
	b []byte
	n int
}

func (r *trickle) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[k:]
	return k, nil
}

// endless is input that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	line := `{"op":"inspect"}` + "\n"
	n := 0
	for n+len(line) <= len(p) {
		n += copy(p[n:], line)
	}
	return n, nil
}

type brokenPipe struct{ after int }

func (w *brokenPipe) Write(p []byte) (int, error) {
	if w.after -= len(p); w.after < 0 {
		return 0, errors.New("broken pipe")
	}
	return len(p), nil
}

// TestServeStopsWhenOutputFails: once responses cannot be written, Serve
// stops reading and applying, even from input that never ends.
func TestServeStopsWhenOutputFails(t *testing.T) {
	done := make(chan error, 1)
	go func() {
		eng, _ := engine.New(protocol.DefaultConfig())
		_, err := wire.Serve(endless{}, &brokenPipe{after: 1 << 20}, eng, wire.ServeOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "writing responses: broken pipe") {
			t.Fatalf("got %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve runs on after its output failed")
	}
}

// TestServeAnswersEachLineOfAnInteractiveHost: a host that writes a line
// and part of the next, then waits, gets the first answered.
func TestServeAnswersEachLineOfAnInteractiveHost(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	eng, _ := engine.New(protocol.DefaultConfig())
	go wire.Serve(inR, outW, eng, wire.ServeOptions{})
	replies := bufio.NewReader(outR)
	for i := range 50 {
		fmt.Fprintf(inW, `{"op":"worker_ready","worker_id":%d}`+"\n"+`{"op":"worker`, i+1)
		got := make(chan string, 1)
		go func() { line, _ := replies.ReadString('\n'); got <- line }()
		select {
		case line := <-got:
			if !strings.Contains(line, fmt.Sprintf(`"seq":%d,`, 2*i+1)) {
				t.Fatalf("reply %d: %s", i, line)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no reply to line %d while the host waits with half a line sent", i)
		}
		io.WriteString(inW, `_draining","worker_id":99999}`+"\n") // an error, answered with the next
		if line, _ := replies.ReadString('\n'); !strings.Contains(line, "unknown_worker") {
			t.Fatalf("reply to the completed line: %s", line)
		}
	}
	inW.Close()
}

// TestServeAnswersBeforeATrailingComment: a host that ends what it writes
// with a blank or comment line, and waits, is answered.
func TestServeAnswersBeforeATrailingComment(t *testing.T) {
	for _, tail := range []string{"\n", "# done\n", "   \n", "\r\n", "#" + strings.Repeat("x", 100) + "\n"} {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		eng, _ := engine.New(protocol.DefaultConfig())
		go wire.Serve(inR, outW, eng, wire.ServeOptions{MaxLineBytes: 50})
		// Not an inspect, which ends its batch by itself: the trailing line
		// must hand the batch on.
		go io.WriteString(inW, `{"op":"worker_ready","worker_id":1}`+"\n"+tail)
		got := make(chan string, 1)
		go func() { line, _ := bufio.NewReader(outR).ReadString('\n'); got <- line }()
		select {
		case line := <-got:
			if !strings.Contains(line, `"seq":1,`) {
				t.Fatalf("reply: %s", line)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no reply while the host waits after a %q line", tail)
		}
		inW.Close()
	}
}

// bigAnswers answers every command with a response of 100 kB, past the
// writer's buffer, and counts the commands applied.
type bigAnswers struct{ applied atomic.Int64 }

func (c *bigAnswers) Apply(_ *protocol.Command, r *protocol.Response) {
	c.applied.Add(1)
	r.Error = protocol.Errorf(protocol.CodeInvalidField, "%s", strings.Repeat("x", 100_000))
}
func (c *bigAnswers) Status(*protocol.Response) {}

// stuckWriter blocks every write, as a host that stopped reading, until
// released.
type stuckWriter struct{ release chan struct{} }

func (w *stuckWriter) Write(p []byte) (int, error) {
	<-w.release
	return len(p), nil
}

// TestServeBoundsInspectsInFlight: the responses waiting to be written are
// bounded, and an inspect, whose response grows with the router's whole
// state, ends its batch, so that few are ever held (64 lines to a batch
// would hold a few hundred).
func TestServeBoundsInspectsInFlight(t *testing.T) {
	eng := &bigAnswers{}
	w := &stuckWriter{release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		wire.Serve(strings.NewReader(strings.Repeat(`{"op":"inspect"}`+"\n", 1000)), w, eng, wire.ServeOptions{})
		close(done)
	}()
	time.Sleep(300 * time.Millisecond) // time for the stages to fill up
	if n := eng.applied.Load(); n > 8 {
		t.Errorf("%d inspects answered while the output is stuck: their responses are all held", n)
	}
	close(w.release)
	<-done
}
