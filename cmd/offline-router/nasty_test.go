package main

import (
	"bufio"
	"bytes"
	stdjson "encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

// nastyLines are lines a broken or hostile host might send. Each must get
// exactly one error response, and the command after it must work.
var nastyLines = map[string]string{
	"truncated":             `{"op":"place","request_id":"r","input_tokens":1`,
	"truncated string":      `{"op":"place","request_id":"r`,
	"wrong type":            `{"op":"worker_ready","worker_id":"one"}`,
	"wrong type in list":    `{"op":"place","request_id":"r","block_hashes":[1,"2"]}`,
	"huge number":           `{"op":"worker_ready","worker_id":99999999999999999999999999999999}`,
	"just above 2^64":       `{"op":"worker_ready","worker_id":18446744073709551616}`,
	"negative count":        `{"op":"place","request_id":"r","input_tokens":-5}`,
	"fraction":              `{"op":"place","request_id":"r","input_tokens":2.5}`,
	"NaN":                   `{"op":"advance_clock","now_ms":NaN}`,
	"Infinity":              `{"op":"advance_clock","now_ms":Infinity}`,
	"-Infinity":             `{"op":"advance_clock","now_ms":-Infinity}`,
	"exponent overflow":     `{"op":"advance_clock","now_ms":1e400}`,
	"deeply nested":         `{"op":"place","request_id":"r","tokens":` + strings.Repeat("[", 200000) + strings.Repeat("]", 200000) + `}`,
	"deeply nested id":      `{"op":"inspect","id":` + strings.Repeat(`{"a":`, 100000) + "1" + strings.Repeat("}", 100000) + `}`,
	"invalid UTF-8":         "{\"op\":\"place\",\"request_id\":\"\xff\xfe\"}",
	"invalid UTF-8 key":     "{\"op\":\"inspect\",\"\xc3\x28\":1}",
	"duplicate key":         `{"op":"place","request_id":"a","request_id":"b"}`,
	"empty object":          `{}`,
	"null op":               `{"op":null}`,
	"null required field":   `{"op":"worker_ready","worker_id":null}`,
	"array":                 `[]`,
	"bare string":           `"place"`,
	"bare number":           `42`,
	"two objects":           `{"op":"inspect"}{"op":"inspect"}`,
	"unknown op":            `{"op":"delete_everything"}`,
	"unknown field":         `{"op":"inspect","verbose":true}`,
	"control character":     "{\"op\":\"place\",\"request_id\":\"a\tb\"}",
	"lone backslash":        `{"op":"place","request_id":"a\"}`,
	"bad escape":            `{"op":"place","request_id":"\q"}`,
	"nul byte":              "{\"op\":\"inspect\"\x00}",
	"bom":                   "\xef\xbb\xbf{\"op\":\"inspect\"}",
	"leading zero":          `{"op":"worker_ready","worker_id":007}`,
	"plus sign":             `{"op":"worker_ready","worker_id":+7}`,
	"true for a number":     `{"op":"worker_ready","worker_id":true}`,
	"event of wrong shape":  `{"op":"observe","events":[{"worker_id":1,"event":{"event_id":1,"data":{"stored":7}}}]}`,
	"events not a list":     `{"op":"observe","events":{"worker_id":1}}`,
	"request_id too long":   `{"op":"place","request_id":"` + strings.Repeat("r", 300) + `"}`,
	"dp_size zero":          `{"op":"worker_ready","worker_id":5,"dp_size":0}`,
	"dp_size of all memory": `{"op":"worker_ready","worker_id":5,"dp_size":4294967295}`,
	"time past 2^53":        `{"op":"advance_clock","now_ms":1.7e308}`,
	"priority past 2^53":    `{"op":"place","request_id":"r","input_tokens":16,"priority":1.7976931348623157e308}`,
	"tokens past 2^40":      `{"op":"place","request_id":"r","input_tokens":18446744073709551615}`,
}

// TestAnIdPastFloatRangeIsEchoed: an id is echoed as it came, even a number
// no float64 holds; after a thousand answered commands none is lost.
func TestAnIdPastFloatRangeIsEchoed(t *testing.T) {
	in := strings.Repeat(`{"op":"advance_clock","now_ms":1}`+"\n", 1000) + `{"op":"inspect","id":1e400}` + "\n" + `{"op":"inspect","id":-0.0e-999}` + "\n"
	stdout, stderr, code := run(t, in)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if code != 0 || len(lines) != 1002 {
		t.Fatalf("exit %d, %d responses for 1002 commands: %s", code, len(lines), stderr)
	}
	for i, want := range map[int]string{1000: `{"seq":1001,"id":1e400,"op":"inspect","ok":true`, 1001: `{"seq":1002,"id":-0.0e-999,"op":"inspect","ok":true`} {
		// encoding/json's Valid checks the grammar; goccy's wants numbers float64 holds.
		if !strings.HasPrefix(lines[i], want) || !stdjson.Valid([]byte(lines[i])) {
			t.Errorf("response %d: %.120s", i+1, lines[i])
		}
	}
}

func TestNastyLinesGetOneErrorEach(t *testing.T) {
	var in strings.Builder
	var names []string
	for name, line := range nastyLines {
		names = append(names, name)
		in.WriteString(line + "\n" + `{"op":"inspect","id":"after"}` + "\n")
	}
	stdout, _, code := run(t, in.String())
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 2*len(names) {
		t.Fatalf("%d responses for %d lines", len(lines), 2*len(names))
	}
	for i, name := range names {
		var bad, after struct {
			OK    bool `json:"ok"`
			Error *struct{ Code, Message string }
			ID    string `json:"id"`
		}
		if err := json.Unmarshal([]byte(lines[2*i]), &bad); err != nil {
			t.Fatalf("%s: the response is not JSON: %v", name, err)
		}
		if bad.OK || bad.Error == nil || bad.Error.Message == "" {
			t.Errorf("%s: want one clear error, got %.200s", name, lines[2*i])
		}
		if err := json.Unmarshal([]byte(lines[2*i+1]), &after); err != nil || !after.OK || after.ID != "after" {
			t.Errorf("%s: the next valid command failed: %.200s", name, lines[2*i+1])
		}
	}
}

// TestHundredsOfMegabytesOnOneLine: a 300 MB line against the default
// --max-line-bytes (64 MiB) is refused and discarded as it streams in, and
// the next command works.
func TestHundredsOfMegabytesOnOneLine(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 300 MB")
	}
	cmd, stdin, stdout, _ := started(t)
	go func() {
		w := bufio.NewWriterSize(stdin, 1<<20)
		w.WriteString(`{"op":"place","request_id":"`)
		chunk := bytes.Repeat([]byte("x"), 1<<20)
		for range 300 {
			w.Write(chunk)
		}
		w.WriteString("\"}\n" + `{"op":"inspect","id":"after"}` + "\n")
		w.Flush()
		stdin.Close()
	}()
	out, _ := io.ReadAll(stdout)
	if code := waitExit(t, cmd); code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"code":"line_too_long"`) || !strings.Contains(lines[1], `"id":"after","op":"inspect","ok":true`) {
		t.Fatalf("got %d lines: %.300s", len(lines), out)
	}
}
