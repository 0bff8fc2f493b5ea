package replay

import (
	"errors"
	"io"
)

// readWeka is not written yet (issue 38).
func readWeka(io.Reader, readOptions) ([]Request, error) {
	return nil, errors.New("this trace format is not read yet")
}
