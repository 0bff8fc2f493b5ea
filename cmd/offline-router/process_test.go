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
