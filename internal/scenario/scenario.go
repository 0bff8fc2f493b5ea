// Package scenario reads and writes golden scenario files: command streams
// that carry their own expected output. The why sits in # comments, each
// command is a line as a host would write it, and the router's exact
// response follows it on a "#< " line. Serve skips # lines, so a scenario
// runs as it is (offline-router < NAME.jsonl), and a diff of its output
// against the "#< " lines is the test. Like raft's and pebble's datadriven
// files, the why, the command and its result read in one place.
package scenario

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
)

// Files lists the scenarios of the project whose root is root
// (testdata/commands/*.jsonl), and refuses to find none.
func Files(root string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(root, "testdata", "commands", "*.jsonl"))
	if err == nil && len(paths) == 0 {
		err = fmt.Errorf("no scenarios under %s", filepath.Join(root, "testdata", "commands"))
	}
	return paths, err
}

// ResponsePrefix opens the line that records a command's response.
const ResponsePrefix = "#< "

// maxLineBytesPrefix opens the comment that sets serve's --max-line-bytes
// for the scenario; other serve options are flags, not config, and a
// scenario names them the same way.
const maxLineBytesPrefix = "# max_line_bytes: "

// lines splits text into lines without their newline; a final newline does
// not make an empty last line.
func lines(text []byte) [][]byte {
	return bytes.Split(bytes.TrimSuffix(text, []byte("\n")), []byte("\n"))
}

func isResponse(line []byte) bool { return bytes.HasPrefix(line, []byte(ResponsePrefix)) }

// Commands is the stream to run: the text without its recorded responses.
func Commands(text []byte) []byte {
	var out []byte
	for _, line := range lines(text) {
		if !isResponse(line) {
			out = append(append(out, line...), '\n')
		}
	}
	return out
}

// Responses are the recorded responses, in order, each without its newline.
func Responses(text []byte) [][]byte {
	var out [][]byte
	for _, line := range lines(text) {
		if isResponse(line) {
			out = append(out, line[len(ResponsePrefix):])
		}
	}
	return out
}

// MaxLineBytes is the line limit the scenario asks serve for, or 0.
func MaxLineBytes(text []byte) (int, error) {
	for _, line := range lines(text) {
		if v, ok := bytes.CutPrefix(line, []byte(maxLineBytesPrefix)); ok {
			n, err := strconv.Atoi(string(v))
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("%q: expected a positive number of bytes", line)
			}
			return n, nil
		}
	}
	return 0, nil
}

// Render writes text with each command line followed by its response from
// out (serve's output for Commands(text)), replacing the responses text
// recorded. answered tells a command line from a comment as serve does.
func Render(text, out []byte, answered func(line []byte) bool) ([]byte, error) {
	resps := lines(out)
	if len(out) == 0 {
		resps = nil
	}
	var b []byte
	for _, line := range lines(text) {
		if isResponse(line) {
			continue
		}
		b = append(append(b, line...), '\n')
		if !answered(line) {
			continue
		}
		if len(resps) == 0 {
			return nil, fmt.Errorf("no response for %.80q", line)
		}
		b = append(append(append(b, ResponsePrefix...), resps[0]...), '\n')
		resps = resps[1:]
	}
	if len(resps) > 0 {
		return nil, fmt.Errorf("%d responses left over", len(resps))
	}
	return b, nil
}
