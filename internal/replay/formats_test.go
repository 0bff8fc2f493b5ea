package replay

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/offline-router/offline-router/internal/wire"
)

var updateTraces = flag.Bool("update-traces", false, "rewrite testdata/traces/*.lowered from what the readers make of the traces")

// The trace goldens: testdata/traces/NAME.FORMAT.jsonl (or .jsonl.gz) is a
// trace, NAME.lowered what its reader makes of it (dumpTrace) or the error
// it refuses it with. A .lowered file opens with # lines that say what it
// proves, kept on -update-traces; one of them may be "# options:" with
// block_size=N (default 4) and basis=absolute|relative.
func TestTraceGoldens(t *testing.T) {
	inputs, err := filepath.Glob("testdata/traces/*.jsonl*")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range inputs {
		base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(in), ".gz"), ".jsonl")
		name, format, ok := strings.Cut(base, ".")
		if !ok {
			t.Fatalf("%s: name it NAME.FORMAT.jsonl", in)
		}
		t.Run(base, func(t *testing.T) {
			checkLowered(t, in, Format(format), filepath.Join("testdata/traces", name+".lowered"))
		})
	}
}

// checkLowered compares what the reader of format makes of the trace in
// with the golden.
func checkLowered(t *testing.T, in string, format Format, golden string) {
	t.Helper()
	header, opts := goldenHeader(t, golden)
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := loweredText(readTrace(f, format, opts))
	if *updateTraces {
		if err := os.WriteFile(golden, []byte(header+got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/replay/ -run TestTraceGoldens -update-traces, and read what it wrote)", err)
	}
	if d := cmp.Diff(string(want), header+got); d != "" {
		t.Errorf("%s differs (-golden +read):\n%s", golden, d)
	}
}

// goldenHeader is a golden's opening # lines and the options they give.
func goldenHeader(t *testing.T, golden string) (string, readOptions) {
	t.Helper()
	opts := readOptions{blockSize: 4, maxLineBytes: wire.DefaultMaxLineBytes}
	data, err := os.ReadFile(golden)
	if err != nil && !(os.IsNotExist(err) && *updateTraces) {
		t.Fatalf("%v: a golden opens with # lines that say what it proves", err)
	}
	var header strings.Builder
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		header.WriteString(line)
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "# options:")
		if !ok {
			continue
		}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "block_size":
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatalf("%s: %s: %v", golden, kv, err)
				}
				opts.blockSize = n
			case "basis":
				opts.basis = NestedBasis(v)
			default:
				t.Fatalf("%s: unknown option %s", golden, kv)
			}
		}
	}
	if header.Len() == 0 && !*updateTraces {
		t.Fatalf("%s: a golden opens with # lines that say what it proves", golden)
	}
	return header.String(), opts
}

// loweredText is a reader's outcome as a golden holds it.
func loweredText(reqs []Request, _ string, err error) string {
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	return dumpTrace(reqs)
}

// dumpTrace writes requests a line each: what a replay takes from them.
// Dependencies name the requests they wait on by id.
func dumpTrace(reqs []Request) string {
	var b strings.Builder
	for i := range reqs {
		r := &reqs[i]
		fmt.Fprintf(&b, "%s", r.ID)
		if a := r.Agent; a != nil {
			fmt.Fprintf(&b, " play=%s conv=%s kind=%s", a.Play, a.Conversation, a.Kind)
			if a.Parent != "" {
				fmt.Fprintf(&b, " parent=%s root=%s", a.Parent, a.Root)
			}
		}
		if r.Session != "" {
			fmt.Fprintf(&b, " session=%s", r.Session)
		}
		if r.ParentSession != "" {
			fmt.Fprintf(&b, " parent_session=%s", r.ParentSession)
		}
		if r.DelayMS != nil {
			fmt.Fprintf(&b, " delay=%v", *r.DelayMS)
		} else if len(r.Deps) == 0 {
			fmt.Fprintf(&b, " at=%v", r.Arrival)
		}
		fmt.Fprintf(&b, " in=%d out=%d ids=%v", r.InputTokens, r.OutputTokens, r.appendIDs(nil))
		for _, d := range r.Deps {
			fmt.Fprintf(&b, " after(%s %s %s +%v)", reqs[d.On].ID, d.Trigger, d.Relation, d.DelayMS)
		}
		for _, f := range []struct {
			name string
			set  bool
			v    any
		}{{"priority", r.Priority != nil, r.Priority}, {"strict_priority", r.StrictPriority != nil, r.StrictPriority},
			{"policy_class", r.PolicyClass != "", r.PolicyClass}, {"role", r.Role != "", r.Role}, {"lora", r.LoRAName != "", r.LoRAName}} {
			if f.set {
				switch v := f.v.(type) {
				case *float64:
					fmt.Fprintf(&b, " %s=%v", f.name, *v)
				case *int64:
					fmt.Fprintf(&b, " %s=%v", f.name, *v)
				default:
					fmt.Fprintf(&b, " %s=%v", f.name, v)
				}
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}
