package main

import (
	"bufio"
	"bytes"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccy/go-json"
)

// started runs the binary with pipes on stdin and stdout.
func started(t *testing.T, args ...string) (*exec.Cmd, io.WriteCloser, io.ReadCloser, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin, stdout, &stderr
}

// waitExit waits for the process, failing the test if it takes too long.
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the process did not end")
		return -1
	}
}

func TestClosedStdoutEndsTheProcess(t *testing.T) {
	cmd, stdin, stdout, stderr := started(t)
	stdout.Close() // the reader goes away
	go func() {
		for range 100000 {
			if _, err := io.WriteString(stdin, `{"op":"inspect"}`+"\n"); err != nil {
				return
			}
		}
		stdin.Close()
	}()
	if code := waitExit(t, cmd); code != 1 || !strings.Contains(stderr.String(), "broken pipe") {
		t.Fatalf("exit %d, stderr %q: want status 1 and a message", code, stderr.String())
	}
}

func TestSigtermWhileIdleExits(t *testing.T) {
	cmd, stdin, stdout, stderr := started(t)
	r := bufio.NewReader(stdout)
	for range 3 {
		io.WriteString(stdin, `{"op":"inspect"}`+"\n")
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, cmd); code != 128+int(syscall.SIGTERM) || !strings.Contains(stderr.String(), "terminated") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestSigintMidBatchFlushesWholeResponses: interrupted while a large batch
// is buffered, the router stops between commands: every response written is
// whole, and they are numbered 1..n without a gap.
func TestSigintMidBatchFlushesWholeResponses(t *testing.T) {
	cmd, stdin, stdout, stderr := started(t)
	go func() {
		w := bufio.NewWriterSize(stdin, 1<<20)
		w.WriteString(`{"op":"worker_ready","worker_id":1}` + "\n")
		for i := range 400000 {
			w.WriteString(`{"op":"place","request_id":"r` + strconv.Itoa(i) + `","input_tokens":64}` + "\n")
		}
		w.Flush() // stdin stays open: the router must not wait for EOF
	}()
	r := bufio.NewReader(stdout)
	first, err := r.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGINT)
	rest, _ := io.ReadAll(r)
	code := waitExit(t, cmd)
	if code != 128+int(syscall.SIGINT) {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	lines := bytes.Split(bytes.TrimSuffix(append(first, rest...), []byte("\n")), []byte("\n"))
	for i, l := range lines {
		var resp struct{ Seq int }
		if err := json.Unmarshal(l, &resp); err != nil || resp.Seq != i+1 {
			t.Fatalf("line %d is cut or out of order: %.80s (%v)", i+1, l, err)
		}
	}
	if len(lines) >= 400001 {
		t.Fatal("the signal arrived after everything was answered; the test proves nothing")
	}
}

func TestStdinClosedMidLineAnswersThePartialLine(t *testing.T) {
	stdout, _, code := run(t, `{"op":"inspect"}`+"\n"+`{"op":"place","request_id":"x","input_tok`)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) != 2 || !strings.Contains(lines[1], `"code":"parse_error"`) {
		t.Fatalf("exit %d:\n%s", code, stdout)
	}
}

// TestAnsweredWithPartOfTheNextLineSent: a host that writes one command
// and the start of the next in one write, then waits, gets the first
// answer; a SIGTERM then stops the router at once (the partial line is no
// command).
func TestAnsweredWithPartOfTheNextLineSent(t *testing.T) {
	cmd, stdin, stdout, stderr := started(t)
	io.WriteString(stdin, `{"op":"advance_clock","now_ms":1}`+"\n"+`{"op":"adv`)
	got := make(chan string, 1)
	go func() { line, _ := bufio.NewReader(stdout).ReadString('\n'); got <- line }()
	select {
	case line := <-got:
		if !strings.HasPrefix(line, `{"seq":1,"op":"advance_clock","ok":true`) {
			t.Fatalf("first answer: %s", line)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("no answer while part of the next line waits in the input")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, cmd); code != 128+int(syscall.SIGTERM) || !strings.Contains(stderr.String(), "stopped after 1 commands, all answered") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestSigtermNeverLosesALineRead: a signal sent right after a command is
// written may land before, during or after the router reads it; whichever,
// the commands it says it answered are exactly the responses it wrote.
func TestSigtermNeverLosesALineRead(t *testing.T) {
	trials := 150
	if testing.Short() {
		trials = 20
	}
	answered := 0
	for range trials {
		cmd, stdin, stdout, stderr := started(t)
		r := bufio.NewReader(stdout)
		io.WriteString(stdin, `{"op":"inspect"}`+"\n") // the router is up once this is answered
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		io.WriteString(stdin, `{"op":"inspect"}`+"\n"+`{"op":"advance_clock","now_ms":2}`+"\n")
		cmd.Process.Signal(syscall.SIGTERM)
		rest, _ := io.ReadAll(r)
		code := waitExit(t, cmd)
		lines := 1 + strings.Count(string(rest), "\n")
		answered += lines - 1
		if code != 128+int(syscall.SIGTERM) || !strings.Contains(stderr.String(), "stopped after "+strconv.Itoa(lines)+" commands, all answered") {
			t.Fatalf("exit %d, %d responses, stderr %q", code, lines, stderr.String())
		}
	}
	t.Logf("%d of %d commands sent with the signal were answered before it stopped the router", answered, 2*trials)
}
