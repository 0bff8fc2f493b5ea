package replay

import (
	"errors"
	"io"
)

// readAgenticMooncake is not written yet (issue 38).
func readAgenticMooncake(io.Reader, readOptions) ([]Request, error) {
	return nil, errors.New("this trace format is not read yet")
}
