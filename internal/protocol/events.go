package protocol

// LocalBlockHash is the hash of one block's tokens alone (Dynamo's
// LocalBlockHash): what a place's block_hashes and a stored block's
// tokens_hash hold, and what the index matches prompts by.
type LocalBlockHash uint64

// SequenceHash is the hash of a block and everything before it (Dynamo's
// ExternalSequenceBlockHash): what a place's sequence_hashes, a stored
// block's block_hash, a parent_hash and a removed block name.
type SequenceHash uint64

// KVEvent is one KV event as Dynamo serialises a RouterEvent: the worker
// and rank it comes from, and what happened in Data.
type KVEvent struct {
	WorkerID    uint64
	StorageTier string // "device" when absent from the line
	// Tier is AISimulate's tier on the event ("" when absent), and
	// ResidencyDomain Dynamo's owner of the cache ("" when absent: the
	// worker). The index holds device caches of workers only.
	Tier            string
	ResidencyDomain string
	// ResidencyInvalid: residency_domain was null or not a string, which
	// Dynamo takes as malformed (only an omitted field is legacy) and
	// drops the event.
	ResidencyInvalid bool
	// UnknownMedium: the event's medium names no tier, and Dynamo drops
	// it (with a warning) before it takes an event id.
	UnknownMedium bool
	// IgnoredKeys are the paths of keys inside the event that no event
	// struct has, skipped as Dynamo's deserializer skips them.
	IgnoredKeys []string
	EventID     uint64
	DPRank      uint32
	Data        EventData // Stored, Removed or Cleared
}

// The storage tiers, Dynamo's StorageTier names.
const (
	TierDevice     = "device"
	TierHostPinned = "host_pinned"
	TierDisk       = "disk"
	TierExternal   = "external"
)

// LowerTiers are the tiers below the device, in the order a match walks
// them (Dynamo's lower_tier_query_order).
var LowerTiers = [3]string{TierHostPinned, TierDisk, TierExternal}

// TierOf is the tier the event is about: storage_tier when it names a
// lower tier, else AISimulate's tier on the event (absent: device), or ""
// when that names no tier Dynamo has (the event is ignored).
func (ev *KVEvent) TierOf() string {
	switch {
	case ev.StorageTier != TierDevice:
		return ev.StorageTier
	case ev.Tier == "":
		return TierDevice
	case StorageTierValid(ev.Tier):
		return ev.Tier
	}
	return ""
}

// OfWorker reports whether the event is about a worker's own caches (its
// residency domain omitted or "worker"), of any tier.
func (ev *KVEvent) OfWorker() bool {
	return !ev.ResidencyInvalid && (ev.ResidencyDomain == "" || ev.ResidencyDomain == "worker")
}

// StorageTierValid reports whether t is one of Dynamo's storage tiers.
func StorageTierValid(t string) bool {
	switch t {
	case TierDevice, TierHostPinned, TierDisk, TierExternal:
		return true
	}
	return false
}

// MediumTier maps an engine's KV medium to its tier, exactly as Dynamo's
// StorageTier::from_kv_medium does (case-sensitive), or "" for a medium
// it does not know.
func MediumTier(medium string) string {
	switch medium {
	case "GPU", "DEVICE":
		return TierDevice
	case "CPU", "CPU_PINNED", "CPU_TIER1":
		return TierHostPinned
	case "CPU_TIER2", "DISK", "NVME", "STORAGE":
		return TierDisk
	case "EXTERNAL", "NETWORK", "REMOTE", "SHARED":
		return TierExternal
	}
	return ""
}

// EventData is what a KV event did: Stored, Removed or Cleared.
type EventData interface{ eventData() }

// Stored is a run of blocks a rank cached, each the child of the one before,
// the first the child of ParentHash (nil: the root).
type Stored struct {
	ParentHash *SequenceHash
	Blocks     []StoredBlock
	// Unhashed are the blocks that came with token_ids and no tokens_hash:
	// the router hashes their tokens as Dynamo's publisher does, salted by
	// the store's LoRAName and CacheNamespace ("" when none).
	Unhashed                 []UnhashedBlock
	LoRAName, CacheNamespace string
	// Path is, from a host that has it (the replay: no wire carries it),
	// the local hashes of the prefix ParentHash ends, so that the router
	// finds the parent by walking them, not by a table of every block's
	// hash (Engine.TrustChainedHashes).
	Path []LocalBlockHash
}

// UnhashedBlock is a stored block's tokens, for Blocks[Index].TokensHash.
type UnhashedBlock struct {
	Index    int
	TokenIDs []uint32
}

// StoredBlock is one block of a Stored event.
type StoredBlock struct {
	BlockHash  SequenceHash
	TokensHash LocalBlockHash
}

// Removed is blocks a rank evicted.
type Removed struct {
	BlockHashes []SequenceHash
}

// Cleared is a rank dropping its whole cache.
type Cleared struct{}

func (Stored) eventData()  {}
func (Removed) eventData() {}
func (Cleared) eventData() {}

// check reports the path inside the event and what is missing, or "" for
// the message when the event is whole. The decoder refuses the same lines
// as it reads them.
func (ev *KVEvent) check() (path, msg string) {
	switch d := ev.Data.(type) {
	case Stored:
		if d.Blocks == nil {
			return "event.data.stored.blocks", "required"
		}
		if msg := CheckSaltName(d.LoRAName); msg != "" {
			return "event.data.stored.lora_name", msg
		}
		if msg := CheckSaltName(d.CacheNamespace); msg != "" {
			return "event.data.stored.cache_namespace", msg
		}
	case Removed:
		if d.BlockHashes == nil {
			return "event.data.removed.block_hashes", "required"
		}
	case Cleared:
	default:
		return "event.data", "required"
	}
	return "", ""
}
