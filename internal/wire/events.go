package wire

import "fmt"

// Decoding of KV events, as Dynamo serialises a RouterEvent:
// {"worker_id", "storage_tier", "event": {"event_id", "dp_rank", "data"}},
// where data is {"stored": {"parent_hash", "blocks": [{"block_hash",
// "tokens_hash"}]}}, {"removed": {"block_hashes"}} or "cleared".

// eventKeys are the keys of a RouterEvent and everything inside it.
var eventKeys = []string{"worker_id", "storage_tier", "event", "event_id", "dp_rank", "data",
	"stored", "removed", "block_hashes", "parent_hash", "blocks", "block_hash", "tokens_hash"}

func decodeEvent(s *scanner, ev *RouterEvent) *fieldError {
	var hasWorker, hasEvent bool
	err := s.object(func(key string) *fieldError {
		switch key {
		case "worker_id":
			hasWorker = true
			v, err := s.u64()
			ev.WorkerID = v
			return err.orNil(key)
		case "storage_tier":
			v, err := s.str()
			ev.StorageTier = v
			return err.orNil(key)
		case "event":
			hasEvent = true
			return decodeEventBody(s, ev).orNil(key)
		}
		return &fieldError{code: CodeUnknownField, path: key, msg: "is not a field of a RouterEvent (worker_id, storage_tier, event)"}
	})
	if err != nil {
		return err
	}
	if !hasWorker {
		return &fieldError{code: CodeInvalidField, path: "worker_id", msg: "required"}
	}
	if !hasEvent {
		return &fieldError{code: CodeInvalidField, path: "event", msg: "required"}
	}
	if ev.StorageTier == "" {
		ev.StorageTier = "device"
	}
	return nil
}

func decodeEventBody(s *scanner, ev *RouterEvent) *fieldError {
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
		return &fieldError{code: CodeUnknownField, path: key, msg: "is not a field of an event (event_id, dp_rank, data)"}
	})
	if err != nil {
		return err
	}
	if !hasID {
		return &fieldError{code: CodeInvalidField, path: "event_id", msg: "required"}
	}
	if ev.Kind == 0 {
		return &fieldError{code: CodeInvalidField, path: "data", msg: "required"}
	}
	return nil
}

func decodeEventData(s *scanner, ev *RouterEvent) *fieldError {
	if s.peek() == '"' {
		v, _ := s.str()
		if v != "cleared" {
			return &fieldError{code: CodeInvalidField, msg: fmt.Sprintf(`expected "cleared" or an object with "stored" or "removed", got %q`, v)}
		}
		ev.Kind = EventCleared
		return nil
	}
	return s.object(func(key string) *fieldError {
		if ev.Kind != 0 {
			return &fieldError{code: CodeInvalidField, path: key, msg: "an event's data holds exactly one of stored, removed"}
		}
		switch key {
		case "stored":
			ev.Kind = EventStored
			return decodeStored(s, ev).orNil(key)
		case "removed":
			ev.Kind = EventRemoved
			var hasHashes bool
			err := s.object(func(k string) *fieldError {
				if k != "block_hashes" {
					return &fieldError{code: CodeUnknownField, path: k, msg: "is not a field of removed (block_hashes)"}
				}
				hasHashes = true
				v, err := u64s(s)
				ev.Removed = v
				return err.orNil(k)
			})
			if err == nil && !hasHashes {
				err = &fieldError{code: CodeInvalidField, path: "block_hashes", msg: "required"}
			}
			return err.orNil(key)
		}
		return &fieldError{code: CodeUnknownField, path: key, msg: "is not an event kind (stored, removed, or the string \"cleared\")"}
	})
}

func decodeStored(s *scanner, ev *RouterEvent) *fieldError {
	var hasBlocks bool
	err := s.object(func(key string) *fieldError {
		switch key {
		case "parent_hash":
			if s.null() {
				return nil
			}
			v, err := ptr(s.u64())
			ev.ParentHash = v
			return err.orNil(key)
		case "blocks":
			hasBlocks = true
			return s.array(func(int) *fieldError {
				var b StoredBlock
				var hasBH, hasTH bool
				err := s.object(func(k string) *fieldError {
					var err *fieldError
					switch k {
					case "block_hash":
						hasBH = true
						b.BlockHash, err = s.u64()
					case "tokens_hash":
						hasTH = true
						b.TokensHash, err = s.u64()
					default:
						return &fieldError{code: CodeUnknownField, path: k, msg: "is not a field of a stored block (block_hash, tokens_hash)"}
					}
					return err.orNil(k)
				})
				if err == nil && !(hasBH && hasTH) {
					err = &fieldError{code: CodeInvalidField, msg: "a stored block needs block_hash and tokens_hash"}
				}
				ev.Blocks = append(ev.Blocks, b)
				return err
			}).orNil(key)
		}
		return &fieldError{code: CodeUnknownField, path: key, msg: "is not a field of stored (parent_hash, blocks)"}
	})
	if err == nil && !hasBlocks {
		err = &fieldError{code: CodeInvalidField, path: "blocks", msg: "required"}
	}
	return err
}
