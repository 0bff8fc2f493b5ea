// Package protocol is the contract of offline-router as data: the commands,
// KV events, responses, error codes and config of docs/PROTOCOL.md, and the
// rules a command must keep whatever built it. Like raft's raftpb it holds
// no behaviour beyond those rules: the codec (internal/wire) reads and
// writes these values, the engine steps on them.
package protocol

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Op names a command.
type Op string

// The commands of PROTOCOL.md §4.
const (
	OpWorkerReady       Op = "worker_ready"
	OpWorkerDraining    Op = "worker_draining"
	OpWorkerRemoved     Op = "worker_removed"
	OpTopologySettled   Op = "topology_settled"
	OpPlace             Op = "place"
	OpObserve           Op = "observe"
	OpDispatchCommitted Op = "dispatch_committed"
	OpDispatchAborted   Op = "dispatch_aborted"
	OpPrefillCompleted  Op = "prefill_completed"
	OpRequestTerminal   Op = "request_terminal"
	OpCancelPending     Op = "cancel_pending"
	OpAdvanceClock      Op = "advance_clock"
	OpInspect           Op = "inspect"
	// OpConfig sets the router's config, as the first command of a stream.
	OpConfig Op = "config"
)

// Role is the serving role of a worker and of the requests it takes.
type Role string

// Roles.
const (
	RoleAggregated Role = "aggregated"
	RolePrefill    Role = "prefill"
	RoleDecode     Role = "decode"
)

// Valid reports whether r is one of the roles (the empty role is not).
func (r Role) Valid() bool {
	return r == RoleAggregated || r == RolePrefill || r == RoleDecode
}

// Command is one command. It is a union of every op's fields; Validate
// checks that only the fields of Op are set and that the required ones are.
// Pointers, nil slices and empty strings mean "absent".
type Command struct {
	Op    Op
	ID    []byte   // raw JSON of id (a string or a number), echoed verbatim
	NowMS *float64 // finite, >= 0

	WorkerID            *uint64
	Role                Role
	DPSize              *uint32
	DPStart             *uint32
	TotalKVBlocks       *uint64
	MaxNumBatchedTokens *uint64
	MaxNumSeqs          *uint64
	DeviceType          DeviceType // worker_ready: the worker's device, "" when not said (an accelerator)
	// LoRAAdapters and MaxGPULoRACount are worker_ready's adapters: those
	// the worker has loaded, and how many it can hold at once (Dynamo's
	// runtime config max_gpu_lora_count, vLLM's --max-loras).
	LoRAAdapters    []string
	MaxGPULoRACount *uint32

	Events []KVEvent

	RequestID       string
	InputTokens     *uint64
	OutputTokens    *uint64
	Tokens          []uint32
	BlockHashes     []LocalBlockHash
	SequenceHashes  []SequenceHash
	SessionID       *string
	ParentSessionID *string
	Priority        *float64
	StrictPriority  *int64
	PolicyClass     *string
	AllowedWorkers  []uint64
	DPRank          *uint32
	// RouterConfigOverride is Dynamo's per-request selector override.
	RouterConfigOverride *RouterConfigOverride
	// LoRAName and CacheNamespace salt the hashes of the place's tokens,
	// as Dynamo's block-hash seed takes them.
	LoRAName       *string
	CacheNamespace *string

	// Config is what op config sets (its keys sit at the top level of the
	// line, beside op); no other op has it.
	Config *ConfigUpdate
}

// ConfigUpdate is what a config command sets: the config its keys give
// over the defaults, and those keys, dotted ("affinity.mode"), in the
// order of Config's fields.
type ConfigUpdate struct {
	Config Config
	Keys   []string
}

// Field is one field of a command, other than op.
type Field uint8

// The fields, in the order Validate reports them.
const (
	FieldID Field = iota
	FieldNowMS
	FieldWorkerID
	FieldRole
	FieldDPSize
	FieldDPStart
	FieldTotalKVBlocks
	FieldMaxNumBatchedTokens
	FieldMaxNumSeqs
	FieldEvents
	FieldRequestID
	FieldInputTokens
	FieldOutputTokens
	FieldTokens
	FieldBlockHashes
	FieldSequenceHashes
	FieldSessionID
	FieldParentSessionID
	FieldPriority
	FieldStrictPriority
	FieldPolicyClass
	FieldAllowedWorkers
	FieldDPRank
	FieldDeviceType
	FieldRouterConfigOverride
	FieldLoRAName
	FieldCacheNamespace
	FieldLoRAAdapters
	FieldMaxGPULoRACount
	NumFields
)

// FieldNames are the fields' JSON keys.
var FieldNames = [NumFields]string{
	FieldID: "id", FieldNowMS: "now_ms", FieldWorkerID: "worker_id", FieldRole: "role", FieldDPSize: "dp_size",
	FieldDPStart: "dp_start", FieldTotalKVBlocks: "total_kv_blocks",
	FieldMaxNumBatchedTokens: "max_num_batched_tokens", FieldMaxNumSeqs: "max_num_seqs",
	FieldEvents: "events", FieldRequestID: "request_id", FieldInputTokens: "input_tokens",
	FieldOutputTokens: "output_tokens", FieldTokens: "tokens", FieldBlockHashes: "block_hashes",
	FieldSequenceHashes: "sequence_hashes", FieldSessionID: "session_id",
	FieldParentSessionID: "parent_session_id", FieldPriority: "priority",
	FieldStrictPriority: "strict_priority", FieldPolicyClass: "policy_class", FieldAllowedWorkers: "allowed_workers", FieldDPRank: "dp_rank",
	FieldDeviceType: "device_type", FieldRouterConfigOverride: "router_config_override",
	FieldLoRAName: "lora_name", FieldCacheNamespace: "cache_namespace",
	FieldLoRAAdapters: "lora_adapters", FieldMaxGPULoRACount: "max_gpu_lora_count",
}

// FieldSet is a set of fields.
type FieldSet uint32

// Has reports whether f is in the set.
func (s FieldSet) Has(f Field) bool { return s&(1<<f) != 0 }

func set(fs ...Field) FieldSet {
	var s FieldSet
	for _, f := range fs {
		s |= 1 << f
	}
	return s
}

// Fields is the set of fields c holds.
func (c *Command) Fields() FieldSet {
	var s FieldSet
	add := func(f Field, present bool) {
		if present {
			s |= 1 << f
		}
	}
	add(FieldID, c.ID != nil)
	add(FieldNowMS, c.NowMS != nil)
	add(FieldWorkerID, c.WorkerID != nil)
	add(FieldRole, c.Role != "")
	add(FieldDPSize, c.DPSize != nil)
	add(FieldDPStart, c.DPStart != nil)
	add(FieldTotalKVBlocks, c.TotalKVBlocks != nil)
	add(FieldMaxNumBatchedTokens, c.MaxNumBatchedTokens != nil)
	add(FieldMaxNumSeqs, c.MaxNumSeqs != nil)
	add(FieldEvents, c.Events != nil)
	add(FieldRequestID, c.RequestID != "")
	add(FieldInputTokens, c.InputTokens != nil)
	add(FieldOutputTokens, c.OutputTokens != nil)
	add(FieldTokens, c.Tokens != nil)
	add(FieldBlockHashes, c.BlockHashes != nil)
	add(FieldSequenceHashes, c.SequenceHashes != nil)
	add(FieldSessionID, c.SessionID != nil)
	add(FieldParentSessionID, c.ParentSessionID != nil)
	add(FieldPriority, c.Priority != nil)
	add(FieldStrictPriority, c.StrictPriority != nil)
	add(FieldPolicyClass, c.PolicyClass != nil)
	add(FieldAllowedWorkers, c.AllowedWorkers != nil)
	add(FieldDPRank, c.DPRank != nil)
	add(FieldDeviceType, c.DeviceType != "")
	add(FieldRouterConfigOverride, c.RouterConfigOverride != nil)
	add(FieldLoRAName, c.LoRAName != nil)
	add(FieldCacheNamespace, c.CacheNamespace != nil)
	add(FieldLoRAAdapters, c.LoRAAdapters != nil)
	add(FieldMaxGPULoRACount, c.MaxGPULoRACount != nil)
	return s
}

// opSpec lists the fields an op takes beyond op, id and now_ms.
type opSpec struct{ allowed, required FieldSet }

// specOf is the one table of which fields each op takes; the decoder and
// Validate both read it. A switch, not a map: every command looks its op
// up, twice (decoded, then applied), and a map's string hash was most of
// Validate's cost.
func specOf(op Op) (opSpec, bool) {
	switch op {
	case OpWorkerReady:
		return opSpec{
			allowed: set(FieldWorkerID, FieldRole, FieldDPSize, FieldDPStart, FieldTotalKVBlocks,
				FieldMaxNumBatchedTokens, FieldMaxNumSeqs, FieldDeviceType, FieldLoRAAdapters, FieldMaxGPULoRACount),
			required: set(FieldWorkerID),
		}, true
	case OpWorkerDraining, OpWorkerRemoved:
		return opSpec{allowed: set(FieldWorkerID), required: set(FieldWorkerID)}, true
	case OpPlace:
		return opSpec{
			allowed: set(FieldRequestID, FieldInputTokens, FieldOutputTokens, FieldTokens, FieldBlockHashes,
				FieldSequenceHashes, FieldRole, FieldSessionID, FieldParentSessionID, FieldPriority,
				FieldStrictPriority, FieldPolicyClass, FieldAllowedWorkers, FieldWorkerID, FieldDPRank, FieldRouterConfigOverride,
				FieldLoRAName, FieldCacheNamespace),
			required: set(FieldRequestID),
		}, true
	case OpObserve:
		return opSpec{allowed: set(FieldEvents), required: set(FieldEvents)}, true
	case OpDispatchCommitted, OpDispatchAborted, OpPrefillCompleted, OpRequestTerminal, OpCancelPending:
		return opSpec{allowed: set(FieldRequestID), required: set(FieldRequestID)}, true
	case OpAdvanceClock:
		return opSpec{required: set(FieldNowMS)}, true
	case OpTopologySettled, OpInspect, OpConfig:
		return opSpec{}, true
	}
	return opSpec{}, false
}

// OpKnown reports whether op is one of the protocol's.
func OpKnown(op Op) bool {
	_, ok := specOf(op)
	return ok
}

// commonFields are the fields every op takes besides its own: id, and
// now_ms but on a config command, which comes before the clock matters.
func commonFields(op Op) FieldSet {
	if op == OpConfig {
		return set(FieldID)
	}
	return set(FieldID, FieldNowMS)
}

// Takes reports whether op has field f (false for an unknown op).
func Takes(op Op, f Field) bool {
	spec, ok := specOf(op)
	return ok && (spec.allowed | commonFields(op)).Has(f)
}

// ops are every op, for messages.
var ops = []Op{OpWorkerReady, OpWorkerDraining, OpWorkerRemoved, OpTopologySettled, OpPlace, OpObserve,
	OpDispatchCommitted, OpDispatchAborted, OpPrefillCompleted, OpRequestTerminal, OpCancelPending,
	OpAdvanceClock, OpInspect, OpConfig}

// OpNames lists the ops in a stable order, for messages.
func OpNames() []string {
	names := make([]string, 0, len(ops))
	for _, op := range ops {
		names = append(names, string(op))
	}
	slices.Sort(names)
	return names
}

// MaxRequestIDBytes bounds request_id.
const MaxRequestIDBytes = 256

// MaxNumber bounds the size of every time (now_ms, in ms), priority and
// config number: 2^53, past which float64 skips integers. Within it, every
// sum and product the router forms stays finite, so every number it prints
// is a JSON number.
const MaxNumber = 1 << 53

// MaxDPSize bounds a worker's dp_size: data-parallel groups are a few to a
// few hundred ranks, and each rank costs the router memory and a candidate.
const MaxDPSize = 1024

// MaxRanks bounds the ranks of all workers that are up at once.
const MaxRanks = 1 << 16

// MaxTokens bounds input_tokens and output_tokens: 2^40, far past any
// prompt, so that the router's sums of them over millions of requests stay
// exact in u64 and in float64 (2^53).
const MaxTokens = 1 << 40

// badValues reports whether a field of has fails CheckValue.
func (c *Command) badValues(has FieldSet) bool {
	for _, f := range [...]Field{FieldNowMS, FieldRole, FieldDPSize, FieldRequestID, FieldInputTokens, FieldOutputTokens, FieldPriority,
		FieldDeviceType, FieldRouterConfigOverride, FieldLoRAName, FieldCacheNamespace, FieldLoRAAdapters, FieldMaxGPULoRACount} {
		if has.Has(f) && CheckValue(c, f) != "" {
			return true
		}
	}
	return false
}

// CheckValue checks the value of one field that c holds, apart from the
// other fields, and returns what is wrong with it ("" when nothing is). The
// decoder calls it as it reads each field, so that its error names the
// first bad field of the line; Validate calls it for every field.
func CheckValue(c *Command, f Field) string {
	switch f {
	case FieldNowMS:
		if v := *c.NowMS; !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Sprintf("expected a time >= 0, got %v", v)
		} else if v > MaxNumber {
			return fmt.Sprintf("expected a time of at most %d ms, got %v", uint64(MaxNumber), v)
		}
	case FieldRole:
		if !c.Role.Valid() {
			return fmt.Sprintf("expected one of aggregated, prefill, decode, got %q", c.Role)
		}
	case FieldDPSize:
		if *c.DPSize == 0 || *c.DPSize > MaxDPSize {
			return fmt.Sprintf("expected 1 to %d ranks, got %d", MaxDPSize, *c.DPSize)
		}
	case FieldRequestID:
		if c.RequestID == "" || len(c.RequestID) > MaxRequestIDBytes {
			return fmt.Sprintf("expected a non-empty string of at most %d bytes, got %d bytes", MaxRequestIDBytes, len(c.RequestID))
		}
	case FieldInputTokens, FieldOutputTokens:
		v := c.InputTokens
		if f == FieldOutputTokens {
			v = c.OutputTokens
		}
		if *v > MaxTokens {
			return fmt.Sprintf("expected at most %d tokens, got %d", uint64(MaxTokens), *v)
		}
	case FieldPriority:
		if v := *c.Priority; math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Sprintf("expected a finite number, got %v", v)
		} else if math.Abs(v) > MaxNumber {
			return fmt.Sprintf("expected a number from -%d to %d, got %v", uint64(MaxNumber), uint64(MaxNumber), v)
		}
	case FieldDeviceType:
		if !c.DeviceType.Valid() {
			return fmt.Sprintf("expected %q or %q (Dynamo's device types), got %q", DeviceCPU, DeviceCUDA, c.DeviceType)
		}
	case FieldRouterConfigOverride:
		if key, msg := c.RouterConfigOverride.Check(); msg != "" {
			return key + ": " + msg
		}
	case FieldLoRAName, FieldCacheNamespace:
		return CheckSaltName(*c.saltName(f))
	case FieldLoRAAdapters:
		return checkAdapters(c.LoRAAdapters)
	case FieldMaxGPULoRACount:
		if *c.MaxGPULoRACount > MaxLoRACount {
			return fmt.Sprintf("expected at most %d adapters, got %d", MaxLoRACount, *c.MaxGPULoRACount)
		}
	}
	return ""
}

// MaxLoRANameBytes and MaxLoRACount bound what the router keeps of a
// worker's adapters: vLLM's --max-loras is a few to a few dozen, and names
// are model paths.
const (
	MaxLoRANameBytes = 1024
	MaxLoRACount     = 1024
)

// CheckSaltName checks an adapter name or a cache namespace: what salts a
// block hash, kept by the router for an adapter.
func CheckSaltName(s string) string {
	if len(s) > MaxLoRANameBytes {
		return fmt.Sprintf("expected a name of at most %d bytes, got %d bytes", MaxLoRANameBytes, len(s))
	}
	return ""
}

func (c *Command) saltName(f Field) *string {
	if f == FieldLoRAName {
		return c.LoRAName
	}
	return c.CacheNamespace
}

// DefaultLoRACapacity is a worker's adapter capacity when it lists adapters
// but not max_gpu_lora_count: Dynamo's model manager assumes 4.
const DefaultLoRACapacity = 4

// checkAdapters checks a worker's loaded adapters apart from its capacity.
func checkAdapters(names []string) string {
	if len(names) > MaxLoRACount {
		return fmt.Sprintf("expected at most %d adapters, got %d", MaxLoRACount, len(names))
	}
	seen := make(map[string]bool, len(names))
	for i, n := range names {
		switch {
		case n == "" || len(n) > MaxLoRANameBytes:
			return fmt.Sprintf("entry %d: expected a non-empty adapter name of at most %d bytes, got %d bytes", i, MaxLoRANameBytes, len(n))
		case seen[n]:
			return fmt.Sprintf("entry %d: adapter %q is listed twice", i, n)
		}
		seen[n] = true
	}
	return ""
}

// LoRACapacity is how many adapters a worker_ready says its worker can
// hold: max_gpu_lora_count, else DefaultLoRACapacity when it lists any, else
// 0 (the router knows nothing of its adapters and loads none there).
func (c *Command) LoRACapacity() uint32 {
	switch {
	case c.MaxGPULoRACount != nil:
		return *c.MaxGPULoRACount
	case len(c.LoRAAdapters) > 0:
		return DefaultLoRACapacity
	}
	return 0
}

// Validate checks c against its op and the rules between fields that need
// no engine state. A command that passes is safe to apply.
func (c *Command) Validate() *Error {
	spec, ok := specOf(c.Op)
	if !ok {
		return Errorf(CodeUnknownOp, "op %q is not one of %s", c.Op, strings.Join(OpNames(), ", "))
	}
	if (c.Op == OpConfig) != (c.Config != nil) {
		return Errorf(CodeInvalidField, "op %q and config keys go together: a config command sets them, no other command may", OpConfig)
	}
	has, takes := c.Fields(), spec.allowed|commonFields(c.Op)
	// The walk over every field, in order, runs only when one is wrong, to
	// name the first.
	if has&^takes != 0 || spec.required&^has != 0 || c.badValues(has) {
		for f := range NumFields {
			if has.Has(f) && !takes.Has(f) {
				return Errorf(CodeUnknownField, "field %q: is not a field of op %q", FieldNames[f], c.Op)
			}
			if spec.required.Has(f) && !has.Has(f) {
				return Errorf(CodeInvalidField, "field %q: required by op %q", FieldNames[f], c.Op)
			}
			if has.Has(f) && f == FieldRouterConfigOverride {
				if key, msg := c.RouterConfigOverride.Check(); msg != "" {
					return Errorf(CodeInvalidField, "field %q: %s", FieldNames[f]+"."+key, msg)
				}
			} else if has.Has(f) {
				if msg := CheckValue(c, f); msg != "" {
					return Errorf(CodeInvalidField, "field %q: %s", FieldNames[f], msg)
				}
			}
		}
	}
	for i := range c.Events {
		if path, msg := c.Events[i].check(); msg != "" {
			return Errorf(CodeInvalidField, "field \"events[%d].%s\": %s", i, path, msg)
		}
	}
	if n := uint32(len(c.LoRAAdapters)); n > c.LoRACapacity() {
		why := "its max_gpu_lora_count"
		if c.MaxGPULoRACount == nil {
			why = "Dynamo's default, with no max_gpu_lora_count given"
		}
		return Errorf(CodeInvalidField, `field "lora_adapters": %d listed, but the worker holds at most %d (%s)`, n, c.LoRACapacity(), why)
	}
	if c.Op != OpPlace {
		return nil
	}
	if c.Tokens != nil && c.BlockHashes != nil {
		return Errorf(CodeInvalidField, `field "block_hashes": give tokens or block_hashes, not both`)
	}
	if c.SequenceHashes != nil {
		if c.BlockHashes == nil {
			return Errorf(CodeInvalidField, `field "sequence_hashes": only goes with block_hashes`)
		}
		if len(c.SequenceHashes) != len(c.BlockHashes) {
			return Errorf(CodeInvalidField, `field "sequence_hashes": expected %d hashes (as many as block_hashes), got %d`, len(c.BlockHashes), len(c.SequenceHashes))
		}
	}
	if c.DPRank != nil && c.WorkerID == nil {
		return Errorf(CodeInvalidField, `field "dp_rank": pins a rank of worker_id, which is missing`)
	}
	if c.InputTokens == nil && c.Tokens == nil && c.BlockHashes != nil {
		return Errorf(CodeInvalidField, `field "input_tokens": required with block_hashes (the prompt length is not implied by them)`)
	}
	if c.InputTokens == nil && c.Tokens == nil {
		return Errorf(CodeInvalidField, `field "input_tokens": required: give the prompt as tokens, or its length as input_tokens`)
	}
	if c.InputTokens != nil && c.Tokens != nil && *c.InputTokens < uint64(len(c.Tokens)) {
		return Errorf(CodeInvalidField, `field "input_tokens": %d is shorter than tokens (%d)`, *c.InputTokens, len(c.Tokens))
	}
	return nil
}

// ISL is the request's input length in tokens.
func (c *Command) ISL() uint64 {
	if c.InputTokens != nil {
		return *c.InputTokens
	}
	return uint64(len(c.Tokens))
}
