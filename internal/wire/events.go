package wire

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Decoding of KV events, as Dynamo serialises a RouterEvent:
// {"worker_id", "storage_tier" (or an engine's "medium"), "residency_domain",
// "state_source", "session_id", "event": {"event_id", "dp_rank", "tier", "data"}}, where
// data is {"stored": {"parent_hash", "start_position", "blocks":
// [{"block_hash", "tokens_hash", "mm_extra_info", "token_ids"}],
// "lora_name", "cache_namespace"}}, {"removed": {"block_hashes"}} or
// "cleared". ("tier" on the event and "token_ids" on a block are
// AISimulate's; a block with token_ids may leave tokens_hash out, for the
// router to hash them salted by the store's lora_name and cache_namespace,
// as Dynamo's publisher hashes an engine's event.) What only informs is checked
// for its type and dropped: docs/PROTOCOL.md says which, and why. A key
// none of these structs has is skipped and listed in the event's
// IgnoredKeys, as Dynamo's deserializer (no deny_unknown_fields on any
// event struct) skips it: an engine's newer field (moe_metadata on a block)
// must not fail the whole observe. The observe command's own keys are
// still strict.

// eventKeys are the keys of a RouterEvent and everything inside it.
var eventKeys = []string{"worker_id", "storage_tier", "medium", "residency_domain", "state_source", "session_id",
	"event", "event_id", "dp_rank", "tier", "data", "stored", "removed", "block_hashes", "parent_hash",
	"start_position", "blocks", "block_hash", "tokens_hash", "mm_extra_info", "mm_objects", "mm_hash",
	"offsets", "token_ids", "lora_name", "cache_namespace"}

func decodeEvent(s *scanner, ev *protocol.KVEvent) *fieldError {
	var hasWorker, hasEvent, hasMedium bool
	var medium string
	err := s.object(func(key string) *fieldError {
		switch key {
		case "medium":
			if s.null() { // vLLM's medium is optional: null is the device
				return nil
			}
			hasMedium = true
			v, err := s.str()
			medium = v
			return err.orNil(key)
		case "worker_id":
			hasWorker = true
			v, err := s.u64()
			ev.WorkerID = v
			return err.orNil(key)
		case "storage_tier":
			// Nearly every event is on "device": interned, so that an
			// event costs no allocation for it (boxing its data costs one).
			if s.literal(`"device"`) {
				s.i += len(`"device"`)
				ev.StorageTier = "device"
				return nil
			}
			v, err := s.str()
			if err == nil && !protocol.StorageTierValid(v) {
				// Dynamo's StorageTier is a closed enum: another name fails
				// the whole RouterEvent.
				return &fieldError{code: protocol.CodeInvalidField, path: key,
					msg: fmt.Sprintf("expected one of device, host_pinned, disk, external (Dynamo's storage tiers), got %q", v)}
			}
			ev.StorageTier = v
			return err.orNil(key)
		case "residency_domain":
			// Dynamo's reader never fails here: only an omitted field means
			// the legacy (worker) domain, and null or a value that is not a
			// string marks the event invalid, which the indexer drops.
			if s.peek() == '"' {
				return s.optString(&ev.ResidencyDomain).orNil(key)
			}
			ev.ResidencyInvalid = true
			if !s.skip() {
				return s.expected("a JSON value")
			}
			return nil
		case "state_source":
			// A cache owner's id, meaningful only with residency_domain
			// "cache_owner", whose events the router ignores: checked for
			// Dynamo's shape and dropped.
			if s.null() {
				return nil
			}
			return decodeCacheOwnerID(s, ev).orNil(key)
		case "session_id":
			var informs string
			return s.optString(&informs).orNil(key)
		case "event":
			hasEvent = true
			return decodeEventBody(s, ev).orNil(key)
		}
		return ignore(s, ev, key)
	})
	if err != nil {
		return err
	}
	if !hasWorker {
		return &fieldError{code: protocol.CodeInvalidField, path: "worker_id", msg: "required"}
	}
	if !hasEvent {
		return &fieldError{code: protocol.CodeInvalidField, path: "event", msg: "required"}
	}
	if hasMedium {
		// An engine's medium, mapped as Dynamo maps it; one Dynamo does not
		// know drops the event (it warns), not the whole observe.
		switch t := protocol.MediumTier(medium); {
		case t == "":
			ev.UnknownMedium = true
		case ev.StorageTier != "" && ev.StorageTier != t:
			return &fieldError{code: protocol.CodeInvalidField, path: "medium",
				msg: fmt.Sprintf("%q is tier %s, but storage_tier says %s: give one, or both alike", medium, t, ev.StorageTier)}
		default:
			ev.StorageTier = t
		}
	}
	if ev.StorageTier == "" {
		ev.StorageTier = "device"
	}
	return nil
}

func decodeEventBody(s *scanner, ev *protocol.KVEvent) *fieldError {
	var hasID bool
	err := s.object(func(key string) *fieldError {
		switch key {
		case "event_id":
			hasID = true
			v, err := s.u64()
			ev.EventID = v
			return err.orNil(key)
		case "dp_rank":
			if s.null() {
				return nil
			}
			v, err := s.u32()
			ev.DPRank = v
			return err.orNil(key)
		case "tier":
			return s.optString(&ev.Tier).orNil(key)
		case "data":
			return decodeEventData(s, ev).orNil(key)
		}
		return ignore(s, ev, "event."+key)
	})
	if err != nil {
		return err
	}
	if !hasID {
		return &fieldError{code: protocol.CodeInvalidField, path: "event_id", msg: "required"}
	}
	if ev.Data == nil {
		return &fieldError{code: protocol.CodeInvalidField, path: "data", msg: "required"}
	}
	return nil
}

func decodeEventData(s *scanner, ev *protocol.KVEvent) *fieldError {
	if s.peek() == '"' {
		v, err := s.str()
		if err != nil {
			return err
		}
		if v != "cleared" {
			return &fieldError{code: protocol.CodeInvalidField, msg: fmt.Sprintf(`expected "cleared" or an object with "stored" or "removed", got %q`, v)}
		}
		ev.Data = protocol.Cleared{}
		return nil
	}
	return s.object(func(key string) *fieldError {
		if ev.Data != nil {
			return &fieldError{code: protocol.CodeInvalidField, path: key, msg: "an event's data holds exactly one of stored, removed"}
		}
		switch key {
		case "stored":
			var st protocol.Stored
			err := decodeStored(s, ev, &st)
			ev.Data = st
			return err.orNil(key)
		case "removed":
			var rm protocol.Removed
			var hasHashes bool
			err := s.object(func(k string) *fieldError {
				if k != "block_hashes" {
					return ignore(s, ev, "event.data.removed."+k)
				}
				hasHashes = true
				v, err := u64s[protocol.SequenceHash](s)
				rm.BlockHashes = v
				return err.orNil(k)
			})
			if err == nil && !hasHashes {
				err = &fieldError{code: protocol.CodeInvalidField, path: "block_hashes", msg: "required"}
			}
			ev.Data = rm
			return err.orNil(key)
		}
		return &fieldError{code: protocol.CodeUnknownField, path: key, msg: "is not an event kind (stored, removed, or the string \"cleared\")"}
	})
}

func decodeStored(s *scanner, ev *protocol.KVEvent, st *protocol.Stored) *fieldError {
	var hasBlocks bool
	err := s.object(func(key string) *fieldError {
		switch key {
		case "parent_hash":
			if s.null() {
				return nil
			}
			v, err := s.u64()
			if err == nil {
				h := protocol.SequenceHash(v)
				st.ParentHash = &h
			}
			return err.orNil(key)
		case "start_position":
			if s.null() {
				return nil
			}
			_, err := s.u32()
			return err.orNil(key)
		case "lora_name":
			return s.optString(&st.LoRAName).orNil(key)
		case "cache_namespace":
			return s.optString(&st.CacheNamespace).orNil(key)
		case "blocks":
			hasBlocks = true
			st.Blocks = []protocol.StoredBlock{}
			return s.array(func(int) *fieldError {
				var b protocol.StoredBlock
				if s.plainBlock(&b) {
					st.Blocks = append(st.Blocks, b)
					return nil
				}
				var hasBH, hasTH bool
				var tokens []uint64
				err := s.object(func(k string) *fieldError {
					var err *fieldError
					var v uint64
					switch k {
					case "block_hash":
						hasBH = true
						v, err = s.u64()
						b.BlockHash = protocol.SequenceHash(v)
					case "tokens_hash":
						hasTH = true
						v, err = s.u64()
						b.TokensHash = protocol.LocalBlockHash(v)
					case "mm_extra_info":
						err = decodeMMExtraInfo(s, ev)
					case "token_ids":
						if !s.null() {
							tokens, err = u64s[uint64](s)
						}
					default:
						return ignore(s, ev, "event.data.stored.blocks[]."+k)
					}
					return err.orNil(k)
				})
				if err == nil && !(hasBH && (hasTH || tokens != nil)) {
					err = &fieldError{code: protocol.CodeInvalidField, msg: "a stored block needs block_hash, and tokens_hash or token_ids"}
				}
				if err == nil && !hasTH {
					err = unhashed(st, len(st.Blocks), tokens)
				}
				st.Blocks = append(st.Blocks, b)
				return err
			}).orNil(key)
		}
		return ignore(s, ev, "event.data.stored."+key)
	})
	if err == nil && !hasBlocks {
		err = &fieldError{code: protocol.CodeInvalidField, path: "blocks", msg: "required"}
	}
	return err
}

// unhashed keeps the tokens of the store's block i, which came without
// tokens_hash, for the router to hash: Dynamo's tokens are u32.
func unhashed(st *protocol.Stored, i int, tokens []uint64) *fieldError {
	ids := make([]uint32, len(tokens))
	for j, t := range tokens {
		if t > math.MaxUint32 {
			return &fieldError{code: protocol.CodeInvalidField, path: "token_ids",
				msg: fmt.Sprintf("entry %d: expected a token id of at most %d, got %d", j, uint32(math.MaxUint32), t)}
		}
		ids[j] = uint32(t)
	}
	st.Unhashed = append(st.Unhashed, protocol.UnhashedBlock{Index: i, TokenIDs: ids})
	return nil
}

// plainBlock reads a stored block written as hosts write nearly all of
// them, {"block_hash":DIGITS,"tokens_hash":DIGITS} with no blank, in one
// pass, and leaves the cursor where it was (for the general reading, which
// gives the same block or says what is wrong) when the block is written
// any other way. A stored event is mostly such blocks.
func (s *scanner) plainBlock(b *protocol.StoredBlock) bool {
	const open, mid = `{"block_hash":`, `,"tokens_hash":`
	rest := s.b[s.i:]
	if !bytes.HasPrefix(rest, []byte(open)) {
		return false
	}
	bh, n, ok := plainUint(rest[len(open):])
	if !ok {
		return false
	}
	rest = rest[len(open)+n:]
	if !bytes.HasPrefix(rest, []byte(mid)) {
		return false
	}
	th, m, ok := plainUint(rest[len(mid):])
	if !ok || len(rest) <= len(mid)+m || rest[len(mid)+m] != '}' {
		return false
	}
	b.BlockHash, b.TokensHash = protocol.SequenceHash(bh), protocol.LocalBlockHash(th)
	s.i += len(open) + n + len(mid) + m + 1
	return true
}

// decodeMMExtraInfo checks a block's multimodal objects, Dynamo's
// BlockExtraInfo: null or {"mm_objects": [{"mm_hash", "offsets": [[start,
// end], ...]}]}. The block's tokens_hash already folds the objects' hashes
// in, so nothing of it is kept.
func decodeMMExtraInfo(s *scanner, ev *protocol.KVEvent) *fieldError {
	if s.null() {
		return nil
	}
	return s.object(func(key string) *fieldError {
		if key != "mm_objects" {
			return ignore(s, ev, "event.data.stored.blocks[].mm_extra_info."+key)
		}
		return s.array(func(int) *fieldError {
			return s.object(func(k string) *fieldError {
				switch k {
				case "mm_hash":
					_, err := s.u64()
					return err.orNil(k)
				case "offsets":
					return s.array(func(int) *fieldError {
						v, err := u64s[uint64](s)
						if err == nil && len(v) != 2 {
							err = &fieldError{code: protocol.CodeInvalidField, msg: fmt.Sprintf("an offset range is two numbers, [start, end]; got %d", len(v))}
						}
						return err
					}).orNil(k)
				}
				return ignore(s, ev, "event.data.stored.blocks[].mm_extra_info.mm_objects[]."+k)
			})
		}).orNil(key)
	})
}

// ignore skips the value of a key no event struct has, noting its path
// (inside the event, arrays as []) on the event.
func ignore(s *scanner, ev *protocol.KVEvent, path string) *fieldError {
	if !s.skip() {
		return s.expected("a JSON value")
	}
	ev.IgnoredKeys = append(ev.IgnoredKeys, path)
	return nil
}

// decodeCacheOwnerID checks Dynamo's CacheOwnerId (lib/kv-router
// identity.rs, serde-derived): {"pool": {"indexer_domain":
// {"cache_semantics": ID, "routing_scope": ID}, "dc_id": u64}, "slot": ID},
// every key required, where an ID is {"digest": 16 bytes, "source":
// "default_derived" or "explicit"}. Other keys are skipped, as serde skips
// them.
func decodeCacheOwnerID(s *scanner, ev *protocol.KVEvent) *fieldError {
	const at = "state_source"
	return requiredObject(s, ev, at, map[string]func() *fieldError{
		"pool": func() *fieldError { return decodePoolID(s, ev, at+".pool") },
		"slot": func() *fieldError { return decodeDigestID(s, ev, at+".slot") },
	})
}

// decodePoolID checks a CacheOwnerId's pool: its indexer domain and DC.
func decodePoolID(s *scanner, ev *protocol.KVEvent, at string) *fieldError {
	return requiredObject(s, ev, at, map[string]func() *fieldError{
		"indexer_domain": func() *fieldError { return decodeIndexerDomain(s, ev, at+".indexer_domain") },
		"dc_id": func() *fieldError {
			_, err := s.u64()
			return err
		},
	})
}

// decodeIndexerDomain checks a pool's indexer domain: two digest ids.
func decodeIndexerDomain(s *scanner, ev *protocol.KVEvent, at string) *fieldError {
	return requiredObject(s, ev, at, map[string]func() *fieldError{
		"cache_semantics": func() *fieldError { return decodeDigestID(s, ev, at+".cache_semantics") },
		"routing_scope":   func() *fieldError { return decodeDigestID(s, ev, at+".routing_scope") },
	})
}

// decodeDigestID checks one of Dynamo's digest identities.
func decodeDigestID(s *scanner, ev *protocol.KVEvent, path string) *fieldError {
	return requiredObject(s, ev, path, map[string]func() *fieldError{
		"digest": func() *fieldError {
			n := 0
			err := s.array(func(int) *fieldError {
				n++
				v, err := s.u64()
				if err == nil && v > 255 {
					err = &fieldError{code: protocol.CodeInvalidField, msg: fmt.Sprintf("expected a byte, 0 to 255, got %d", v)}
				}
				return err
			})
			if err == nil && n != 16 {
				err = &fieldError{code: protocol.CodeInvalidField, msg: fmt.Sprintf("expected 16 bytes, got %d", n)}
			}
			return err
		},
		"source": func() *fieldError {
			v, err := s.str()
			if err == nil && v != "default_derived" && v != "explicit" {
				err = &fieldError{code: protocol.CodeInvalidField, msg: fmt.Sprintf(`expected "default_derived" or "explicit", got %q`, v)}
			}
			return err
		},
	})
}

// requiredObject reads an object whose keys are all required (a
// serde-derived struct), each read by its function; a key it does not
// have is skipped and noted under path.
func requiredObject(s *scanner, ev *protocol.KVEvent, path string, keys map[string]func() *fieldError) *fieldError {
	seen := map[string]bool{}
	err := s.object(func(key string) *fieldError {
		read, ok := keys[key]
		if !ok {
			return ignore(s, ev, path+"."+key)
		}
		seen[key] = true
		return read().orNil(key)
	})
	if err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if !seen[k] {
			return &fieldError{code: protocol.CodeInvalidField, path: k, msg: "required"}
		}
	}
	return nil
}
