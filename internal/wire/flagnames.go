package wire

import (
	"errors"
	"fmt"
	"strings"
)

// nameTheFlag turns a config check's error about a key ("config
// temperature: ...") into one that names the flag that set it
// ("--temperature (config temperature): ..."), and the line of the file
// the flag names when it has one ("--router-policy-config p.yaml line 7
// (config policy_classes[1].quantum): ..."): a user who typed a flag looks
// for the flag. An error about a path inside a key (a list's element)
// names the flag that set the key. A key no flag set keeps its message.
func nameTheFlag(err error, overrides []Override) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	path, rest, ok := strings.Cut(strings.TrimPrefix(msg, "config "), ":")
	if !ok || !strings.HasPrefix(msg, "config ") {
		return err
	}
	for i := len(overrides) - 1; i >= 0; i-- { // the last setting of a key is the one checked
		o := overrides[i]
		if o.Flag == "" || !pathWithin(path, o.Key) {
			continue
		}
		where := o.Flag
		if line := o.lineOf(path); line > 0 {
			where += fmt.Sprintf(" line %d", line)
		}
		return errors.New(where + " (config " + path + "):" + rest)
	}
	return err
}

// pathWithin reports whether path is key or a path inside it.
func pathWithin(path, key string) bool {
	rest, ok := strings.CutPrefix(path, key)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '[')
}

// lineOf is the line of path, or of the nearest path around it that has
// one (0: none).
func (o Override) lineOf(path string) int {
	for {
		if line, ok := o.Lines[path]; ok {
			return line
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return 0
		}
		path = path[:i]
	}
}
