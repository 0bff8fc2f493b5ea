package replay

import (
	"errors"
	"io"
)

// readMooncakeDelta is not written yet (issue 38).
func readMooncakeDelta(io.Reader, readOptions) ([]Request, error) {
	return nil, errors.New("this trace format is not read yet")
}
