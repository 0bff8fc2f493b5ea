package replay

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
)

// loraTrace is four prompts over the same ids: under adapter a twice,
// under b, and on the base model.
const loraTrace = `{"timestamp": 0, "input_length": 1536, "output_length": 4, "hash_ids": [1, 2, 3], "lora_name": "a"}
{"timestamp": 1, "input_length": 1536, "output_length": 4, "hash_ids": [1, 2, 3], "lora_name": "b"}
{"timestamp": 2, "input_length": 1536, "output_length": 4, "hash_ids": [1, 2, 3]}
{"timestamp": 3, "input_length": 1536, "output_length": 4, "hash_ids": [1, 2, 3], "lora_name": "a"}
`

// loadTrace loads a trace file as replay does.
func loadTrace(t *testing.T, trace string) ([]Request, TraceInfo) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &Experiment{TracePath: path, MaxLineBytes: 1 << 20, Router: routerConfig(protocol.PolicyKV), Workload: Workload{ArrivalSpeedupRatio: 1}}
	reqs, info, err := e.Load()
	if err != nil {
		t.Fatal(err)
	}
	return reqs, info
}

// TestAdaptersShareNoBlock: a request under an adapter is replayed with
// each id salted by it (kvindex.SaltedBlockID at the adapter's salt), the
// base model's ids as given; so only the two requests of one adapter share
// blocks, in the headroom as anywhere. Catches the salting skipped, applied
// to the base model, made by the wrong seed, or applied after the headroom.
func TestAdaptersShareNoBlock(t *testing.T) {
	reqs, info := loadTrace(t, loraTrace)
	ids := []protocol.LocalBlockHash{1, 2, 3}
	salted := func(name string) []protocol.LocalBlockHash {
		var out []protocol.LocalBlockHash
		for _, h := range ids {
			out = append(out, kvindex.SaltedBlockID(h, kvindex.Salt(name, "")))
		}
		return out
	}
	for i, want := range [][]protocol.LocalBlockHash{salted("a"), salted("b"), ids, salted("a")} {
		if got := reqs[i].appendIDs(nil); !slices.Equal(got, want) {
			t.Errorf("request %d (%q): ids %v, want %v", i, reqs[i].LoRAName, got, want)
		}
	}
	if info.LoRARequests != 3 || info.LoRAAdapters != 2 {
		t.Errorf("trace info %+v: want 3 requests under 2 adapters", info)
	}
	// Only a's second prompt hits: 3 blocks of the 12.
	c := cluster.Simple(2)
	if hr := headroomOf(reqs, &c, false); hr.InfiniteCacheHitRate != 0.25 {
		t.Errorf("infinite-cache hit rate %v, want 0.25", hr.InfiniteCacheHitRate)
	}
}

// TestHostSendsAdapters: a place under an adapter names it, a base
// model's place does not, and each worker_ready says the cluster's adapter
// capacity (Dynamo's 4 unless set), but only when a request runs under an
// adapter; the stream replays in serve as the replay ran. Catches
// lora_name dropped, sent as "" for the base model, or the capacity sent
// always (which would change every stream without adapters).
func TestHostSendsAdapters(t *testing.T) {
	reqs, _ := loadTrace(t, loraTrace)
	two := 2
	for _, c := range []struct {
		capacity *int
		want     string
	}{{nil, `"max_gpu_lora_count":4`}, {&two, `"max_gpu_lora_count":2`}} {
		cc := cluster.Simple(2)
		cc.MaxGPULoRACount = c.capacity
		var cmds, resps bytes.Buffer
		if _, err := Run(slices.Clone(reqs), Options{Cluster: cc, Router: routerConfig(protocol.PolicyKV), Commands: &cmds, Responses: &resps}); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range strings.Split(strings.TrimSpace(cmds.String()), "\n") {
			var cmd struct {
				Op       string  `json:"op"`
				LoRAName *string `json:"lora_name"`
			}
			if err := json.Unmarshal([]byte(l), &cmd); err != nil {
				t.Fatal(err)
			}
			switch {
			case cmd.Op == "worker_ready" && !strings.Contains(l, c.want):
				t.Errorf("worker_ready without %s: %s", c.want, l)
			case cmd.Op == "place" && cmd.LoRAName == nil:
				names = append(names, "none")
			case cmd.Op == "place":
				names = append(names, *cmd.LoRAName)
			}
		}
		if want := []string{"a", "b", "none", "a"}; !slices.Equal(names, want) {
			t.Errorf("the places' lora_name: %v, want %v", names, want)
		}
		servesAlike(t, &cmds, &resps)
	}
	base, _ := loadTrace(t, strings.ReplaceAll(loraTrace, `"lora_name"`, `"other"`))
	var cmds bytes.Buffer
	if _, err := Run(base, Options{Cluster: cluster.Simple(2), Router: routerConfig(protocol.PolicyKV), Commands: &cmds}); err != nil {
		t.Fatal(err)
	}
	if s := cmds.String(); strings.Contains(s, "lora") {
		t.Errorf("a trace without adapters sent one: %s", s)
	}
}

// TestBuiltinAdapters: adapters change no other draw of the built-in
// workload; each session keeps one adapter; about half the sessions run
// the base model, and the adapters are used the less the later they come.
// Catches the adapters drawn from the workload's own stream, one drawn per
// turn, and a draw that piles the tail onto the last adapter.
func TestBuiltinAdapters(t *testing.T) {
	plain, with := Builtin(11, 4000, 0, 512), Builtin(11, 4000, 4, 512)
	if diff := cmp.Diff(plain, with, cmpopts.IgnoreFields(Request{}, "LoRAName"), allowPacked); diff != "" {
		t.Fatalf("adapters changed other draws (-0 +4):\n%s", diff)
	}
	if requests, _ := adapterUse(plain); requests != 0 {
		t.Fatalf("no adapters asked, %d requests under one", requests)
	}
	of := map[string]string{}
	sessions := map[string]int{}
	for _, r := range with {
		if name, ok := of[r.Session]; ok && name != r.LoRAName {
			t.Fatalf("session %s runs under %q and %q", r.Session, name, r.LoRAName)
		}
		if _, ok := of[r.Session]; !ok {
			sessions[r.LoRAName]++
		}
		of[r.Session] = r.LoRAName
	}
	if base := sessions[""]; base < 1800 || base > 2200 {
		t.Errorf("%d of 4000 sessions on the base model, want about half", base)
	}
	names := []string{"lora-0", "lora-1", "lora-2", "lora-3"}
	for k, name := range names {
		if k > 0 && sessions[name] >= sessions[names[k-1]] {
			t.Errorf("sessions by adapter %v: each must be used less than the one before", sessions)
		}
	}
	if len(sessions) != 5 || sessions["lora-3"] == 0 {
		t.Errorf("sessions by adapter %v: want the base model and lora-0 to lora-3", sessions)
	}
}
