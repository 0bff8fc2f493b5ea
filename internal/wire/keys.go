package wire

import (
	"fmt"
	"slices"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Every key a command line may hold (op, the command's fields, those of
// its KV events, events.go, and of a place's router_config_override) is
// found in a small table by a hash of its length and three of its bytes,
// then compared whole: one multiply and one
// comparison per key, where a Go map hashes every byte. The multiplier is
// the first that puts no two protocol keys in one slot; a key that is not
// a protocol key misses in the comparison.

type knownKey struct {
	name  string
	field protocol.Field // noField when the key is not a command field
}

const noField = protocol.NumFields

const keySlotBits = 9 // 512 slots for some 70 keys

var keySlots, keyMul = func() ([1 << keySlotBits]knownKey, uint32) {
	var keys []knownKey
	keys = append(keys, knownKey{"op", noField})
	for f, name := range protocol.FieldNames {
		keys = append(keys, knownKey{name, protocol.Field(f)})
	}
	for _, name := range slices.Concat(eventKeys, protocol.OverrideKeys) {
		// overlap_score_weight hashes as overlap_score_credit does (same
		// length and bytes sampled) and is Dynamo's deprecated spelling:
		// left to rawString, it costs its rare line one string.
		if name != "overlap_score_weight" && !slices.ContainsFunc(keys, func(k knownKey) bool { return k.name == name }) {
			keys = append(keys, knownKey{name, noField})
		}
	}
	for mul := uint32(0x9e3779b1); ; mul += 2 {
		var slots [1 << keySlotBits]knownKey
		clash := false
		for _, k := range keys {
			h := keySlot(k.name, mul)
			if slots[h].name != "" {
				clash = true
				break
			}
			slots[h] = k
		}
		if !clash {
			return slots, mul
		}
		if mul > 0x9e3779b1+1<<20 {
			panic(fmt.Sprintf("no multiplier separates the %d protocol keys", len(keys)))
		}
	}
}()

// keySlot hashes a key's length, first, middle and last bytes.
func keySlot[S string | []byte](k S, mul uint32) uint32 {
	if len(k) == 0 {
		return 0
	}
	x := uint32(len(k)) | uint32(k[0])<<8 | uint32(k[len(k)/2])<<16 | uint32(k[len(k)-1])<<24
	return (x * mul) >> (32 - keySlotBits)
}

// lookupKey finds raw among the protocol's keys.
func lookupKey[S string | []byte](raw S) (knownKey, bool) {
	k := keySlots[keySlot(raw, keyMul)]
	return k, k.name != "" && k.name == string(raw)
}

// fieldOf is the command field a key names.
func fieldOf(key string) (protocol.Field, bool) {
	k, ok := lookupKey(key)
	return k.field, ok && k.field != noField
}
