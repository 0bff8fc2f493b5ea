package replay

import (
	"bufio"
	"fmt"
	"io"
	"time"

	"github.com/offline-router/offline-router/internal/engine"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// router is the engine as the replay host talks to it: commands go in as
// values, with no JSON in between. Only when the stream is asked for
// (--emit-commands, or the responses) is each command or response encoded,
// exactly as a host would write it and serve would answer it, so that the
// emitted stream replays byte for byte.
type router struct {
	eng        *engine.Engine
	cmds, resp *bufio.Writer
	line, out  []byte
	commands   int
	// timed and timedN are the time in the router of the commands timed
	// (timedEvery), and how many they were.
	timed  time.Duration
	timedN int
	ops    map[protocol.Op]*string // each op's name, as a response echoes it
	// spare are responses given back (release), for the next commands: a
	// replay sends millions, and a response each was garbage to collect.
	spare []*protocol.Response
}

// timedEvery: one command in so many is timed, and its time counted that
// many times over. Two clock reads a command were a few per cent of a
// replay at 512-token blocks; a sample of 1 in 64 over the hundreds of
// thousands of commands of a run estimates the router's time (router_ms,
// router_commands_per_s) to well under a per cent.
const timedEvery = 64

func newRouter(eng *engine.Engine, cmds, resp io.Writer) *router {
	r := &router{eng: eng, ops: map[protocol.Op]*string{}}
	if cmds != nil {
		r.cmds = bufio.NewWriterSize(cmds, 1<<16)
	}
	if resp != nil {
		r.resp = bufio.NewWriterSize(resp, 1<<16)
	}
	return r
}

// send applies c and returns the response, which the caller gives back
// with release once it has acted on it (a command sent meanwhile, to this
// router or another, gets a response of its own).
func (r *router) send(c *protocol.Command) (*protocol.Response, error) {
	var start time.Time
	timed := r.commands%timedEvery == 0
	if timed {
		start = time.Now()
		r.timedN++
	}
	if r.cmds != nil {
		r.line = append(wire.AppendCommand(r.line[:0], c), '\n')
		if _, err := r.cmds.Write(r.line); err != nil {
			return nil, fmt.Errorf("writing commands: %w", err)
		}
	}
	r.commands++
	op, ok := r.ops[c.Op]
	if !ok {
		name := string(c.Op)
		op, r.ops[c.Op] = &name, &name
	}
	resp := r.response()
	*resp = protocol.Response{Seq: uint64(r.commands), Op: op}
	if c.Op == protocol.OpConfig {
		// The engine was built on this config: answer as serve does when a
		// stream opens with it.
		resp.Configured(&c.Config.Config)
		r.eng.Status(resp)
	} else {
		r.eng.Apply(c, resp)
	}
	if r.resp != nil {
		var err error
		if r.out, err = wire.Encode(r.out[:0], resp); err != nil {
			return nil, fmt.Errorf("encoding response %d: %w", resp.Seq, err)
		}
		if _, err := r.resp.Write(r.out); err != nil {
			return nil, fmt.Errorf("writing responses: %w", err)
		}
	}
	if timed {
		r.timed += time.Since(start)
	}
	return resp, nil
}

// busy estimates the router's time over every command sent, from the
// commands timed.
func (r *router) busy() time.Duration {
	if r.timedN == 0 {
		return 0
	}
	return time.Duration(float64(r.timed) * float64(r.commands) / float64(r.timedN)) // float: ns times commands passes int64
}

func (r *router) response() *protocol.Response {
	if n := len(r.spare); n > 0 {
		resp := r.spare[n-1]
		r.spare = r.spare[:n-1]
		return resp
	}
	return new(protocol.Response)
}

// release gives back a response send returned; the caller keeps nothing of
// it (its slices stay valid: the next response gets its own).
func (r *router) release(resp *protocol.Response) {
	if resp != nil {
		r.spare = append(r.spare, resp)
	}
}

func (r *router) flush() error {
	for _, w := range []*bufio.Writer{r.cmds, r.resp} {
		if w != nil {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// booked is how many requests the router still books, asked of the engine
// directly: nothing is written or counted.
func (r *router) booked() int {
	var resp protocol.Response
	r.eng.Apply(&protocol.Command{Op: protocol.OpInspect}, &resp)
	if resp.State == nil {
		return 0
	}
	return len(resp.State.Requests)
}
