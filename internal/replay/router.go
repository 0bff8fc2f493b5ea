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
	busy       time.Duration
	ops        map[protocol.Op]*string // each op's name, as a response echoes it
}

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

func (r *router) send(c *protocol.Command) (*protocol.Response, error) {
	start := time.Now()
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
	resp := &protocol.Response{Seq: uint64(r.commands), Op: op}
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
	r.busy += time.Since(start)
	return resp, nil
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
