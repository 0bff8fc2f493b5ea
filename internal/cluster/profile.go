package cluster

import (
	"embed"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/wire"
)

// Profile is what an iteration-level worker's steps cost: a linear step
// model and the model shape that sizes its KV cache. --engine-profile FILE
// loads one (JSON, these keys); DefaultProfile is the one shipped.
type Profile struct {
	Name string `json:"name"`
	// Source says where the numbers come from, Licence under what terms.
	Source  string    `json:"source"`
	Licence string    `json:"licence,omitempty"`
	Step    StepModel `json:"step"`
	// Model is the served model's shape, which sizes a token's KV (what a
	// disaggregated cluster sends from prefill to decode).
	Model ModelShape `json:"model"`
	// Memory, when given, sizes the KV cache from the GPU's memory
	// (--worker-kv-tokens auto), as vLLM sizes it.
	Memory *Memory `json:"memory,omitempty"`
}

// ModelShape is what a token's KV takes: keys and values of every layer,
// 2 × layers × kv_heads × head_dim × dtype_bytes bytes.
type ModelShape struct {
	Layers     uint64 `json:"layers"`
	KVHeads    uint64 `json:"kv_heads"`
	HeadDim    uint64 `json:"head_dim"`
	DTypeBytes uint64 `json:"dtype_bytes"`
}

// KVBytesPerToken is the KV a token of the model takes, in bytes.
func (m ModelShape) KVBytesPerToken() uint64 {
	return 2 * m.Layers * m.KVHeads * m.HeadDim * m.DTypeBytes
}

// StepModel is a step's duration in ms:
//
//	base_ms + per_prefill_token_ms × prefill tokens + per_decode_seq_ms × decode sequences
//	        + per_kv_token_read_ms × KV tokens read
//
// where the KV tokens read are every scheduled request's context before
// the step (its cached and computed tokens).
type StepModel struct {
	BaseMS            float64 `json:"base_ms"`
	PerPrefillTokenMS float64 `json:"per_prefill_token_ms"`
	PerDecodeSeqMS    float64 `json:"per_decode_seq_ms"`
	PerKVTokenReadMS  float64 `json:"per_kv_token_read_ms"`
}

// shipped are the profiles shipped in profiles/, one file each, named as
// the profile.
//
//go:embed profiles/*.json
var shipped embed.FS

// DefaultProfileName is the profile replay runs unless told otherwise.
const DefaultProfileName = "llama-3.1-8b-instruct-h100-tp1-vllm-0.8.4"

// DefaultProfile is the shipped profile replay runs unless told otherwise.
func DefaultProfile() Profile {
	p, ok := ShippedProfile(DefaultProfileName)
	if !ok {
		panic("the default profile is not shipped")
	}
	return p
}

// ShippedProfile is the shipped profile of that name, if there is one.
func ShippedProfile(name string) (Profile, bool) {
	if strings.ContainsAny(name, "/\\") {
		return Profile{}, false
	}
	data, err := shipped.ReadFile("profiles/" + name + ".json")
	if err != nil {
		return Profile{}, false
	}
	p, err := ParseProfile(data)
	if err != nil || p.Name != name {
		panic(fmt.Sprintf("the shipped profile %s: %v (named %q)", name, err, p.Name))
	}
	return p, true
}

// ShippedProfiles are the shipped profiles' names, sorted.
func ShippedProfiles() []string {
	entries, _ := shipped.ReadDir("profiles")
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = strings.TrimSuffix(e.Name(), ".json")
	}
	return names
}

// ParseProfile reads a profile strictly: every key known and given once,
// the step model's coefficients finite and not negative, a step of some
// time. name and the four step keys are required (a coefficient of 0 must
// be written, so that a key left out is not a free term); model is
// optional, since only some runs use it (CheckModel), but given, it holds
// its four keys; so does memory (gpu_bytes at least 1, each at most 2^53;
// its source optional), read by --worker-kv-tokens auto. A missing key is named by its dotted path
// ("step.per_prefill_token_ms").
func ParseProfile(data []byte) (Profile, error) {
	var p Profile
	var rd wire.ObjectReader
	var given []string // the keys met, dotted
	coefficient := func(v *wire.Value, to *float64) error {
		x, err := v.Float()
		if err != nil {
			return err
		}
		if !(x >= 0 && x <= 1e6) {
			return fmt.Errorf("expected a number of ms from 0 to 1e6, got %v", x)
		}
		*to = x
		return nil
	}
	err := rd.Read(data, func(key string, v *wire.Value) error {
		given = append(given, key)
		var err error
		switch key {
		case "name":
			p.Name, err = v.Str()
		case "source":
			p.Source, err = v.Str()
		case "licence":
			p.Licence, err = v.Str()
		case "step":
			// A nested object: read through the raw text (Raw follows
			// nesting on a stack, so a deep value costs its length).
			raw, rerr := v.Raw()
			if rerr != nil {
				return rerr
			}
			var inner wire.ObjectReader
			return inner.Read(raw, func(key string, v *wire.Value) error {
				given = append(given, "step."+key)
				switch key {
				case "base_ms":
					return coefficient(v, &p.Step.BaseMS)
				case "per_prefill_token_ms":
					return coefficient(v, &p.Step.PerPrefillTokenMS)
				case "per_decode_seq_ms":
					return coefficient(v, &p.Step.PerDecodeSeqMS)
				case "per_kv_token_read_ms":
					return coefficient(v, &p.Step.PerKVTokenReadMS)
				}
				return fmt.Errorf("is not a step key (%s)", strings.Join(stepKeys, ", "))
			})
		case "model":
			raw, rerr := v.Raw()
			if rerr != nil {
				return rerr
			}
			var inner wire.ObjectReader
			return inner.Read(raw, func(key string, v *wire.Value) error {
				given = append(given, "model."+key)
				var at *uint64
				switch key {
				case "layers":
					at = &p.Model.Layers
				case "kv_heads":
					at = &p.Model.KVHeads
				case "head_dim":
					at = &p.Model.HeadDim
				case "dtype_bytes":
					at = &p.Model.DTypeBytes
				default:
					return fmt.Errorf("is not a model key (%s)", strings.Join(modelKeys, ", "))
				}
				x, err := v.U64()
				if err != nil {
					return err
				}
				if x < 1 || x > 1<<16 {
					return fmt.Errorf("expected 1 to 65536, got %d", x)
				}
				*at = x
				return nil
			})
		case "memory":
			raw, rerr := v.Raw()
			if rerr != nil {
				return rerr
			}
			p.Memory = &Memory{}
			var inner wire.ObjectReader
			return inner.Read(raw, func(key string, v *wire.Value) error {
				given = append(given, "memory."+key)
				var at *uint64
				switch key {
				case "source":
					var err error
					p.Memory.Source, err = v.Str()
					return err
				case "gpu_bytes":
					at = &p.Memory.GPUBytes
				case "weight_bytes":
					at = &p.Memory.WeightBytes
				case "activation_bytes":
					at = &p.Memory.ActivationBytes
				case "non_torch_bytes":
					at = &p.Memory.NonTorchBytes
				default:
					return fmt.Errorf("is not a memory key (%s)", strings.Join(memoryKeys, ", "))
				}
				x, err := v.U64()
				if err != nil {
					return err
				}
				lo := uint64(0) // nothing taken is a measurement; a GPU of no memory is not
				if key == "gpu_bytes" {
					lo = 1
				}
				if x < lo || x > protocol.MaxNumber {
					return fmt.Errorf("expected %d to 2^53 bytes, got %d", lo, x)
				}
				*at = x
				return nil
			})
		default:
			return fmt.Errorf("is not a profile key (name, source, licence, step, model, memory)")
		}
		return err
	})
	if err != nil {
		return p, err
	}
	required := []string{"name", "step"}
	if slices.Contains(given, "step") {
		required = append(required[:1], dotted("step", stepKeys)...)
	}
	if slices.Contains(given, "model") {
		required = append(required, dotted("model", modelKeys)...)
	}
	if slices.Contains(given, "memory") {
		required = append(required, dotted("memory", memoryKeys)...)
	}
	var missing []string
	for _, k := range required {
		if !slices.Contains(given, k) {
			missing = append(missing, k)
		}
	}
	if err := requiredErr(missing); err != nil {
		return p, err
	}
	if p.Step.BaseMS+p.Step.PerPrefillTokenMS+p.Step.PerDecodeSeqMS == 0 {
		return p, fmt.Errorf("field \"step\": a step must take some time: give base_ms, per_prefill_token_ms or per_decode_seq_ms above 0")
	}
	return p, nil
}

// The keys of a profile's step, model and memory.
var (
	stepKeys   = []string{"base_ms", "per_prefill_token_ms", "per_decode_seq_ms", "per_kv_token_read_ms"}
	modelKeys  = []string{"layers", "kv_heads", "head_dim", "dtype_bytes"}
	memoryKeys = []string{"gpu_bytes", "weight_bytes", "activation_bytes", "non_torch_bytes"}
)

// CheckModel says which model keys the profile lacks, for a run that sizes
// KV by them (disaggregated serving's transfer): ParseProfile takes a
// profile without model, as most runs do not read it. A key written is
// at least 1, so a 0 is one left out.
func (p Profile) CheckModel() error {
	var missing []string
	for i, x := range []uint64{p.Model.Layers, p.Model.KVHeads, p.Model.HeadDim, p.Model.DTypeBytes} {
		if x == 0 {
			missing = append(missing, "model."+modelKeys[i])
		}
	}
	return requiredErr(missing)
}

// dotted is each of keys under group: "step.base_ms".
func dotted(group string, keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = group + "." + k
	}
	return out
}

// requiredErr names the keys that are missing, or is nil for none.
func requiredErr(missing []string) error {
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("field %q: required", missing[0])
	}
	quoted := make([]string, len(missing))
	for i, k := range missing {
		quoted[i] = strconv.Quote(k)
	}
	return fmt.Errorf("fields %s: required", strings.Join(quoted, ", "))
}
