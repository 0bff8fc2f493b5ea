package replay

import (
	"bufio"
	"io"
	"time"

	"github.com/offline-router/offline-router/internal/engine"
	"github.com/offline-router/offline-router/internal/wire"
)

// router is the engine behind the wire: each command is encoded as a host
// would write it and decoded as serve would read it, so that the emitted
// stream replays byte for byte.
type router struct {
	eng        *engine.Engine
	cmds, resp *bufio.Writer
	line, out  []byte
	d          wire.Decoded
	commands   int
	busy       time.Duration
}

func newRouter(eng *engine.Engine, cmds, resp io.Writer) *router {
	r := &router{eng: eng}
	if cmds != nil {
		r.cmds = bufio.NewWriterSize(cmds, 1<<16)
	}
	if resp != nil {
		r.resp = bufio.NewWriterSize(resp, 1<<16)
	}
	return r
}

func (r *router) send(c *wire.Command) *wire.Response {
	start := time.Now()
	r.line = wire.AppendCommand(r.line[:0], c)
	if r.cmds != nil {
		r.cmds.Write(r.line)
		r.cmds.WriteByte('\n')
	}
	r.commands++
	resp := &wire.Response{Seq: uint64(r.commands)}
	wire.Answer(r.line, &r.d, r.eng, resp)
	if r.resp != nil {
		r.out, _ = wire.Encode(r.out[:0], resp)
		r.resp.Write(r.out)
	}
	r.busy += time.Since(start)
	return resp
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
