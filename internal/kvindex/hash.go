// Package kvindex holds the router's view of the cluster's KV caches: the
// Dynamo-compatible block hashing and the radix prefix index fed by KV events.
package kvindex

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// HashSeed is the XXH3 seed Dynamo uses for every block and sequence hash.
const HashSeed = 1337

// BlockHashes returns the local hash of every full block of tokens: XXH3-64
// of the block's tokens as little-endian u32. A partial last block is not
// hashed, exactly as Dynamo does, because its KV is not reusable.
func BlockHashes(tokens []uint32, blockSize int) []uint64 {
	n := len(tokens) / blockSize
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	buf := make([]byte, 4*blockSize)
	for i := range n {
		for j, t := range tokens[i*blockSize : (i+1)*blockSize] {
			binary.LittleEndian.PutUint32(buf[4*j:], t)
		}
		out[i] = xxh3.HashSeed(buf, HashSeed)
	}
	return out
}

// SequenceHashes chains local hashes into the hashes that identify a whole
// prefix: seq[0] = local[0], seq[i] = XXH3-64(LE64(seq[i-1]) || LE64(local[i])).
func SequenceHashes(local []uint64) []uint64 {
	if len(local) == 0 {
		return nil
	}
	out := make([]uint64, len(local))
	out[0] = local[0]
	var buf [16]byte
	for i := 1; i < len(local); i++ {
		binary.LittleEndian.PutUint64(buf[:8], out[i-1])
		binary.LittleEndian.PutUint64(buf[8:], local[i])
		out[i] = xxh3.HashSeed(buf[:], HashSeed)
	}
	return out
}
