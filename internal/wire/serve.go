package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Stepper is what Serve drives: an engine that applies commands and reports
// the fields every response carries.
type Stepper interface {
	Apply(c *protocol.Command, resp *protocol.Response)
	Status(resp *protocol.Response)
}

// ServeOptions are the framing options of §1.
type ServeOptions struct {
	MaxLineBytes int      // longer lines get line_too_long and are discarded
	FailFast     bool     // stop at the first error response
	Stopper      *Stopper // if set, lets a signal handler stop Serve
	// Configure, if set, takes a config command that opens the stream and
	// returns the stepper to serve the rest with and the config it runs on
	// (ConfigSource.Merge makes that config). Without it, or after the
	// first command, the stepper is handed the config command and refuses it.
	Configure func(*protocol.ConfigUpdate) (Stepper, *protocol.Config, *protocol.Error)
}

// Stopper lets another goroutine (a signal handler) stop Serve. Serve reads
// input only after asking the Stopper, which waits until the input is
// readable or Stop was called (stopper_unix.go): so a stop never lands
// between a read and the commands it brought, every complete line already
// read is answered before Serve stops, and a Serve blocked on input, a
// partial line included, stops at once.
type Stopper struct {
	stop atomic.Bool
	wake wakeup // lets Stop end a wait; absent where input cannot be polled
}

// Stop asks Serve to stop before it next reads input.
func (s *Stopper) Stop() {
	s.stop.Store(true)
	s.wake.signal()
}

// beforeRead reports whether Serve should stop rather than read; otherwise
// it returns once the input can be read.
func (s *Stopper) beforeRead() (stop bool) {
	if s == nil {
		return false
	}
	return s.stop.Load() || s.wake.wait() || s.stop.Load()
}

// flushingReader is Serve's input: before each read from the OS, which may
// block, it writes out every response so far, so a host that writes and
// waits is always answered (even with part of its next line sent), and it
// asks the Stopper.
type flushingReader struct {
	in       io.Reader
	out      *bufio.Writer
	stopper  *Stopper
	writeErr error
}

func (f *flushingReader) Read(p []byte) (int, error) {
	if err := f.out.Flush(); err != nil {
		f.writeErr = err
		return 0, err
	}
	if f.stopper.beforeRead() {
		return 0, ErrStopped
	}
	return f.in.Read(p)
}

// DefaultMaxLineBytes is the default --max-line-bytes: 64 MiB.
const DefaultMaxLineBytes = 64 << 20

// ErrFailFast is returned by Serve when FailFast stopped it.
var ErrFailFast = errors.New("stopped at the first error response (--fail-fast)")

// ErrStopped is returned by Serve when its Stopper stopped it.
var ErrStopped = errors.New("stopped by a signal")

// Stats counts what Serve did.
type Stats struct {
	Commands int
	Errors   int
}

// Serve reads command lines from in until EOF and writes one response line
// per command to out. It flushes whenever it goes to the OS for more input,
// so a host that writes one line and waits is always answered.
func Serve(in io.Reader, out io.Writer, eng Stepper, opt ServeOptions) (Stats, error) {
	if opt.MaxLineBytes <= 0 {
		opt.MaxLineBytes = DefaultMaxLineBytes
	}
	w := bufio.NewWriterSize(out, 64<<10)
	input := &flushingReader{in: in, out: w, stopper: opt.Stopper}
	lr := newLineReader(input, opt.MaxLineBytes)
	var st Stats
	var d Decoded
	var buf []byte
	for {
		line, tooLong, err := lr.next()
		switch {
		case errors.Is(err, ErrStopped):
			return st, errors.Join(ErrStopped, w.Flush())
		case input.writeErr != nil:
			return st, fmt.Errorf("writing responses: %w", input.writeErr)
		case err == io.EOF && line == nil && !tooLong:
			return st, w.Flush()
		case err != nil && err != io.EOF:
			return st, fmt.Errorf("reading commands: %w", err)
		}
		if (!tooLong && IsComment(line)) || (tooLong && lr.lead.comment()) {
			continue
		}
		st.Commands++
		resp := protocol.Response{Seq: uint64(st.Commands)}
		if tooLong {
			resp.Error = protocol.Errorf(protocol.CodeLineTooLong, "line is %d bytes, over --max-line-bytes %d; it was discarded", lr.discarded, opt.MaxLineBytes)
			eng.Status(&resp)
		} else {
			Decode(line, &d)
			resp.Op, resp.ID = d.Op, d.ID
			switch {
			case d.Err != nil:
				resp.Error = d.Err
				eng.Status(&resp)
			case d.Cmd.Op == protocol.OpConfig && st.Commands == 1 && opt.Configure != nil:
				// The stream's first command sets the config: serving goes
				// on with an engine built on it. Later, the engine refuses.
				next, cfg, err := opt.Configure(d.Cmd.Config)
				if err != nil {
					resp.Error = err
				} else {
					eng = next
					resp.Configured(cfg)
				}
				eng.Status(&resp)
			default:
				eng.Apply(&d.Cmd, &resp)
			}
		}
		if buf, err = Encode(buf[:0], &resp); err != nil {
			// Every response before it is whole: write them out.
			return st, errors.Join(fmt.Errorf("encoding response %d: %w", resp.Seq, err), w.Flush())
		}
		if _, err := w.Write(buf); err != nil {
			return st, fmt.Errorf("writing responses: %w", err)
		}
		if !resp.OK {
			st.Errors++
			if opt.FailFast {
				if err := w.Flush(); err != nil {
					return st, fmt.Errorf("writing responses: %w", err)
				}
				return st, ErrFailFast
			}
		}
	}
}

// IsComment reports whether a line is blank or a # comment: no response.
func IsComment(line []byte) bool {
	t := bytes.TrimLeft(line, " \t\r\n")
	return len(t) == 0 || t[0] == '#'
}

// leadByte is the first byte of a line that is not a blank, 0 while none
// has come: enough to tell a comment of any length from a command, so a
// line over the limit need not be held to be told.
type leadByte byte

func (b *leadByte) see(chunk []byte) {
	if *b == 0 {
		if t := bytes.TrimLeft(chunk, " \t\r\n"); len(t) > 0 {
			*b = leadByte(t[0])
		}
	}
}

// comment: a line that is blank or opens with '#' is a comment whatever its
// length (a scenario records long responses on "#< " lines).
func (b leadByte) comment() bool { return b == 0 || b == '#' }

// lineReader yields lines without their newline, never holding more than
// max bytes of one line: the rest of a longer line is read and dropped.
type lineReader struct {
	r         *bufio.Reader
	max       int
	line      []byte
	discarded int
	lead      leadByte // of the line too long
}

func newLineReader(in io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(in, 64<<10), max: max}
}

// next returns the next line; at EOF after a final line without a newline,
// that line is returned with io.EOF.
func (l *lineReader) next() (line []byte, tooLong bool, err error) {
	l.line = l.line[:0]
	total := 0
	for {
		chunk, err := l.r.ReadSlice('\n')
		total += len(chunk)
		if !tooLong {
			if total > l.max+1 || (total == l.max+1 && (len(chunk) == 0 || chunk[len(chunk)-1] != '\n')) {
				tooLong = true
				l.lead = 0
				l.lead.see(l.line)
				l.line = l.line[:0]
			} else {
				l.line = append(l.line, chunk...)
			}
		}
		if tooLong {
			l.lead.see(chunk)
		}
		switch err {
		case bufio.ErrBufferFull:
			continue
		case nil:
			if tooLong {
				l.discarded = total - 1
				return nil, true, nil
			}
			return l.line[:len(l.line)-1], false, nil
		case io.EOF:
			if tooLong {
				l.discarded = total
				return nil, true, io.EOF
			}
			if total == 0 {
				return nil, false, io.EOF
			}
			return l.line, false, io.EOF
		default:
			return nil, false, err
		}
	}
}
