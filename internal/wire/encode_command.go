package wire

import (
	"slices"
	"strconv"
	"strings"

	"github.com/offline-router/offline-router/internal/protocol"
)

// AppendCommand appends c as one JSON line (without the newline), fields in
// a fixed order, so that a host that writes commands with it produces a
// stream Decode reads back into the same command.
func AppendCommand(b []byte, c *protocol.Command) []byte {
	b = append(b, `{"op":`...)
	b = appendString(b, string(c.Op))
	if c.ID != nil {
		b = append(append(b, `,"id":`...), c.ID...)
	}
	if c.NowMS != nil {
		b = protocol.AppendNum(append(b, `,"now_ms":`...), *c.NowMS)
	}
	if c.RequestID != "" {
		b = appendString(append(b, `,"request_id":`...), c.RequestID)
	}
	b = appendU64(b, "worker_id", c.WorkerID)
	if c.Role != "" {
		b = appendString(append(b, `,"role":`...), string(c.Role))
	}
	if c.DeviceType != "" {
		b = appendString(append(b, `,"device_type":`...), string(c.DeviceType))
	}
	b = appendU32(b, "dp_size", c.DPSize)
	b = appendU32(b, "dp_start", c.DPStart)
	b = appendU32(b, "dp_rank", c.DPRank)
	b = appendU64(b, "total_kv_blocks", c.TotalKVBlocks)
	b = appendU64(b, "max_num_batched_tokens", c.MaxNumBatchedTokens)
	b = appendU64(b, "max_num_seqs", c.MaxNumSeqs)
	if c.LoRAAdapters != nil {
		b = append(b, `,"lora_adapters":[`...)
		for i, n := range c.LoRAAdapters {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, n)
		}
		b = append(b, ']')
	}
	b = appendU32(b, "max_gpu_lora_count", c.MaxGPULoRACount)
	b = appendU64(b, "input_tokens", c.InputTokens)
	b = appendU64(b, "output_tokens", c.OutputTokens)
	if c.Tokens != nil {
		b = append(b, `,"tokens":[`...)
		for i, t := range c.Tokens {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(t), 10)
		}
		b = append(b, ']')
	}
	b = appendU64s(b, "block_hashes", c.BlockHashes)
	b = appendU64s(b, "sequence_hashes", c.SequenceHashes)
	b = appendU64s(b, "allowed_workers", c.AllowedWorkers)
	if c.SessionID != nil {
		b = appendString(append(b, `,"session_id":`...), *c.SessionID)
	}
	if c.ParentSessionID != nil {
		b = appendString(append(b, `,"parent_session_id":`...), *c.ParentSessionID)
	}
	if c.Priority != nil {
		b = protocol.AppendNum(append(b, `,"priority":`...), *c.Priority)
	}
	if c.StrictPriority != nil {
		b = strconv.AppendInt(append(b, `,"strict_priority":`...), *c.StrictPriority, 10)
	}
	if c.LoRAName != nil {
		b = appendString(append(b, `,"lora_name":`...), *c.LoRAName)
	}
	if c.CacheNamespace != nil {
		b = appendString(append(b, `,"cache_namespace":`...), *c.CacheNamespace)
	}
	if c.PolicyClass != nil {
		b = appendString(append(b, `,"policy_class":`...), *c.PolicyClass)
	}
	if c.RouterConfigOverride != nil {
		b = appendOverride(append(b, `,"router_config_override":`...), c.RouterConfigOverride)
	}
	if c.Events != nil {
		b = appendArray(append(b, `,"events":`...), c.Events, appendEvent)
	}
	if c.Config != nil {
		b = appendConfigKeys(b, c.Config)
	}
	return append(b, '}')
}

// appendConfigKeys writes the keys a config command set, in the order of
// protocol.Config's fields, so those of a group ("affinity.mode",
// "affinity.ttl_ms") share one object.
func appendConfigKeys(b []byte, u *protocol.ConfigUpdate) []byte {
	keys := slices.Clone(u.Keys)
	sortConfigKeys(keys)
	open := ""
	for _, k := range keys {
		group, sub, nested := strings.Cut(k, ".")
		if open != "" && (!nested || group != open) {
			b, open = append(b, '}'), ""
		}
		switch {
		case !nested:
			b = appendString(append(b, ','), k)
		case group == open:
			b = appendString(append(b, ','), sub)
		default:
			b = append(appendString(append(b, ','), group), ":{"...)
			b, open = appendString(b, sub), group
		}
		b = append(append(b, ':'), configValue(&u.Config, k)...)
	}
	if open != "" {
		b = append(b, '}')
	}
	return b
}

func appendEvent(b []byte, ev *protocol.KVEvent) []byte {
	b = strconv.AppendUint(append(b, `{"worker_id":`...), ev.WorkerID, 10)
	if ev.StorageTier != "" {
		b = appendString(append(b, `,"storage_tier":`...), ev.StorageTier)
	}
	if ev.UnknownMedium {
		b = append(b, `,"medium":""`...) // a medium no tier has, which marks it
	}
	if ev.ResidencyInvalid {
		b = append(b, `,"residency_domain":null`...) // what marks it invalid, as Dynamo reads it
	} else if ev.ResidencyDomain != "" {
		b = appendString(append(b, `,"residency_domain":`...), ev.ResidencyDomain)
	}
	b = strconv.AppendUint(append(b, `,"event":{"event_id":`...), ev.EventID, 10)
	b = strconv.AppendUint(append(b, `,"dp_rank":`...), uint64(ev.DPRank), 10)
	if ev.Tier != "" {
		b = appendString(append(b, `,"tier":`...), ev.Tier)
	}
	b = append(b, `,"data":`...)
	switch d := ev.Data.(type) {
	case protocol.Stored:
		b = append(b, `{"stored":{"parent_hash":`...)
		if d.ParentHash == nil {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendUint(b, uint64(*d.ParentHash), 10)
		}
		unhashed := d.Unhashed // in block order
		b = append(b, `,"blocks":[`...)
		for i := range d.Blocks {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(append(b, `{"block_hash":`...), uint64(d.Blocks[i].BlockHash), 10)
			if len(unhashed) > 0 && unhashed[0].Index == i {
				b = append(b, `,"token_ids":[`...)
				for j, t := range unhashed[0].TokenIDs {
					if j > 0 {
						b = append(b, ',')
					}
					b = strconv.AppendUint(b, uint64(t), 10)
				}
				b, unhashed = append(b, "]}"...), unhashed[1:]
				continue
			}
			b = append(strconv.AppendUint(append(b, `,"tokens_hash":`...), uint64(d.Blocks[i].TokensHash), 10), '}')
		}
		b = append(b, ']')
		if d.LoRAName != "" {
			b = appendString(append(b, `,"lora_name":`...), d.LoRAName)
		}
		if d.CacheNamespace != "" {
			b = appendString(append(b, `,"cache_namespace":`...), d.CacheNamespace)
		}
		b = append(b, "}}"...)
	case protocol.Removed:
		b = appendU64s(append(b, `{"removed":{`...), "block_hashes", d.BlockHashes)
		b = append(b, "}}"...)
	default:
		b = append(b, `"cleared"`...)
	}
	return append(b, "}}"...)
}

// appendString appends s as a JSON string, escaping only what JSON
// requires (strconv.Quote's Go escapes such as \x7f are not JSON). s is
// valid UTF-8: the decoder refuses anything else. Commands only: responses
// use appendGoccyString, whose bytes must stay those goccy always wrote.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func appendU64(b []byte, key string, v *uint64) []byte {
	if v == nil {
		return b
	}
	return strconv.AppendUint(append(append(append(b, ',', '"'), key...), '"', ':'), *v, 10)
}

func appendU32(b []byte, key string, v *uint32) []byte {
	if v == nil {
		return b
	}
	return strconv.AppendUint(append(append(append(b, ',', '"'), key...), '"', ':'), uint64(*v), 10)
}

// appendU64s writes ,"key":[...] (no leading comma right after an opening
// brace, where a list is the first member).
func appendU64s[T ~uint64](b []byte, key string, vs []T) []byte {
	if vs == nil {
		return b
	}
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = append(append(append(b, '"'), key...), `":`...)
	return appendArray(b, vs, func(b []byte, v *T) []byte { return strconv.AppendUint(b, uint64(*v), 10) })
}
