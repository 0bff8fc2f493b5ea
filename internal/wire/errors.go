// Package wire is the JSON Lines codec of offline-router and its serve
// loop: the strict scanner and decoder that turn a line into a
// protocol.Command, the encoders of commands and responses, the config
// loader, and Serve, which frames lines and steps an engine with them. It
// knows nothing of the engine behind the Stepper.
package wire

import (
	"fmt"

	"github.com/offline-router/offline-router/internal/protocol"
)

// fieldError is a decoding error about one field; its path grows as the
// error travels out of nested objects, so the message names the full field.
type fieldError struct {
	code protocol.Code
	path string
	msg  string
}

func (e *fieldError) within(prefix string) *fieldError {
	if e.path == "" {
		e.path = prefix
	} else if e.path[0] == '[' {
		e.path = prefix + e.path
	} else {
		e.path = prefix + "." + e.path
	}
	return e
}

func (e *fieldError) wire() *protocol.Error {
	if e.path == "" {
		return &protocol.Error{Code: e.code, Message: e.msg}
	}
	return &protocol.Error{Code: e.code, Message: fmt.Sprintf("field %q: %s", e.path, e.msg)}
}
