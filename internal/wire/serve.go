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

// Stopper lets another goroutine (a signal handler) stop Serve between
// commands, so that everything answered is flushed and no response is cut.
type Stopper struct {
	stop, idle atomic.Bool
}

// Stop asks Serve to stop after the command it is on. It reports whether
// Serve is blocked waiting for input, with every response flushed: then the
// caller may exit at once.
func (s *Stopper) Stop() (idle bool) {
	s.stop.Store(true)
	return s.idle.Load()
}

func (s *Stopper) stopped() bool { return s != nil && s.stop.Load() }

// setIdle records that Serve is about to block on input (all flushed) and
// reports whether it should stop instead.
func (s *Stopper) setIdle(idle bool) (stop bool) {
	if s == nil {
		return false
	}
	s.idle.Store(idle)
	return idle && s.stop.Load()
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
// per command to out. It flushes whenever it is about to block on input, so
// a host that writes one line and waits is always answered.
func Serve(in io.Reader, out io.Writer, eng Stepper, opt ServeOptions) (Stats, error) {
	if opt.MaxLineBytes <= 0 {
		opt.MaxLineBytes = DefaultMaxLineBytes
	}
	lr := newLineReader(in, opt.MaxLineBytes)
	w := bufio.NewWriterSize(out, 64<<10)
	var st Stats
	var d Decoded
	var buf []byte
	for {
		if opt.Stopper.stopped() {
			return st, errors.Join(ErrStopped, w.Flush())
		}
		if lr.r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return st, fmt.Errorf("writing responses: %w", err)
			}
			if opt.Stopper.setIdle(true) {
				return st, ErrStopped
			}
		}
		line, tooLong, err := lr.next()
		opt.Stopper.setIdle(false)
		if err == io.EOF && line == nil && !tooLong {
			return st, w.Flush()
		}
		if err != nil && err != io.EOF {
			return st, fmt.Errorf("reading commands: %w", err)
		}
		if (!tooLong && IsComment(line)) || (tooLong && lr.comment) {
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
					eng, resp.OK, resp.Config = next, true, cfg
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

// isHashComment reports whether a line opens, after blanks, with '#': a
// comment however long (a scenario records long responses on "#< " lines).
func isHashComment(line []byte) bool {
	t := bytes.TrimLeft(line, " \t\r\n")
	return len(t) > 0 && t[0] == '#'
}

// Answered reports whether Serve answers line under a limit of
// maxLineBytes: a command, or a line too long that is not a # comment.
func Answered(line []byte, maxLineBytes int) bool {
	return !IsComment(line) || (len(line) > maxLineBytes && !isHashComment(line))
}

// lineReader yields lines without their newline, never holding more than
// max bytes of one line: the rest of a longer line is read and dropped.
type lineReader struct {
	r         *bufio.Reader
	max       int
	line      []byte
	discarded int
	comment   bool // the line too long opened with '#'
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
				l.comment = isHashComment(append(l.line, chunk...))
				l.line = l.line[:0]
			} else {
				l.line = append(l.line, chunk...)
			}
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
