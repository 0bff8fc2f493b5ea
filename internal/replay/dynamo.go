package replay

import (
	"errors"
	"io"
)

// readDynamo is not written yet (issue 38).
func readDynamo(io.Reader, readOptions) ([]Request, error) {
	return nil, errors.New("this trace format is not read yet")
}
