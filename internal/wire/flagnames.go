package wire

import (
	"errors"
	"strings"
)

// nameTheFlag turns a config check's error about a key ("config
// temperature: ...") into one that names the flag that set it
// ("--temperature (config temperature): ..."): a user who typed a flag
// looks for the flag. A key no flag set keeps its message.
func nameTheFlag(err error, overrides []Override) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for i := len(overrides) - 1; i >= 0; i-- { // the last setting of a key is the one checked
		o := overrides[i]
		prefix := "config " + o.Key + ":"
		if o.Flag != "" && strings.HasPrefix(msg, prefix) {
			return errors.New(o.Flag + " (config " + o.Key + "):" + strings.TrimPrefix(msg, prefix))
		}
	}
	return err
}
