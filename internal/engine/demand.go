package engine

import (
	"slices"

	"github.com/offline-router/offline-router/internal/affinity"
	"github.com/offline-router/offline-router/internal/kvindex"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/selector"
)

// demand is what a place command asks for, fixed when it arrives: its
// blocks and its constraints. Building it changes nothing.
type demand struct {
	id            string
	role          protocol.Role
	isl           uint64
	islBlocks     uint64
	local         []protocol.LocalBlockHash // the index and active-block walks
	seq           []protocol.SequenceHash   // block addresses where the router writes blocks itself (approximate mode, sglang_cache_aware, predict-on-route)
	privateBlocks uint64                    // blocks without a hash, never shared
	allowed       []uint64
	pin           *uint64
	pinRank       *uint32
	arrival       float64
	tier          int64
	priority      float64          // seconds of queue jump
	class         int              // its policy class, an index of the engine's classes
	key           *affinity.Key    // session affinity key, if any
	session       string           // the session id, "" when none (session_hash)
	bound         *binding         // the bound binding it arrived under, if any
	hardBound     bool             // ... and it must go to that binding's rank
	params        *selector.Params // its own selection params (router_config_override), nil for its role's
	lora          string           // its LoRA adapter, "" for the base model
	fit           int              // its adapter's best fit among the workers (loraFit)
	fitAt         uint64           // the adapter epoch + 1 fit was found at
}

// newDemand checks a place command arriving at time t and derives its
// blocks. An id stays taken until the router has reported the request's end
// (it ended, was cancelled or timed out): the clock moving to t can place a
// waiting request as well as time it out, so the check is against the state
// before the clock moves.
func (e *Engine) newDemand(c *protocol.Command, t float64) (*demand, *protocol.Error) {
	class := e.cfg.ClassIndex(c.PolicyClass)
	if class < 0 { // Dynamo refuses it before anything else looks at the request
		return nil, protocol.Errorf(protocol.CodeUnknownPolicyClass, "field \"policy_class\": unknown router policy class %q", *c.PolicyClass)
	}
	if _, ok := e.requests[c.RequestID]; ok {
		return nil, protocol.Errorf(protocol.CodeDuplicateRequest, "request %q is already in flight", c.RequestID)
	}
	role := firstRole(c.Role, "", protocol.RoleAggregated)
	if e.paramsOf(role).Policy == protocol.PolicyDirect && c.WorkerID == nil {
		// Dynamo: "worker ID required for ... request in Direct routing mode".
		return nil, protocol.Errorf(protocol.CodeInvalidField, "field \"worker_id\": required under policy direct, which takes the worker from the request (Dynamo's Direct routing mode; role %s)", role)
	}
	bs := e.cfg.BlockSize
	d := &demand{
		id: c.RequestID, role: role, isl: c.ISL(),
		allowed: c.AllowedWorkers, pin: c.WorkerID, pinRank: c.DPRank, arrival: t, class: class,
	}
	if c.SessionID != nil {
		d.session = *c.SessionID
	}
	d.lora = deref(c.LoRAName)
	d.key = e.affinityKey(c, d.role)
	if err := e.planAffinity(d, t); err != nil {
		return nil, err
	}
	d.hardBound = d.bound != nil && e.hardAffinity()
	if c.StrictPriority != nil {
		d.tier = *c.StrictPriority
	}
	if c.Priority != nil {
		d.priority = max(*c.Priority, 0) // Dynamo's priority jump: a negative one jumps nothing
	}
	d.islBlocks = d.isl/bs + min(d.isl%bs, 1) // a partial block counts; no overflow near 2^64
	switch {
	case c.Tokens != nil:
		d.local = kvindex.SaltedBlockHashes(c.Tokens, int(bs), kvindex.Salt(deref(c.LoRAName), deref(c.CacheNamespace)))
	case c.BlockHashes != nil:
		if uint64(len(c.BlockHashes)) > d.islBlocks {
			return nil, protocol.Errorf(protocol.CodeInvalidField, "field \"block_hashes\": %d hashes, but input_tokens %d at block_size %d makes only %d blocks",
				len(c.BlockHashes), d.isl, bs, d.islBlocks)
		}
		d.local = c.BlockHashes
	}
	switch {
	case c.SequenceHashes != nil:
		d.seq = c.SequenceHashes
	case !e.cfg.KVEvents || e.routed != nil || e.predicted != nil:
		d.seq = kvindex.SequenceHashes(d.local)
	}
	d.privateBlocks = d.islBlocks - uint64(len(d.local))
	d.params = e.overridden(role, c.RouterConfigOverride)
	return d, nil
}

// overridden is the selection params of a request of role under its
// router_config_override, or nil when it changes none: Dynamo's override
// replaces the credit (before its decay), the prefill scale and the
// temperature for the one request.
func (e *Engine) overridden(role protocol.Role, o *protocol.RouterConfigOverride) *selector.Params {
	if o == nil || o.OverlapScoreCredit == nil && o.PrefillLoadScale == nil && o.RouterTemperature == nil {
		return nil
	}
	p := *e.paramsOf(role)
	if o.OverlapScoreCredit != nil {
		p.OverlapScoreCredit = *o.OverlapScoreCredit
	}
	if o.PrefillLoadScale != nil {
		p.PrefillLoadScale = *o.PrefillLoadScale
	}
	if o.RouterTemperature != nil {
		p.Temperature = *o.RouterTemperature
	}
	return &p
}

// checkPin reports why a pinned demand cannot go to its worker now.
func (e *Engine) checkPin(d *demand) *protocol.Error {
	if d.pin == nil {
		return nil
	}
	id := *d.pin
	w, ok := e.fleet.byID[id]
	switch {
	case !ok && e.fleet.removed.has(id):
		return protocol.Errorf(protocol.CodePinnedWorkerUnavailable, "pinned worker %d was removed", id)
	case !ok:
		return protocol.Errorf(protocol.CodePinnedWorkerUnavailable, "pinned worker %d never became ready", id)
	case w.status != statusReady:
		return protocol.Errorf(protocol.CodePinnedWorkerUnavailable, "pinned worker %d is %s", id, w.status)
	case w.role != d.role:
		return protocol.Errorf(protocol.CodePinnedWorkerUnavailable, "pinned worker %d serves role %s, the request is %s", id, w.role, d.role)
	case d.pinRank != nil && e.fleet.rankOf(w, *d.pinRank) == nil:
		return protocol.Errorf(protocol.CodePinnedWorkerUnavailable, "pinned worker %d has dp ranks %d..%d, not %d",
			id, w.ranks[0].dp, w.ranks[len(w.ranks)-1].dp, *d.pinRank)
	}
	return nil
}

// unfiltered reports whether staticallyAllowed allows every rank.
func (d *demand) unfiltered() bool {
	return d.allowed == nil && d.pin == nil && !(d.hardBound && d.boundTarget() != nil)
}

// staticallyAllowed reports whether rank r of a ready worker of the
// demand's role passes hard affinity, allowed_workers and the pin, and if
// not, why.
func (d *demand) staticallyAllowed(r *rank) (bool, string) {
	if target := d.boundTarget(); d.hardBound && target != nil && r != target {
		return false, protocol.FilterAffinity
	}
	if d.allowed != nil && !slices.Contains(d.allowed, r.w.id) {
		return false, protocol.FilterNotAllowed
	}
	if d.pin != nil && (r.w.id != *d.pin || (d.pinRank != nil && r.dp != *d.pinRank)) {
		return false, protocol.FilterNotPinned
	}
	return true, ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
