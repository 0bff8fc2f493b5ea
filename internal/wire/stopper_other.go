//go:build !unix

package wire

import "os"

// wakeup cannot poll the input here: Stop takes effect at the next read.
type wakeup struct{}

// NewStopper returns a Stopper for Serve reading from in.
func NewStopper(*os.File) (*Stopper, error) { return &Stopper{}, nil }

func (wakeup) signal()    {}
func (wakeup) wait() bool { return false }
