package wire

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/offline-router/offline-router/internal/protocol"
)

func TestConfigDefaults(t *testing.T) {
	c, err := LoadConfig(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(protocol.DefaultConfig(), c); diff != "" {
		t.Fatalf("(-default +loaded):\n%s", diff)
	}
	if c.BlockSize != 16 || c.Policy != "kv" || !c.KVEvents || c.Affinity.TTLMS != 3600000 || c.Evidence != "summary" {
		t.Fatalf("defaults differ from PROTOCOL.md §2: %+v", c)
	}
}

func TestConfigFlagOverridesFile(t *testing.T) {
	c, err := LoadConfig([]byte(`{"block_size":512,"seed":3,"affinity":{"mode":"off","ttl_ms":5}}`),
		[]Override{{Key: "seed", Value: uint64(9)}, {Key: "affinity.ttl_ms", Value: 7.0}})
	if err != nil {
		t.Fatal(err)
	}
	if c.BlockSize != 512 || c.Seed != 9 || c.Affinity.TTLMS != 7 || c.Affinity.Key != "session" {
		t.Fatalf("got %+v", c)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	for file, mention := range map[string]string{
		`{"block_sise":16}`:                        "block_sise",
		`{"affinity":{"mode":"off","ttl":1}}`:      "ttl",
		`{"policy":"best"}`:                        "policy",
		`{"block_size":0}`:                         "block_size",
		`{"overlap_score_credit":-0.5}`:            "overlap_score_credit",
		`{"prefill_load_model":"linear"}`:          "prefill_tokens_per_ms",
		`{"temperature":-1}`:                       "temperature",
		`{"evidence":"all"}`:                       "evidence",
		`{"queue_timeout_ms":0}`:                   "queue_timeout_ms",
		`{"worker_defaults":{"role":"x"}}`:         "worker_defaults.role",
		`{"worker_defaults":{"dp_size":0}}`:        "worker_defaults.dp_size",
		`{"block_size":16} {"block_size":32}`:      "unexpected data",
		`{"affinity":{"key":"sibling"}}`:           "affinity.key",
		`{"active_prefill_tokens_threshold":-1.0}`: "active_prefill_tokens_threshold",
	} {
		_, err := LoadConfig([]byte(file), nil)
		if err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("%s: got %v, want an error mentioning %q", file, err, mention)
		}
	}
}

func TestConfigCommandDecodes(t *testing.T) {
	d := decode(t, `{"queue_threshold":0.5,"affinity":{"ttl_ms":10,"mode":"hard"},"op":"config","id":"c","policy":"random"}`)
	if d.Err != nil {
		t.Fatal(d.Err)
	}
	u := d.Cmd.Config
	if d.Cmd.Op != protocol.OpConfig || string(d.ID) != `"c"` || u == nil {
		t.Fatalf("decoded %+v", d.Cmd)
	}
	if diff := cmp.Diff([]string{"policy", "queue_threshold", "affinity.mode", "affinity.ttl_ms"}, u.Keys); diff != "" {
		t.Fatalf("keys, in Config's order (-want +got):\n%s", diff)
	}
	want := protocol.DefaultConfig()
	want.Policy, want.QueueThreshold, want.Affinity.Mode, want.Affinity.TTLMS = protocol.PolicyRandom, ptrTo(0.5), protocol.AffinityHard, 10
	if diff := cmp.Diff(want, u.Config); diff != "" {
		t.Fatalf("config (-want +got):\n%s", diff)
	}
}

func TestConfigCommandRefusals(t *testing.T) {
	for line, want := range map[string]string{
		`{"op":"config","queue_treshold":1}`:                       `unknown_field: field "queue_treshold": is not a config key`,
		`{"op":"config","queueThreshold":1}`:                       `(did you mean "queue_threshold"?)`,
		`{"op":"config","affinity":{"mod":"hard"}}`:                `unknown_field: field "affinity.mod": is not a config key`,
		`{"op":"config","now_ms":3}`:                               `unknown_field: field "now_ms": is not a config key`,
		`{"op":"config","block_size":"16"}`:                        `invalid_field: field "block_size": expected an unsigned 64-bit integer, got a string`,
		`{"op":"config","block_size":18446744073709551617}`:        `field "block_size": expected an unsigned 64-bit integer, got 18446744073709551617 (above 18446744073709551615)`,
		`{"op":"config","worker_defaults":{"dp_size":4294967296}}`: `field "worker_defaults.dp_size": expected an unsigned 32-bit integer`,
		`{"op":"config","queue_threshold":"x"}`:                    `invalid_field: field "queue_threshold": expected a number, got a string`,
		`{"op":"config","temperature":1e400}`:                      `field "temperature": expected a finite number, got 1e400 (out of range)`,
		`{"op":"config","affinity":3}`:                             `invalid_field: field "affinity": expected an object`,
		`{"op":"config","policy":"kv","policy":"random"}`:          `field "policy": appears more than once`,
		`{"op":"config","affinity":{"mode":"hard","mode":"soft"}}`: `field "affinity.mode": appears more than once`,
		"{\"op\":\"config\",\"policy\":\"k\xffv\"}":                `field "policy": expected a string of valid UTF-8`,
		`{"op":"config","block_size":16`:                           `parse_error`,
		`{"block_size":16,"op":"config","worker_id":1}`:            `unknown_field: field "worker_id": is not a config key`,
		`{"op":"place","request_id":"r","queue_threshold":1}`:      `unknown_field: field "queue_threshold": is not a protocol field`,
	} {
		d := decode(t, line)
		if d.Err == nil || !strings.Contains(d.Err.Error(), want) {
			t.Errorf("%s: got %v, want %q", line, d.Err, want)
		}
	}
}

// TestConfigSourceMerge: a config command's keys go over the file and the
// flags; a key either of them set explicitly to another value is an error
// naming both places, and one set to the same value is fine.
func TestConfigSourceMerge(t *testing.T) {
	src := ConfigSource{File: []byte(`{"affinity":{"mode":"hard"},"seed":3}`), FileName: "router.json",
		Overrides: []Override{{Key: "queue_threshold", Value: 0.5, Flag: "--queue-threshold"}}}
	update := func(line string) *protocol.ConfigUpdate {
		d := decode(t, line)
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		return d.Cmd.Config
	}
	cfg, err := src.Merge(update(`{"op":"config","queue_threshold":0.5,"affinity":{"mode":"hard","ttl_ms":9},"policy":"random"}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy != protocol.PolicyRandom || cfg.Affinity.TTLMS != 9 || cfg.Affinity.Mode != protocol.AffinityHard || cfg.Seed != 3 || *cfg.QueueThreshold != 0.5 {
		t.Fatalf("merged %+v", cfg)
	}
	for line, want := range map[string]string{
		`{"op":"config","queue_threshold":1}`:           `field "queue_threshold": the config command sets 1, but --queue-threshold set 0.5`,
		`{"op":"config","affinity":{"mode":"soft"}}`:    `field "affinity.mode": the config command sets "soft", but --config router.json set "hard"`,
		`{"op":"config","seed":4}`:                      `--config router.json set 3`,
		`{"op":"config","queue_policy":"fifo"}`:         `config queue_policy: "fifo" is not one of fcfs, wspt, lcfs`,
		`{"op":"config","prefill_load_model":"linear"}`: `config prefill_tokens_per_ms: required by prefill_load_model "linear"`,
	} {
		if _, err := src.Merge(update(line)); err == nil || !strings.Contains(err.Message, want) {
			t.Errorf("%s: got %v, want %q", line, err, want)
		}
	}
}

// TestServeTakesConfigFirstOnly: a config command that opens the stream
// swaps the stepper for the one Configure builds; a refused one keeps the
// old; one after any other command goes to the stepper, which refuses it.
func TestServeTakesConfigFirstOnly(t *testing.T) {
	first, second := &echo{}, &echo{}
	configured := 0
	opt := ServeOptions{Configure: func(u *protocol.ConfigUpdate) (Stepper, *protocol.Config, *protocol.Error) {
		configured++
		if u.Config.Seed == 13 {
			return nil, nil, protocol.Errorf(protocol.CodeInvalidField, "unlucky")
		}
		return second, &u.Config, nil
	}}
	var out bytes.Buffer
	in := `{"op":"config","seed":5}` + "\n" + `{"op":"inspect"}` + "\n" + `{"op":"config","seed":6}` + "\n"
	if _, err := Serve(strings.NewReader(in), &out, first, opt); err != nil {
		t.Fatal(err)
	}
	resps := strings.Split(strings.TrimSpace(out.String()), "\n")
	if configured != 1 || first.applied != 0 || second.applied != 2 || len(resps) != 3 || !strings.Contains(resps[0], `"config":{"policy":"kv","block_size":16,"seed":5,`) {
		t.Fatalf("configured %d, first applied %d, second %d:\n%s", configured, first.applied, second.applied, out.String())
	}
	out.Reset()
	if _, err := Serve(strings.NewReader(`{"op":"config","seed":13}`+"\n"+`{"op":"inspect"}`+"\n"), &out, first, opt); err != nil {
		t.Fatal(err)
	}
	if first.applied != 1 || !strings.Contains(out.String(), `"message":"unlucky"`) {
		t.Fatalf("a refused config must keep the stepper: first applied %d:\n%s", first.applied, out.String())
	}
}

func ptrTo[T any](v T) *T { return &v }

var exponentOrNegativeZero = regexp.MustCompile(`[0-9][eE]|:-0[,}]`)

// TestConfigEchoReadsBack: the effective config a config command's response
// carries is JSON that reads back, as a config file, into the same config,
// its numbers printed as every response prints them (no exponent, no -0).
func TestConfigEchoReadsBack(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		num := rapid.SampledFrom([]float64{0, math.Copysign(0, -1), 1e-9, 0.5, 1, 1e21, 1e300, 123.456})
		c := protocol.DefaultConfig()
		c.Temperature = num.Draw(t, "temperature")
		c.Seed = rapid.Uint64().Draw(t, "seed")
		c.KVEvents = rapid.Bool().Draw(t, "kv_events")
		if rapid.Bool().Draw(t, "queue") {
			c.QueueThreshold = ptrTo(num.Draw(t, "queue_threshold"))
		}
		c.Affinity.Mode = protocol.AffinityMode(rapid.SampledFrom([]string{"off", "hard", "x\"y\\z\u2028"}).Draw(t, "mode"))
		c.WorkerDefaults.DPSize = ptrTo(rapid.Uint32().Draw(t, "dp_size"))
		// Lists of any length, their optional keys drawn set or not.
		opt := func(name string) *uint64 {
			if rapid.Bool().Draw(t, name+"_set") {
				return ptrTo(rapid.Uint64().Draw(t, name))
			}
			return nil
		}
		for i := range rapid.IntRange(0, 3).Draw(t, "classes") {
			pc := protocol.PolicyClass{Name: rapid.SampledFrom([]string{"a", "b.c", "x\"y"}).Draw(t, "name"), SLOMS: rapid.Uint64().Draw(t, "slo_ms"),
				Quantum: rapid.Uint64().Draw(t, "quantum"), PrefillBusyThreshold: opt("pbt"), RequestQueueLimitPerWorker: opt("rql"),
				RawISLTokenQueueLimitPerWorker: opt("raw"), CachedTokenQueueLimitPerWorker: opt("cached")}
			if rapid.Bool().Draw(t, "frac_set") {
				pc.PrefillBusyThresholdFrac = ptrTo(num.Draw(t, "frac"))
			}
			c.PolicyClasses = append(c.PolicyClasses, pc)
			c.DefaultPolicyClass = fmt.Sprint(i)
		}
		for range rapid.IntRange(0, 2).Draw(t, "instances") {
			in := protocol.SelectionInstance{Name: "i", Type: protocol.Policy(rapid.SampledFrom([]string{"kv", "llmd"}).Draw(t, "type"))}
			if rapid.Bool().Draw(t, "scale_set") {
				in.Parameters.PrefillLoadScale = ptrTo(num.Draw(t, "scale"))
			}
			c.WorkerSelection.Instances = append(c.WorkerSelection.Instances, in)
		}
		echo := appendConfig(nil, &c)
		got := protocol.DefaultConfig()
		got.Affinity.Mode = "unset"
		if err := decodeConfigFile("echo", echo, &got, nil); err != nil {
			t.Fatalf("%s: %v", echo, err)
		}
		if diff := cmp.Diff(c, got, cmp.Comparer(func(a, b float64) bool { return a == b })); diff != "" {
			t.Fatalf("%s read back differently (-written +read):\n%s", echo, diff)
		}
		if exponentOrNegativeZero.Match(echo) {
			t.Fatalf("a number with an exponent or -0: %s", echo)
		}
	})
}

// TestConfigCommandErrorsKeepTheHeader: a readable config line that fails
// still echoes op and id, wherever the bad key stands; an unreadable one
// has op null and no id, as any other line.
func TestConfigCommandErrorsKeepTheHeader(t *testing.T) {
	for _, line := range []string{`{"op":"config","bogus":1,"id":"y"}`, `{"op":"config","queue_threshold":"x","id":"y"}`, `{"bogus":1,"op":"config","id":"y"}`} {
		d := decode(t, line)
		if d.Err == nil || d.Op == nil || *d.Op != "config" || string(d.ID) != `"y"` {
			t.Errorf("%s: op %v, id %s, error %v", line, d.Op, d.ID, d.Err)
		}
	}
	for _, line := range []string{`{"op":"config","id":"y","temperature":1`, `{"op":"config","id":"y"} x`} {
		d := decode(t, line)
		if d.Err == nil || d.Err.Code != protocol.CodeParse || d.Op != nil || d.ID != nil {
			t.Errorf("%s: op %v, id %s, error %v", line, d.Op, d.ID, d.Err)
		}
	}
}

// TestConfigNull: null unsets an optional key, and leaves any other key
// absent, so it cannot clash with a flag.
func TestConfigNull(t *testing.T) {
	d := decode(t, `{"op":"config","block_size":null,"affinity":{"mode":null},"queue_threshold":null}`)
	if d.Err != nil {
		t.Fatal(d.Err)
	}
	if diff := cmp.Diff([]string{"queue_threshold"}, d.Cmd.Config.Keys); diff != "" {
		t.Fatalf("keys (-want +got):\n%s", diff)
	}
	src := ConfigSource{Overrides: []Override{{Key: "block_size", Value: uint64(512), Flag: "--block-size"}, {Key: "affinity.mode", Value: "hard", Flag: "--affinity-mode"}}}
	cfg, err := src.Merge(d.Cmd.Config)
	if err != nil || cfg.BlockSize != 512 || cfg.Affinity.Mode != protocol.AffinityHard || cfg.QueueThreshold != nil {
		t.Fatalf("merged %+v, %v", cfg, err)
	}
}

// TestConfigFileIsAsStrictAsACommand: a config file is read by the same
// decoder: a repeated key or an integer past its range is refused, naming it.
func TestConfigFileIsAsStrictAsACommand(t *testing.T) {
	for file, want := range map[string]string{
		`{"queue_threshold":1,"queue_threshold":2}`:                    `config file line 1: field "queue_threshold": appears more than once`,
		"{\n  \"seed\": 1,\n  \"block_size\": 18446744073709551617\n}": `config file line 3: field "block_size": expected an unsigned 64-bit integer`,
		`{"affinity":{"mode":"hard"},"affinity":{"ttl_ms":5}}`:         `config file line 1: field "affinity": appears more than once`,
		`{"block_size":18446744073709551617}`:                          `(above 18446744073709551615)`,
		`{"block_size":16} {}`:                                         `unexpected data after the config object`,
		`{"affinity":{"mode":"hard"},"affinity.mode":"soft"}`:          `config file line 1: field "affinity.mode": is not a config key`,
		"{\n  \"affinity\": {\"key\": \"a\\udc00\"}\n}":                `config file line 2: field "affinity.key": expected a string of valid UTF-8, got a lone surrogate escape`,
	} {
		if _, err := LoadConfig([]byte(file), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", file, err, want)
		}
	}
}

// A flag may parse NaN or Inf; the config says it wants a finite number,
// naming the key (it said "json: unsupported value: NaN").
func TestNonFiniteFlagValuesAreNamed(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := LoadConfig(nil, []Override{{Key: "temperature", Value: v}})
		if err == nil || !strings.Contains(err.Error(), "config temperature: expected a finite number") {
			t.Errorf("%v: got %v", v, err)
		}
	}
}

// classesLine is a config command with two policy classes and two
// worker-selection instances, optional keys given, null and left out.
const classesLine = `{"op":"config","default_policy_class":"batch","policy_classes":[` +
	`{"name":"latency","slo_ms":3000,"quantum":512,"prefill_busy_threshold":0,"request_queue_limit_per_worker":32,"prefill_busy_threshold_frac":null},` +
	`{"quantum":128,"slo_ms":600000,"name":"batch","prefill_busy_threshold_frac":1.5,"raw_isl_token_queue_limit_per_worker":9007199254740992,"cached_token_queue_limit_per_worker":7}],` +
	`"worker_selection":{"default":"cheap","instances":[{"name":"cheap","type":"round_robin"},` +
	`{"name":"warm","type":"kv","parameters":{"temperature":0.5,"overlap_score_credit":null,"prefill_load_scale":2}}]}}`

// classesConfig is what classesLine sets.
func classesConfig() protocol.Config {
	c := protocol.DefaultConfig()
	c.DefaultPolicyClass = "batch"
	c.PolicyClasses = []protocol.PolicyClass{
		{Name: "latency", SLOMS: 3000, Quantum: 512, PrefillBusyThreshold: ptrTo(uint64(0)), RequestQueueLimitPerWorker: ptrTo(uint64(32))},
		{Name: "batch", SLOMS: 600000, Quantum: 128, PrefillBusyThresholdFrac: ptrTo(1.5), RawISLTokenQueueLimitPerWorker: ptrTo(uint64(1 << 53)),
			CachedTokenQueueLimitPerWorker: ptrTo(uint64(7))},
	}
	c.WorkerSelection = protocol.WorkerSelection{Default: "cheap", Instances: []protocol.SelectionInstance{
		{Name: "cheap", Type: protocol.PolicyRoundRobin},
		{Name: "warm", Type: protocol.PolicyKV, Parameters: protocol.SelectionParameters{Temperature: ptrTo(0.5), PrefillLoadScale: ptrTo(2.0)}},
	}}
	return c
}

// TestConfigListsDecode: policy_classes and worker_selection.instances read
// as arrays of objects, every element key into its field whatever the
// order, an optional one given as null or left out absent, and each list
// is one key of the update. Catches a list not decoded (or decoded as the
// last element only), a key read into the wrong field, null taken as 0,
// and a list's elements counted as keys of their own.
func TestConfigListsDecode(t *testing.T) {
	d := decode(t, classesLine)
	if d.Err != nil {
		t.Fatal(d.Err)
	}
	if diff := cmp.Diff([]string{"default_policy_class", "policy_classes", "worker_selection.default", "worker_selection.instances"}, d.Cmd.Config.Keys); diff != "" {
		t.Fatalf("keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(classesConfig(), d.Cmd.Config.Config); diff != "" {
		t.Fatalf("config (-want +got):\n%s", diff)
	}
	cfg, err := ConfigSource{}.Merge(d.Cmd.Config)
	if err != nil {
		t.Fatalf("a valid set of classes refused: %v", err)
	}
	if diff := cmp.Diff(classesConfig(), cfg); diff != "" {
		t.Fatalf("merged (-want +got):\n%s", diff)
	}
}

// TestConfigListRefusals: inside a list the keys are as strict as at the
// top: an unknown key is unknown_field naming its whole path (with the
// hint for a slip of case or separator), a repeated one, a missing required
// one, a wrong type or an integer past its range is invalid_field naming
// it. Each line catches the check it names being dropped, and the path
// losing its list index or its group.
func TestConfigListRefusals(t *testing.T) {
	class := func(body string) string {
		return `{"op":"config","policy_classes":[{"name":"a","slo_ms":1,"quantum":1},` + body + `]}`
	}
	inst := func(body string) string { return `{"op":"config","worker_selection":{"instances":[` + body + `]}}` }
	for line, want := range map[string]string{
		class(`{"name":"b","slo_ms":1,"quantm":1}`):                                    `unknown_field: field "policy_classes[1].quantm": is not a key of a policy class (docs/PROTOCOL.md §2)`,
		class(`{"name":"b","slo_ms":1,"Quantum":1}`):                                   `field "policy_classes[1].Quantum": is not a key of a policy class (docs/PROTOCOL.md §2) (did you mean "quantum"?)`,
		class(`{"name":"b","quantum":1}`):                                              `invalid_field: field "policy_classes[1].slo_ms": required: a policy class gives name, slo_ms, quantum`,
		class(`{"name":null,"slo_ms":1,"quantum":1}`):                                  `invalid_field: field "policy_classes[1].name": required`,
		class(`{"name":"b","slo_ms":1,"quantum":1,"name":"c"}`):                        `invalid_field: field "policy_classes[1].name": appears more than once`,
		class(`{"name":"b","slo_ms":1,"quantum":18446744073709551616}`):                `field "policy_classes[1].quantum": expected an unsigned 64-bit integer, got 18446744073709551616 (above 18446744073709551615)`,
		class(`{"name":"b","slo_ms":-1,"quantum":1}`):                                  `field "policy_classes[1].slo_ms": expected an unsigned 64-bit integer`,
		class(`{"name":"b","slo_ms":1,"quantum":1,"prefill_busy_threshold_frac":"x"}`): `field "policy_classes[1].prefill_busy_threshold_frac": expected a number, got a string`,
		class(`3`): `invalid_field: field "policy_classes[1]": expected an object, got number 3`,
		`{"op":"config","policy_classes":{"name":"a"}}`:                      `invalid_field: field "policy_classes": expected an array, got an object`,
		`{"op":"config","policyClasses":[]}`:                                 `unknown_field: field "policyClasses": is not a config key (docs/PROTOCOL.md §2) (did you mean "policy_classes"?)`,
		inst(`{"name":"x","type":"kv","parameters":{"temprature":1}}`):       `unknown_field: field "worker_selection.instances[0].parameters.temprature": is not a key of an instance's parameters`,
		inst(`{"name":"x","type":"kv","parameters":1}`):                      `invalid_field: field "worker_selection.instances[0].parameters": expected an object, got number 1`,
		inst(`{"name":"x"}`):                                                 `invalid_field: field "worker_selection.instances[0].type": required: a worker_selection instance gives name, type`,
		inst(`{"name":"x","type":"kv","params":{}}`):                         `unknown_field: field "worker_selection.instances[0].params": is not a key of a worker_selection instance`,
		`{"op":"config","worker_selection":{"instances":[],"instances":[]}}`: `field "worker_selection.instances": appears more than once`,
	} {
		d := decode(t, line)
		if d.Err == nil || !strings.Contains(d.Err.Error(), want) {
			t.Errorf("%s:\n got %v\nwant %q", line, d.Err, want)
		}
	}
}

// TestConfigListNullIsEmpty: null for a whole list sets it empty, and is a
// key the command sets: against a file that gives classes it is a
// conflict, named with both lists. The same list the file gives is not.
// Catches null left as "not set" (the file's classes would stay silently)
// and the conflict check comparing anything but the whole list.
func TestConfigListNullIsEmpty(t *testing.T) {
	d := decode(t, `{"op":"config","policy_classes":null,"worker_selection":{"instances":null}}`)
	if d.Err != nil {
		t.Fatal(d.Err)
	}
	if diff := cmp.Diff([]string{"policy_classes", "worker_selection.instances"}, d.Cmd.Config.Keys); diff != "" {
		t.Fatalf("keys (-want +got):\n%s", diff)
	}
	if d.Cmd.Config.Config.PolicyClasses != nil || d.Cmd.Config.Config.WorkerSelection.Instances != nil {
		t.Fatalf("null lists decoded as %+v", d.Cmd.Config.Config)
	}
	src := ConfigSource{FileName: "router.json", File: []byte(`{"default_policy_class":"a","policy_classes":[{"name":"a","slo_ms":5,"quantum":1}]}`)}
	_, err := src.Merge(d.Cmd.Config)
	want := `field "policy_classes": the config command sets [], but --config router.json set [{"name":"a","slo_ms":5,"quantum":1,"prefill_busy_threshold":null,"prefill_busy_threshold_frac":null,"request_queue_limit_per_worker":null,"raw_isl_token_queue_limit_per_worker":null,"cached_token_queue_limit_per_worker":null}]; give it in one place`
	if err == nil || err.Message != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	same := decode(t, `{"op":"config","policy_classes":[{"quantum":1,"name":"a","slo_ms":5,"prefill_busy_threshold":null}]}`)
	if cfg, err := src.Merge(same.Cmd.Config); err != nil || len(cfg.PolicyClasses) != 1 || cfg.DefaultPolicyClass != "a" {
		t.Fatalf("the file's own list again: %+v, %v", cfg.PolicyClasses, err)
	}
}

// TestConfigListValidationIsDynamos: classes that read well but break
// Dynamo's rules are refused when merged, in Dynamo's words (the codec
// reads; Config.Validate judges). Catches Merge skipping validation of the
// list keys.
func TestConfigListValidationIsDynamos(t *testing.T) {
	for line, want := range map[string]string{
		`{"op":"config","default_policy_class":"a"}`:                                                        `root profile must specify both default_policy_class and policy_classes when either is present`,
		`{"op":"config","default_policy_class":"a","policy_classes":[{"name":"a","slo_ms":1,"quantum":0}]}`: `config policy_classes[0].quantum: root policy class "a" quantum must be greater than zero`,
		`{"op":"config","worker_selection":{"instances":[{"name":"default","type":"kv"}]}}`:                 `worker_selection instance name 'default' is reserved`,
		`{"op":"config","worker_selection":{"default":"x"}}`:                                                `config worker_selection.default: worker_selection default "x" does not name a configured instance`,
		`{"op":"config","worker_selection":{"instances":[{"name":"i","type":"best"}]}}`:                     `config worker_selection.instances[0].type: "best" is not one of kv`,
		// Every config number is at most 2^53 (PROTOCOL.md §6).
		`{"op":"config","default_policy_class":"a","policy_classes":[{"name":"a","slo_ms":1,"quantum":9007199254740993}]}`:                      `config policy_classes[0].quantum: expected at most 9007199254740992`,
		`{"op":"config","default_policy_class":"a","policy_classes":[{"name":"a","slo_ms":1,"quantum":1,"prefill_busy_threshold_frac":1e308}]}`: `config policy_classes[0].prefill_busy_threshold_frac: expected at most 9007199254740992`,
	} {
		d := decode(t, line)
		if d.Err != nil {
			t.Fatalf("%s: %v", line, d.Err)
		}
		if _, err := (ConfigSource{}).Merge(d.Cmd.Config); err == nil || !strings.Contains(err.Message, want) {
			t.Errorf("%s: got %v, want %q", line, err, want)
		}
	}
}

// TestWholeConfigPrintsLists: the whole config prints the new keys where
// protocol.Config has them, lists as arrays ([] when empty), elements'
// keys in struct order, optional ones null, numbers as responses print
// them. Catches a list printed as null or dropped, keys out of Config's
// order, and a float printed with an exponent.
func TestWholeConfigPrintsLists(t *testing.T) {
	def := protocol.DefaultConfig()
	if got, want := string(appendConfig(nil, &def)), `"affinity":{"mode":"off","ttl_ms":3600000,"key":"session"},"default_policy_class":"","policy_classes":[],"worker_selection":{"default":"","prefill":"","decode":"","instances":[]},"evidence":"summary"`; !strings.Contains(got, want) {
		t.Fatalf("defaults print\n%s\nwant within it\n%s", got, want)
	}
	c := classesConfig()
	c.WorkerSelection.Instances[1].Parameters.Temperature = ptrTo(1e-6)
	got := string(appendConfig(nil, &c))
	for _, want := range []string{
		`"default_policy_class":"batch","policy_classes":[{"name":"latency","slo_ms":3000,"quantum":512,"prefill_busy_threshold":0,"prefill_busy_threshold_frac":null,"request_queue_limit_per_worker":32,"raw_isl_token_queue_limit_per_worker":null,"cached_token_queue_limit_per_worker":null},{"name":"batch",`,
		`"raw_isl_token_queue_limit_per_worker":9007199254740992,`,
		`"worker_selection":{"default":"cheap","prefill":"","decode":"","instances":[{"name":"cheap","type":"round_robin","parameters":{"temperature":null,"overlap_score_credit":null,"prefill_load_scale":null}},{"name":"warm","type":"kv","parameters":{"temperature":0.000001,"overlap_score_credit":null,"prefill_load_scale":2}}]}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("printed\n%s\nwant within it\n%s", got, want)
		}
	}
}

// TestConfigFileListErrorsNameTheLine: a config file is read by the same
// decoder, so a bad key inside a list is named with its path and the line
// it is on. Catches the line counted from the list's start, or the file's
// path losing the index.
func TestConfigFileListErrorsNameTheLine(t *testing.T) {
	file := "{\n  \"default_policy_class\": \"a\",\n  \"policy_classes\": [\n    {\"name\": \"a\", \"slo_ms\": 1, \"quantum\": 1},\n    {\"name\": \"b\",\n     \"quantm\": 1}\n  ]\n}\n"
	_, err := ConfigSource{File: []byte(file), FileName: "r.json"}.Load()
	want := `--config r.json line 6: field "policy_classes[1].quantm": is not a key of a policy class`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
}
