//go:build unix

package wire

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// wakeup is a self-pipe beside the input: wait polls both, so Stop can end
// a wait for input that may never come.
type wakeup struct {
	in     int // the input's descriptor
	r, w   *os.File
	polled bool
}

// NewStopper returns a Stopper for Serve reading from in. Where in has no
// descriptor to poll, Stop takes effect at the next read instead.
func NewStopper(in *os.File) (*Stopper, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &Stopper{wake: wakeup{in: int(in.Fd()), r: r, w: w, polled: true}}, nil
}

func (k *wakeup) signal() {
	if k.polled {
		k.w.Write([]byte{0}) // one byte is enough; a full pipe already wakes
	}
}

// wait blocks until the input is readable (or at its end) or signal was
// called, and reports the latter.
func (k *wakeup) wait() (stopped bool) {
	if !k.polled {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(k.in), Events: unix.POLLIN}, {Fd: int32(k.r.Fd()), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false // the read will report what is wrong with the input
		}
		return fds[1].Revents != 0
	}
}
