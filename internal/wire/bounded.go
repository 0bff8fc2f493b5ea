package wire

import (
	"errors"
	"io"
	"os"
)

// MaxConfigFileBytes bounds a read of a config-like file (a router config,
// a policy config, a cluster file, an engine profile): each is a few
// kilobytes, and a file without end (/dev/zero, a trace given by mistake)
// would otherwise be read until memory runs out.
const MaxConfigFileBytes = 1 << 20

// ErrTooLarge is ReadBounded's error for a file past MaxConfigFileBytes.
var ErrTooLarge = errors.New("larger than the bound")

// ReadBounded reads the file at path whole, or refuses it with ErrTooLarge
// once it passes MaxConfigFileBytes.
func ReadBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigFileBytes+1))
	if err == nil && len(data) > MaxConfigFileBytes {
		return nil, ErrTooLarge
	}
	return data, err
}
