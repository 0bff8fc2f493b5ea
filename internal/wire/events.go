package wire

import (
	"fmt"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Decoding of KV events, as Dynamo serialises a RouterEvent:
// {"worker_id", "storage_tier", "event": {"event_id", "dp_rank", "data"}},
// where data is {"stored": {"parent_hash", "blocks": [{"block_hash",
// "tokens_hash"}]}}, {"removed": {"block_hashes"}} or "cleared".

// eventKeys are the keys of a RouterEvent and everything inside it.
var eventKeys = []string{"worker_id", "storage_tier", "event", "event_id", "dp_rank", "data",
	"stored", "removed", "block_hashes", "parent_hash", "blocks", "block_hash", "tokens_hash"}

func decodeEvent(s *scanner, ev *protocol.KVEvent) *fieldError {
	var hasWorker, hasEvent bool
	err := s.object(func(key string) *fieldError {
		switch key {
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
			ev.StorageTier = v
			return err.orNil(key)
		case "event":
			hasEvent = true
			return decodeEventBody(s, ev).orNil(key)
		}
		return &fieldError{code: protocol.CodeUnknownField, path: key, msg: "is not a field of a RouterEvent (worker_id, storage_tier, event)"}
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
		case "data":
			return decodeEventData(s, ev).orNil(key)
		}
		return &fieldError{code: protocol.CodeUnknownField, path: key, msg: "is not a field of an event (event_id, dp_rank, data)"}
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
		v, _ := s.str()
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
			err := decodeStored(s, &st)
			ev.Data = st
			return err.orNil(key)
		case "removed":
			var rm protocol.Removed
			var hasHashes bool
			err := s.object(func(k string) *fieldError {
				if k != "block_hashes" {
					return &fieldError{code: protocol.CodeUnknownField, path: k, msg: "is not a field of removed (block_hashes)"}
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

func decodeStored(s *scanner, st *protocol.Stored) *fieldError {
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
		case "blocks":
			hasBlocks = true
			st.Blocks = []protocol.StoredBlock{}
			return s.array(func(int) *fieldError {
				var b protocol.StoredBlock
				var hasBH, hasTH bool
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
					default:
						return &fieldError{code: protocol.CodeUnknownField, path: k, msg: "is not a field of a stored block (block_hash, tokens_hash)"}
					}
					return err.orNil(k)
				})
				if err == nil && !(hasBH && hasTH) {
					err = &fieldError{code: protocol.CodeInvalidField, msg: "a stored block needs block_hash and tokens_hash"}
				}
				st.Blocks = append(st.Blocks, b)
				return err
			}).orNil(key)
		}
		return &fieldError{code: protocol.CodeUnknownField, path: key, msg: "is not a field of stored (parent_hash, blocks)"}
	})
	if err == nil && !hasBlocks {
		err = &fieldError{code: protocol.CodeInvalidField, path: "blocks", msg: "required"}
	}
	return err
}
