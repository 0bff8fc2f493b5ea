// Package kvindex holds the router's view of the cluster's KV caches: the
// Dynamo-compatible block hashing and the radix prefix index fed by KV events.
package kvindex

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"

	"github.com/offline-router/offline-router/internal/protocol"
)

// HashSeed is the XXH3 seed Dynamo uses for every block and sequence hash.
const HashSeed = 1337

// Salt is the seed of a request's block hashes under its LoRA adapter and
// cache namespace, as Dynamo's compute_salt_hash makes it (lib/kv-hashing
// salt.rs at the pinned commit): 1337, plus XXH3-64 of the adapter's name
// at seed 0, plus XXH3-64 of the namespace at seed 1, wrapping; an empty
// name is no name. Only the block hashes take it: the sequence chain keeps
// seed 1337, so two adapters' prompts never share a block, and a prefix
// still chains as any other.
func Salt(loraName, cacheNamespace string) uint64 {
	seed := uint64(HashSeed)
	if loraName != "" {
		seed += xxh3.HashStringSeed(loraName, 0)
	}
	if cacheNamespace != "" {
		seed += xxh3.HashStringSeed(cacheNamespace, 1)
	}
	return seed
}

// SaltedBlockID is an opaque id's block hash under seed (Salt's): XXH3-64
// of its 8 little-endian bytes, as a trace's id stands for tokens it lacks.
func SaltedBlockID(id protocol.LocalBlockHash, seed uint64) protocol.LocalBlockHash {
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(id))
	return protocol.LocalBlockHash(xxh3.HashSeed(buf[:], seed))
}

// BlockHashes returns the local hash of every full block of tokens: XXH3-64
// of the block's tokens as little-endian u32. A partial last block is not
// hashed, exactly as Dynamo does, because its KV is not reusable.
func BlockHashes(tokens []uint32, blockSize int) []protocol.LocalBlockHash {
	return SaltedBlockHashes(tokens, blockSize, HashSeed)
}

// SaltedBlockHashes is BlockHashes at the seed Salt gives.
func SaltedBlockHashes(tokens []uint32, blockSize int, seed uint64) []protocol.LocalBlockHash {
	n := len(tokens) / blockSize
	if n == 0 {
		return nil
	}
	out := make([]protocol.LocalBlockHash, n)
	buf := make([]byte, 4*blockSize)
	for i := range n {
		for j, t := range tokens[i*blockSize : (i+1)*blockSize] {
			binary.LittleEndian.PutUint32(buf[4*j:], t)
		}
		out[i] = protocol.LocalBlockHash(xxh3.HashSeed(buf, seed))
	}
	return out
}

// SequenceHashes chains local hashes into the hashes that identify a whole
// prefix: seq[0] = local[0], seq[i] = XXH3-64(LE64(seq[i-1]) || LE64(local[i])).
func SequenceHashes(local []protocol.LocalBlockHash) []protocol.SequenceHash {
	if len(local) == 0 {
		return nil
	}
	out := make([]protocol.SequenceHash, len(local))
	out[0] = protocol.SequenceHash(local[0])
	var buf [16]byte
	for i := 1; i < len(local); i++ {
		binary.LittleEndian.PutUint64(buf[:8], uint64(out[i-1]))
		binary.LittleEndian.PutUint64(buf[8:], uint64(local[i]))
		out[i] = protocol.SequenceHash(xxh3.HashSeed(buf[:], HashSeed))
	}
	return out
}
