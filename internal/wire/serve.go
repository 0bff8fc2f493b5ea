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

// stoppableReader is Serve's input: before each read from the OS, which may
// block, it asks the Stopper.
type stoppableReader struct {
	in      io.Reader
	stopper *Stopper
}

func (f *stoppableReader) Read(p []byte) (int, error) {
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

// Stats counts what Serve answered: the responses it wrote.
type Stats struct {
	Commands int
	Errors   int
}

// Serve reads command lines from in until EOF and writes one response line
// per command to out, in order.
//
// It runs as a pipeline of three goroutines: one reads and decodes lines,
// the caller's applies them to the stepper strictly one after another, one
// encodes and writes the responses. They hand over batches of lines, a few
// at a time (batchesInFlight), so memory stays bounded and a slow host
// slows the reader. A batch is handed on as soon as the next line is not
// yet in the input buffer, and the writer flushes whenever it has no batch
// waiting: a host that writes one line and waits is always answered.
func Serve(in io.Reader, out io.Writer, eng Stepper, opt ServeOptions) (Stats, error) {
	if opt.MaxLineBytes <= 0 {
		opt.MaxLineBytes = DefaultMaxLineBytes
	}
	p := &pipeline{
		free:    make(chan *batch, batchesInFlight),
		decoded: make(chan *batch, batchesInFlight),
		applied: make(chan *batch, batchesInFlight),
		quit:    make(chan struct{}),
		failed:  make(chan struct{}),
		wrote:   make(chan error, 1),
	}
	for range batchesInFlight {
		p.free <- &batch{}
	}
	lr := newLineReader(&stoppableReader{in: in, stopper: opt.Stopper}, opt.MaxLineBytes)
	go p.read(lr)
	go p.write(bufio.NewWriterSize(out, 64<<10))
	err := p.apply(eng, opt)
	close(p.applied)
	close(p.quit) // the reader stops at its next hand-over, if still going
	if werr := <-p.wrote; werr != nil {
		err = werr // the first thing that went wrong: what came after went unanswered
	}
	return p.written, err
}

// batchesInFlight bounds the batches between the stages; maxBatchLines
// and maxBatchBytes bound a batch, so that the stages overlap on a long
// input that is all buffered, and so do the responses waiting to be
// written (an inspect, whose response grows with the router's whole state,
// ends its batch).
const (
	batchesInFlight = 4
	maxBatchLines   = 64
	maxBatchBytes   = 256 << 10
)

// batch is lines going down the pipeline: each decoded (or too long), then
// answered. Its ids holds the ids of the lines (a Decoded's ID points into
// the line, which the reader's buffer reuses).
type batch struct {
	items []item
	ids   []byte
	bytes int
	end   error // after the last item: io.EOF, ErrStopped or a read error
}

type item struct {
	d         Decoded
	tooLong   bool
	discarded int
	resp      protocol.Response
}

func (b *batch) reset() {
	clear(b.items) // what the responses held goes with them
	b.items, b.ids, b.bytes, b.end = b.items[:0], b.ids[:0], 0, nil
}

// add takes a slot for the next line.
func (b *batch) add() *item {
	if len(b.items) < cap(b.items) {
		b.items = b.items[:len(b.items)+1]
	} else {
		b.items = append(b.items, item{})
	}
	return &b.items[len(b.items)-1]
}

type pipeline struct {
	free, decoded, applied chan *batch
	quit                   chan struct{} // closed when the apply stage is done
	failed                 chan struct{} // closed when the writer gave up
	wrote                  chan error    // the writer's outcome
	written                Stats         // the writer's, read once it is done
}

// read decodes lines into batches and hands each on when it is full or
// the next line would have to come from the OS.
func (p *pipeline) read(lr *lineReader) {
	var b *batch
	take := func() bool {
		select {
		case b = <-p.free:
			return true
		case <-p.quit:
			return false
		}
	}
	send := func() bool {
		select {
		case p.decoded <- b:
			b = nil
			return true
		case <-p.quit:
			return false
		}
	}
	defer close(p.decoded)
	if !take() {
		return
	}
	for {
		line, tooLong, err := lr.next()
		switch {
		case errors.Is(err, ErrStopped) || (err != nil && err != io.EOF):
			b.end = err
			send()
			return
		case err == io.EOF && line == nil && !tooLong:
			b.end = io.EOF
			send()
			return
		}
		if (!tooLong && IsComment(line)) || (tooLong && lr.lead.comment()) {
			if err == io.EOF {
				b.end = io.EOF
				send()
				return
			}
			// A host may end what it writes with a comment or a blank line
			// and wait: what it sent before must be answered.
			if len(b.items) > 0 && !lr.lineBuffered() {
				if !send() || !take() {
					return
				}
			}
			continue
		}
		it := b.add()
		if it.tooLong = tooLong; tooLong {
			it.discarded = lr.discarded
		} else {
			Decode(line, &it.d)
			if it.d.ID != nil {
				start := len(b.ids)
				b.ids = append(b.ids, it.d.ID...)
				it.d.ID = b.ids[start:len(b.ids):len(b.ids)]
			}
			b.bytes += len(line)
		}
		if err == io.EOF {
			b.end = io.EOF
			send()
			return
		}
		big := !tooLong && it.d.Err == nil && it.d.Cmd.Op == protocol.OpInspect
		if big || len(b.items) >= maxBatchLines || b.bytes >= maxBatchBytes || !lr.lineBuffered() {
			if !send() || !take() {
				return
			}
		}
	}
}

// apply answers each command in order, on the caller's goroutine.
func (p *pipeline) apply(eng Stepper, opt ServeOptions) error {
	seq := 0
	for {
		var b *batch
		select {
		case b = <-p.decoded:
		case <-p.failed: // nothing more can be written: stop applying
			return nil
		}
		if b == nil { // the reader is done
			return nil
		}
		for i := range b.items {
			it := &b.items[i]
			seq++
			resp := &it.resp
			*resp = protocol.Response{Seq: uint64(seq)}
			switch d := &it.d; {
			case it.tooLong:
				resp.Error = protocol.Errorf(protocol.CodeLineTooLong, "line is %d bytes, over --max-line-bytes %d; it was discarded", it.discarded, opt.MaxLineBytes)
				eng.Status(resp)
			case d.Err != nil:
				resp.Op, resp.ID, resp.Error = d.Op, d.ID, d.Err
				eng.Status(resp)
			case d.Cmd.Op == protocol.OpConfig && seq == 1 && opt.Configure != nil:
				// The stream's first command sets the config: serving goes
				// on with an engine built on it. Later, the engine refuses.
				resp.Op, resp.ID = d.Op, d.ID
				next, cfg, err := opt.Configure(d.Cmd.Config)
				if err != nil {
					resp.Error = err
				} else {
					eng = next
					resp.Configured(cfg)
				}
				eng.Status(resp)
			default:
				resp.Op, resp.ID = d.Op, d.ID
				eng.Apply(&d.Cmd, resp)
			}
			if !resp.OK && opt.FailFast {
				b.items = b.items[:i+1]
				select {
				case <-p.failed:
				default:
					p.applied <- b
				}
				return ErrFailFast
			}
		}
		end := b.end
		select {
		case <-p.failed: // nothing more can be written: stop applying
			return nil
		default:
			p.applied <- b
		}
		switch {
		case errors.Is(end, ErrStopped):
			return ErrStopped
		case end != nil && end != io.EOF:
			return fmt.Errorf("reading commands: %w", end)
		}
	}
}

// write encodes and writes the responses, flushing when no batch waits.
// After a failure it reports it and takes no more.
func (p *pipeline) write(w *bufio.Writer) {
	fail := func(err error) {
		close(p.failed)
		for b := range p.applied { // take what the apply stage hands over still
			b.reset()
			p.free <- b
		}
		p.wrote <- err
	}
	var buf []byte // one response at a time, as the sequential loop did
	for b := range p.applied {
		for i := range b.items {
			it := &b.items[i]
			var err error
			if buf, err = Encode(buf[:0], &it.resp); err != nil {
				// Every response before it is whole: write them out.
				fail(errors.Join(fmt.Errorf("encoding response %d: %w", it.resp.Seq, err), w.Flush()))
				return
			}
			if _, err := w.Write(buf); err != nil {
				fail(fmt.Errorf("writing responses: %w", err))
				return
			}
			p.written.Commands++
			if !it.resp.OK {
				p.written.Errors++
			}
		}
		b.reset()
		p.free <- b
		if len(p.applied) == 0 {
			if err := w.Flush(); err != nil {
				fail(fmt.Errorf("writing responses: %w", err))
				return
			}
		}
	}
	if err := w.Flush(); err != nil {
		p.wrote <- fmt.Errorf("writing responses: %w", err)
		return
	}
	p.wrote <- nil
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

// lineBuffered reports whether a whole next line is already in the buffer,
// so that reading it will not wait on the input.
func (l *lineReader) lineBuffered() bool {
	buf, _ := l.r.Peek(l.r.Buffered())
	return bytes.IndexByte(buf, '\n') >= 0
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
