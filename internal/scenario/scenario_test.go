package scenario

import (
	"bytes"
	"strings"
	"testing"
)

func answered(line []byte) bool { return len(line) > 0 && line[0] != '#' }

// TestRenderRoundTrip: rendering puts each response after its command and
// drops the old ones; Commands and Responses read the result back.
func TestRenderRoundTrip(t *testing.T) {
	text := []byte("# why\n{\"op\":\"a\"}\n#< stale\n\n{\"op\":\"b\"}\n")
	got, err := Render(text, []byte("R1\nR2\n"), answered)
	if err != nil {
		t.Fatal(err)
	}
	want := "# why\n{\"op\":\"a\"}\n#< R1\n\n{\"op\":\"b\"}\n#< R2\n"
	if string(got) != want {
		t.Fatalf("rendered:\n%s\nwant:\n%s", got, want)
	}
	if c := Commands(got); string(c) != "# why\n{\"op\":\"a\"}\n\n{\"op\":\"b\"}\n" {
		t.Fatalf("commands: %q", c)
	}
	if r := Responses(got); len(r) != 2 || !bytes.Equal(r[0], []byte("R1")) || !bytes.Equal(r[1], []byte("R2")) {
		t.Fatalf("responses: %q", r)
	}
}

func TestRenderRefusesAMismatch(t *testing.T) {
	text := []byte("{\"op\":\"a\"}\n{\"op\":\"b\"}\n")
	if _, err := Render(text, []byte("R1\n"), answered); err == nil || !strings.Contains(err.Error(), "no response") {
		t.Errorf("one response for two commands: %v", err)
	}
	if _, err := Render(text, []byte("R1\nR2\nR3\n"), answered); err == nil || !strings.Contains(err.Error(), "left over") {
		t.Errorf("three responses for two commands: %v", err)
	}
}

func TestMaxLineBytes(t *testing.T) {
	if n, err := MaxLineBytes([]byte("# why\n# max_line_bytes: 300\n{}\n")); n != 300 || err != nil {
		t.Errorf("got %d, %v", n, err)
	}
	if n, err := MaxLineBytes([]byte("{}\n")); n != 0 || err != nil {
		t.Errorf("none given: got %d, %v", n, err)
	}
	if _, err := MaxLineBytes([]byte("# max_line_bytes: lots\n")); err == nil {
		t.Error("a limit that is not a number must be an error")
	}
}

// TestRecordNarrowsTheConfig: a config answer is recorded with only the
// keys that differ from the defaults, nested objects narrowed, order kept;
// every other line, and every line of a scenario marked whole, is as
// served. (Catches: comparing nested objects whole, dropping a changed
// key, reordering, narrowing a marked scenario.)
func TestRecordNarrowsTheConfig(t *testing.T) {
	defaults := []byte(`{"policy":"kv","seed":0,"affinity":{"mode":"off","ttl_ms":3600000},"queue_threshold":null}`)
	out := []byte(`{"seq":1,"op":"config","ok":true,"config":{"policy":"kv","seed":0,"affinity":{"mode":"hard","ttl_ms":3600000},"queue_threshold":1},"versions":{"protocol":1}}` + "\n" +
		`{"seq":2,"op":"place","ok":true}` + "\n" +
		`{"seq":3,"op":"config","ok":true,"config":{"policy":"kv","seed":0,"affinity":{"mode":"off","ttl_ms":3600000},"queue_threshold":null}}` + "\n")
	got, err := NewRecorder([]byte("# why\n"), defaults).Record(out)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"seq":1,"op":"config","ok":true,"config_changes":{"affinity":{"mode":"hard"},"queue_threshold":1},"versions":{"protocol":1}}` + "\n" +
		`{"seq":2,"op":"place","ok":true}` + "\n" +
		`{"seq":3,"op":"config","ok":true,"config_changes":{}}` + "\n"
	if string(got) != want {
		t.Errorf("recorded:\n%s\nwant:\n%s", got, want)
	}
	whole, err := NewRecorder([]byte("# why\n# config: whole\n"), defaults).Record(out)
	if err != nil || !bytes.Equal(whole, out) {
		t.Errorf("a scenario marked whole must record the answer as served: %v\n%s", err, whole)
	}
}
