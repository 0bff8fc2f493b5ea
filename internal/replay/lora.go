package replay

import (
	"github.com/offline-router/offline-router/internal/kvindex"
)

// saltAdapters gives each request under a LoRA adapter, in place, its
// hash ids salted by the adapter: each id h becomes
// kvindex.SaltedBlockID(h, kvindex.Salt(adapter, "")), its block hash as
// Dynamo salts a block's seed, so that two adapters' requests over the
// same ids share no block, in the router, the workers or the headroom;
// the sequence hashes chain over them unsalted, as Dynamo's do. A request
// without an adapter keeps its ids. It runs once, on the requests as
// loaded: after RepeatTrace or SplitBlocks, which compute with the ids.
func saltAdapters(trace []Request) {
	for i := range trace {
		r := &trace[i]
		if r.LoRAName == "" {
			continue
		}
		salted := r.appendIDs(nil) // another slice may hold the ids as they were
		if len(salted) == 0 {
			continue
		}
		seed := kvindex.Salt(r.LoRAName, "")
		for k, h := range salted {
			salted[k] = kvindex.SaltedBlockID(h, seed)
		}
		// Salted ids are spread over 64 bits: packed, they would take more.
		r.HashIDs, r.packed = salted, nil
	}
}

// adapterUse is how many requests run under an adapter, and how many
// distinct adapters they name.
func adapterUse(trace []Request) (requests, adapters int) {
	seen := map[string]bool{}
	for i := range trace {
		if name := trace[i].LoRAName; name != "" {
			requests++
			seen[name] = true
		}
	}
	return requests, len(seen)
}
