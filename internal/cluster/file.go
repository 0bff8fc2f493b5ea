package cluster

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/offline-router/offline-router/internal/wire"
)

// A cluster file (replay --cluster FILE, YAML or JSON) gives an aggregated
// cluster as pools of workers, each on its own hardware:
//
//	description: H100s and A100s serving Llama-3.1-8B   # optional
//	pools:
//	  - name: h100                  # required, unique: letters, digits, - and _
//	    workers: 4                  # required, at least 1
//	    profile: llama-3.1-8b-instruct-h100-tp1-vllm-0.8.4  # required: a shipped profile, or a profile file (relative to this file)
//	    kv_tokens: auto             # each worker's KV cache: tokens, or auto (default: the profile's memory)
//	    gpu_memory_utilization: 0.9 # with auto (default 0.9)
//	    kv_blocks: 900              # instead of kv_tokens: blocks of the router's block size
//	    max_num_seqs: 64            # default 64
//	    max_num_batched_tokens: 8192  # default 8192
//	    host_tier: {kv_tokens: 2000000, read_gbps: 14, write_gbps: 14}  # optional; kv_gb instead of kv_tokens
//	    disk_tier: {kv_gb: 500}     # optional; bandwidths default to 7
//
// It is read strictly: every key known and given once, numbers of their
// type, each error with its line and key.

// poolName is what a pool's name may hold: it names the pool in the
// report and the table.
var poolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ReadClusterFile reads the cluster file name holds (data) into its
// hardware pools, unsized (SizeKV sizes them at the block size), and its
// description.
func ReadClusterFile(name string, data []byte) ([]Hardware, string, error) {
	t, err := wire.ReadYAMLTree(data, "a cluster file needs 4", "a cluster file")
	if err != nil {
		return nil, "", err
	}
	if t.Root == nil {
		return nil, "", fmt.Errorf("no pools: a cluster file gives pools: a list of pools of workers (docs/replay.md)")
	}
	var pools []Hardware
	var description string
	err = t.Mapping(t.Root, "", func(key string, k, v ast.Node) error {
		switch key {
		case "description":
			var err error
			description, err = t.String(v, key)
			return err
		case "pools":
			list, err := t.List(v, key)
			if err != nil {
				return err
			}
			if len(list) == 0 {
				return t.Fail(v, key, "expected at least one pool")
			}
			for i, n := range list {
				p, err := readPool(t, n, fmt.Sprintf("pools[%d]", i), filepath.Dir(name))
				if err != nil {
					return err
				}
				for _, q := range pools {
					if q.Name == p.Name {
						return t.Fail(n, fmt.Sprintf("pools[%d].name", i), fmt.Sprintf("%q names an earlier pool too: give each its own", p.Name))
					}
				}
				pools = append(pools, p)
			}
			return nil
		}
		return t.Fail(k, key, "is not a cluster file key (description, pools)")
	})
	if err != nil {
		return nil, "", err
	}
	if pools == nil {
		return nil, "", fmt.Errorf(`field "pools": required: a list of pools of workers`)
	}
	return pools, description, nil
}

// readPool reads one pool at path; dir is the file's folder, which a
// profile file's path is relative to.
func readPool(t *wire.YAMLTree, n ast.Node, path, dir string) (Hardware, error) {
	h := Hardware{KVSizing: KVSizingProfile, GPUMemoryUtilization: DefaultGPUMemoryUtilization, MaxNumSeqs: 64, MaxNumBatchedTokens: 8192,
		line: t.Line(n)}
	given := map[string]ast.Node{} // each key given, by its node
	err := t.Mapping(n, path, func(key string, k, v ast.Node) error {
		at := path + "." + key
		given[key] = k
		switch key {
		case "name":
			s, err := t.String(v, at)
			if err == nil && !poolName.MatchString(s) {
				err = t.Fail(v, at, fmt.Sprintf("%q: expected 1 to 64 letters, digits, - or _", s))
			}
			h.Name = s
			return err
		case "workers":
			x, err := t.U64(v, at)
			if err == nil && (x < 1 || x > 1<<16) {
				err = t.Fail(v, at, fmt.Sprintf("expected 1 to 65536 workers, got %d", x))
			}
			h.Workers = int(x)
			return err
		case "profile":
			s, err := t.String(v, at)
			if err != nil {
				return err
			}
			p, err := LoadProfile(s, dir)
			if err != nil {
				return t.Fail(v, at, err.Error())
			}
			h.Profile = &p
			return nil
		case "kv_tokens":
			if t.IsString(v) {
				if s, _ := t.String(v, at); s == "auto" {
					return nil
				}
			}
			x, err := t.U64(v, at)
			if err != nil {
				return t.Fail(v, at, "expected a number of tokens or auto")
			}
			h.KVTokens, h.KVSizing = x, KVSizingTokens
			return nil
		case "kv_blocks":
			x, err := t.U64(v, at)
			if err == nil && (x < 1 || x > 1<<40) {
				err = t.Fail(v, at, fmt.Sprintf("expected 1 to 2^40 blocks, got %d", x))
			}
			h.TotalKVBlocks, h.KVSizing = int(x), KVSizingBlocks
			return err
		case "gpu_memory_utilization":
			x, err := t.Float(v, at)
			h.GPUMemoryUtilization = x
			return err
		case "max_num_seqs":
			x, err := t.U64(v, at)
			if err == nil && (x < 1 || x > 1<<20) {
				err = t.Fail(v, at, fmt.Sprintf("expected 1 to 2^20 requests, got %d", x))
			}
			h.MaxNumSeqs = int(x)
			return err
		case "max_num_batched_tokens":
			x, err := t.U64(v, at)
			if err == nil && (x < 1 || x > 1<<30) {
				err = t.Fail(v, at, fmt.Sprintf("expected 1 to 2^30 tokens, got %d", x))
			}
			h.MaxNumBatchedTokens = x
			return err
		case "host_tier", "disk_tier":
			gbps := float64(DefaultHostGBps)
			if key == "disk_tier" {
				gbps = DefaultDiskGBps
			}
			tier, err := readTier(t, v, at, gbps)
			if key == "host_tier" {
				h.HostTier = tier
			} else {
				h.DiskTier = tier
			}
			return err
		}
		return t.Fail(k, at, "is not a pool key (name, workers, profile, kv_tokens, kv_blocks, gpu_memory_utilization, max_num_seqs, max_num_batched_tokens, host_tier, disk_tier)")
	})
	if err != nil {
		return h, err
	}
	var missing []string
	for _, k := range []string{"name", "workers", "profile"} {
		if given[k] == nil {
			missing = append(missing, k)
		}
	}
	switch {
	case len(missing) > 0:
		return h, t.Fail(n, path, "required: "+strings.Join(missing, ", "))
	case given["kv_tokens"] != nil && given["kv_blocks"] != nil:
		return h, t.Fail(given["kv_blocks"], path+".kv_blocks", "kv_tokens and kv_blocks both size the KV cache: give one of them")
	case given["gpu_memory_utilization"] != nil && h.KVSizing != KVSizingProfile:
		return h, t.Fail(given["gpu_memory_utilization"], path+".gpu_memory_utilization", "sizes the KV cache from the profile's memory: give kv_tokens: auto, or leave it out")
	}
	return h, nil
}

// readTier reads a lower tier: its capacity in tokens or GB, its
// bandwidths (gbps unless given).
func readTier(t *wire.YAMLTree, n ast.Node, path string, gbps float64) (*TierConfig, error) {
	tier := &TierConfig{ReadGBps: gbps, WriteGBps: gbps}
	sized := 0
	err := t.Mapping(n, path, func(key string, k, v ast.Node) error {
		at := path + "." + key
		var err error
		switch key {
		case "kv_tokens":
			sized++
			tier.KVTokens, err = t.U64(v, at)
		case "kv_gb":
			sized++
			var gb float64
			if gb, err = t.Float(v, at); err == nil && !(gb > 0 && gb <= 1e9) {
				err = t.Fail(v, at, fmt.Sprintf("expected above 0 and at most 1e9 GB, got %v", gb))
			}
			tier.KVBytes = uint64(gb * 1e9)
		case "read_gbps":
			tier.ReadGBps, err = t.Float(v, at)
		case "write_gbps":
			tier.WriteGBps, err = t.Float(v, at)
		default:
			err = t.Fail(k, at, "is not a tier key (kv_tokens, kv_gb, read_gbps, write_gbps)")
		}
		return err
	})
	switch {
	case err == nil && sized == 0:
		err = t.Fail(n, path, "expected its capacity: kv_tokens or kv_gb")
	case err == nil && sized > 1:
		err = t.Fail(n, path, "kv_tokens and kv_gb both size the tier: give one of them")
	}
	return tier, err
}

// LoadProfile is the profile ref names: a shipped profile's name, or a
// profile file's path (relative to dir unless absolute).
func LoadProfile(ref, dir string) (Profile, error) {
	if p, ok := ShippedProfile(ref); ok {
		return p, nil
	}
	path := ref
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	data, err := readBounded(path)
	if err != nil {
		return Profile{}, fmt.Errorf("%q is neither a shipped profile (%s) nor a file: %w", ref, strings.Join(ShippedProfiles(), ", "), err)
	}
	p, err := ParseProfile(data)
	if err != nil {
		return Profile{}, fmt.Errorf("profile %s: %w", ref, err)
	}
	return p, nil
}

// readBounded reads a profile file, refusing one past the bound configs
// take.
func readBounded(path string) ([]byte, error) {
	data, err := wire.ReadBounded(path)
	if errors.Is(err, wire.ErrTooLarge) {
		err = fmt.Errorf("larger than %d bytes, which no profile needs (is it the right file?)", wire.MaxConfigFileBytes)
	}
	return data, err
}
