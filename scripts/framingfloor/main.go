// Command framingfloor is the framing floor of the end-to-end benchmark: it
// reads command lines exactly as offline-router does (same line reader,
// same decoder into the same typed commands, same flushing rule) and writes
// a small reply per line, without routing anything. offline-router's
// throughput over this one's is the share of time not spent on framing.
package main

import (
	"fmt"
	"os"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// nothing answers every command with an empty success.
type nothing struct{}

func (nothing) Apply(_ *protocol.Command, r *protocol.Response) { r.OK = true }
func (nothing) Status(*protocol.Response)                       {}

func main() {
	if _, err := wire.Serve(os.Stdin, os.Stdout, nothing{}, wire.ServeOptions{}); err != nil {
		fmt.Fprintln(os.Stderr, "framingfloor:", err)
		os.Exit(1)
	}
}
