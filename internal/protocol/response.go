package protocol

import (
	"math"
	"strconv"
)

// Num is a number printed the same way every time: shortest round-trip
// decimal, never an exponent, never -0.
type Num float64

// MarshalJSON implements json.Marshaler.
func (n Num) MarshalJSON() ([]byte, error) { return AppendNum(nil, float64(n)), nil }

// AppendNum appends v as Num prints it. The bounds on what the router takes
// in (MaxNumber, MaxTokens) keep every number it computes finite; were one
// not, it would still print as a JSON number: an infinity as the largest
// finite float64 of its sign, NaN as 0.
func AppendNum(b []byte, v float64) []byte {
	switch {
	case v == 0 || math.IsNaN(v):
		return append(b, '0')
	case math.IsInf(v, 0):
		v = math.Copysign(math.MaxFloat64, v)
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// RawJSON is a JSON value echoed verbatim.
type RawJSON []byte

// MarshalJSON implements json.Marshaler.
func (r RawJSON) MarshalJSON() ([]byte, error) { return r, nil }

// Response is one response line.
type Response struct {
	Seq          uint64           `json:"seq"`
	ID           RawJSON          `json:"id,omitempty"`
	Op           *string          `json:"op"`
	OK           bool             `json:"ok"`
	NowMS        Num              `json:"now_ms"`
	Placements   []Placement      `json:"placements"`
	Cancelled    *bool            `json:"cancelled,omitempty"`
	Queued       []string         `json:"queued,omitempty"`
	Rejected     []Rejection      `json:"rejected,omitempty"`
	Evidence     *CommandEvidence `json:"evidence,omitempty"`
	State        *State           `json:"state,omitempty"`
	Config       *Config          `json:"config,omitempty"`   // the effective config, in a config command's response
	Versions     *Versions        `json:"versions,omitempty"` // beside Config: what the host is talking to
	Error        *Error           `json:"error,omitempty"`
	PendingCount int              `json:"pending_count"`
	NextWakeupMS *Num             `json:"next_wakeup_ms"`
}

// Versions are the protocol's and the replay report's versions, so a host
// can tell when behaviour changed.
type Versions struct {
	Protocol     int `json:"protocol"`
	ReportSchema int `json:"report_schema"`
}

// Configured makes r the answer to a config command that set cfg.
func (r *Response) Configured(cfg *Config) {
	r.OK, r.Config = true, cfg
	r.Versions = &Versions{Protocol: Version, ReportSchema: ReportSchemaVersion}
}

// Placement is one request placed on a rank.
type Placement struct {
	RequestID                  string `json:"request_id"`
	WorkerID                   uint64 `json:"worker_id"`
	DPRank                     uint32 `json:"dp_rank"`
	Role                       Role   `json:"role"`
	OverlapBlocks              uint64 `json:"overlap_blocks"`
	HostOverlapBlocks          uint64 `json:"host_overlap_blocks,omitempty"`
	DiskOverlapBlocks          uint64 `json:"disk_overlap_blocks,omitempty"`
	BestAvailableOverlapBlocks uint64 `json:"best_available_overlap_blocks"`
	ISLBlocks                  uint64 `json:"isl_blocks"`
	CachedTokens               uint64 `json:"cached_tokens"`
	PrefillTokens              uint64 `json:"prefill_tokens"`
	QueuedMS                   Num    `json:"queued_ms"`
	Reason                     string `json:"reason"`
	Binding                    string `json:"binding"`
	// LoRALoad is what the placement did to load its adapter on the
	// worker ("" when it asks for none, the worker held it, or the router
	// knows nothing of the worker's adapters), and LoRAEvicted the adapter
	// it unloaded to make room.
	LoRALoad    string             `json:"lora_load,omitempty"`
	LoRAEvicted string             `json:"lora_evicted,omitempty"`
	Evidence    *PlacementEvidence `json:"evidence,omitempty"`
}

// Adapter loads, as a placement's lora_load names them.
const (
	LoRALoaded       = "loaded"        // into a free slot
	LoRAEvicted      = "evicted"       // in place of an idle adapter, lora_evicted
	LoRAOverCapacity = "over_capacity" // every slot busy: held past capacity until idle
)

// Placement reasons.
const (
	ReasonKV            = "kv"
	ReasonAffinity      = "affinity"
	ReasonPinned        = "pinned"
	ReasonOnlyCandidate = "only_candidate"
)

// PlacementEvidence is why a rank was chosen: the summary always, the
// per-candidate detail with evidence "full".
type PlacementEvidence struct {
	Candidates   int              `json:"candidates"`
	Ties         int              `json:"ties"`
	SelectedCost Num              `json:"selected_cost"`
	BestCost     Num              `json:"best_cost"`
	Filtered     *FilterCounts    `json:"filtered,omitempty"`
	CandidateSet []CandidateScore `json:"candidate_set,omitempty"`
	FilteredSet  []FilteredRank   `json:"filtered_set,omitempty"`
}

// FilterCounts counts the ranks dropped before costing, per reason.
type FilterCounts struct {
	Affinity   int `json:"affinity,omitempty"`
	NotAllowed int `json:"not_allowed,omitempty"`
	NotPinned  int `json:"not_pinned,omitempty"`
	Busy       int `json:"busy,omitempty"`
	LoRA       int `json:"lora,omitempty"`
}

// Filter reasons, as FilteredRank names them.
const (
	FilterAffinity   = "affinity" // hard affinity: not the bound rank
	FilterNotAllowed = "not_allowed"
	FilterNotPinned  = "not_pinned"
	FilterBusy       = "busy"
	FilterLoRA       = "lora" // a worker that fits the request's adapter less well than another
)

// CandidateScore is one costed candidate.
type CandidateScore struct {
	WorkerID      uint64 `json:"worker_id"`
	DPRank        uint32 `json:"dp_rank"`
	OverlapBlocks uint64 `json:"overlap_blocks"`
	// HostBlocks and DiskBlocks are its lower tiers' blocks past its
	// device prefix (disk and external together), when any.
	HostBlocks    uint64 `json:"host_overlap_blocks,omitempty"`
	DiskBlocks    uint64 `json:"disk_overlap_blocks,omitempty"`
	PrefillBlocks Num    `json:"prefill_blocks"`
	DecodeBlocks  uint64 `json:"decode_blocks"`
	Cost          Num    `json:"cost"`
	Probability   Num    `json:"probability"`
}

// FilteredRank is a rank dropped before costing.
type FilteredRank struct {
	WorkerID uint64 `json:"worker_id"`
	DPRank   uint32 `json:"dp_rank"`
	Reason   string `json:"reason"`
}

// Rejection is a request dropped without a placement.
type Rejection struct {
	RequestID string `json:"request_id"`
	Code      Code   `json:"code"`
	Message   string `json:"message"`
}

// CommandEvidence is what a command did besides placing.
type CommandEvidence struct {
	EventsApplied *int           `json:"events_applied,omitempty"`
	EventsIgnored int            `json:"events_ignored,omitempty"`
	EventsSkipped []SkippedEvent `json:"events_skipped,omitempty"`
	// EventKeysIgnored counts, by path inside an event, the keys no event
	// struct has, which Dynamo's deserializer skips; sorted by key.
	EventKeysIgnored []IgnoredKey `json:"event_keys_ignored,omitempty"`
	// Events applied whose event_id did not follow the last one applied on
	// their rank: past it by more than one, or not past it.
	EventIDGaps       []EventIDNote `json:"event_id_gaps,omitempty"`
	EventIDRepeats    []EventIDNote `json:"event_id_repeats,omitempty"`
	BlocksDropped     int           `json:"blocks_dropped,omitempty"`
	ApproxBlocksAdded int           `json:"approx_blocks_added,omitempty"`
	ApproxExpired     int           `json:"approx_blocks_expired,omitempty"`
	RequestsOrphaned  []string      `json:"requests_orphaned,omitempty"`
	BindingsExpired   []BindingRef  `json:"bindings_expired,omitempty"`
	// BindingsInvalidated lists bindings whose worker drained or went away.
	BindingsInvalidated []BindingRef `json:"bindings_invalidated,omitempty"`
}

// Empty reports whether there is nothing to say.
func (e *CommandEvidence) Empty() bool {
	return e.EventsApplied == nil && e.EventsIgnored == 0 && len(e.EventsSkipped) == 0 && len(e.EventKeysIgnored) == 0 &&
		len(e.EventIDGaps) == 0 && len(e.EventIDRepeats) == 0 &&
		e.BlocksDropped == 0 && e.ApproxBlocksAdded == 0 && e.ApproxExpired == 0 && len(e.RequestsOrphaned) == 0 &&
		len(e.BindingsExpired) == 0 && len(e.BindingsInvalidated) == 0
}

// IgnoredKey is a key skipped inside KV events, and how often.
type IgnoredKey struct {
	Key   string `json:"key"`
	Count int    `json:"count"`
}

// EventRef names one KV event of an observe: its place in the list, and
// the rank and id it carried.
type EventRef struct {
	Index    int    `json:"index"`
	WorkerID uint64 `json:"worker_id"`
	DPRank   uint32 `json:"dp_rank"`
	EventID  uint64 `json:"event_id"`
}

// SkippedEvent is a KV event that was not applied, and why.
type SkippedEvent struct {
	EventRef
	Reason string `json:"reason"`
}

// EventIDNote is an applied event whose event_id did not follow the last
// one applied on its rank.
type EventIDNote struct {
	EventRef
	LastEventID uint64 `json:"last_event_id"`
}

// Event skip reasons.
const (
	SkipUnknownParent = "unknown_parent"
	SkipUnknownWorker = "unknown_worker"
	SkipRemovedWorker = "removed_worker"
	SkipUnknownRank   = "unknown_dp_rank"
	SkipStaleEventID  = "stale_event_id"
	// A store naming its parent among its blocks (Dynamo's
	// InvalidBlockSequence).
	SkipInvalidBlockSequence = "invalid_block_sequence"
	// An engine medium Dynamo does not map to a tier (StorageTier::
	// from_kv_medium), which it drops before the event takes an id.
	SkipUnknownMedium = "unknown_medium"
)

// State is the read-only snapshot that inspect returns.
type State struct {
	Workers     []WorkerState  `json:"workers"`
	IndexNodes  int            `json:"index_nodes"`
	IndexBlocks int            `json:"index_blocks"`
	Requests    []RequestState `json:"requests"`
	Queue       []QueuedState  `json:"queue"`
	Bindings    []BindingState `json:"bindings"`
	RandomDraws uint64         `json:"random_draws"`
	// RoundRobinNext is the round_robin policy's counter.
	RoundRobinNext uint64 `json:"round_robin_next,omitempty"`
}

// BindingState is one session binding, in (role, key) order.
type BindingState struct {
	Role        Role     `json:"role"`
	Key         string   `json:"key"`
	State       string   `json:"state"`
	WorkerID    *uint64  `json:"worker_id"`
	DPRank      *uint32  `json:"dp_rank"`
	Leases      int      `json:"leases"`
	ExpiresAtMS *Num     `json:"expires_at_ms"`
	Initializer string   `json:"initializer,omitempty"`
	Waiters     []string `json:"waiters,omitempty"`
}

// BindingRef names a binding in command evidence.
type BindingRef struct {
	Role Role   `json:"role"`
	Key  string `json:"key"`
}

// WorkerState is one worker in a snapshot.
type WorkerState struct {
	WorkerID            uint64     `json:"worker_id"`
	Status              string     `json:"status"`
	Role                Role       `json:"role"`
	TotalKVBlocks       *uint64    `json:"total_kv_blocks"`
	MaxNumBatchedTokens *uint64    `json:"max_num_batched_tokens"`
	MaxNumSeqs          *uint64    `json:"max_num_seqs"`
	DeviceType          DeviceType `json:"device_type,omitempty"` // when worker_ready gave it
	// MaxGPULoRACount and LoRAAdapters are its adapter capacity and the
	// adapters it holds, when the router knows them.
	MaxGPULoRACount uint32          `json:"max_gpu_lora_count,omitempty"`
	LoRAAdapters    *[]AdapterState `json:"lora_adapters,omitempty"` // [] when it holds none
	Ranks           []RankState     `json:"ranks"`
}

// AdapterState is one adapter a worker holds, and its requests in flight.
type AdapterState struct {
	Name     string `json:"name"`
	InFlight uint64 `json:"in_flight"`
}

// RankState is one DP rank in a snapshot.
type RankState struct {
	DPRank              uint32 `json:"dp_rank"`
	ActiveRequests      uint64 `json:"active_requests"`
	ActivePrefillTokens Num    `json:"active_prefill_tokens"`
	ActiveDecodeBlocks  uint64 `json:"active_decode_blocks"`
	IndexBlocks         int    `json:"index_blocks"`
	// TierBlocks are the blocks its lower tiers hold, when any does.
	TierBlocks  *TierBlocks `json:"tier_blocks,omitempty"`
	LastEventID *uint64     `json:"last_event_id"`
}

// TierBlocks counts a rank's blocks in each lower tier.
type TierBlocks struct {
	HostPinned int `json:"host_pinned,omitempty"`
	Disk       int `json:"disk,omitempty"`
	External   int `json:"external,omitempty"`
}

// RequestState is one request the router tracks.
type RequestState struct {
	RequestID     string  `json:"request_id"`
	Status        string  `json:"status"`
	WorkerID      *uint64 `json:"worker_id"`
	DPRank        *uint32 `json:"dp_rank"`
	PrefillTokens uint64  `json:"prefill_tokens"`
	Blocks        int     `json:"blocks"`
}

// QueuedState is one waiting request, in queue order within its role.
type QueuedState struct {
	RequestID string `json:"request_id"`
	Role      Role   `json:"role"`
	// PolicyClass is the configured class it waits in ("" without
	// classes); its deadline_ms is then the earlier of the class's
	// (arrival + slo_ms) and queue_timeout_ms's.
	PolicyClass string `json:"policy_class,omitempty"`
	Tier        int64  `json:"strict_priority"`
	Score       Num    `json:"score"`
	ArrivalMS   Num    `json:"arrival_ms"`
	DeadlineMS  *Num   `json:"deadline_ms"`
}
