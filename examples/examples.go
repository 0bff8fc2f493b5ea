// Package examples ships the worked session that `offline-router example`
// runs and the README shows.
package examples

import _ "embed"

// Session is a small, commented command stream.
//
//go:embed session.jsonl
var Session []byte
