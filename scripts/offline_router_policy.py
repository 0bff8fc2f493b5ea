"""AISimulate's placement policy, answered by offline-router.

AISimulate's Python policy bridge (policy API version 1) creates one policy
object per role and calls it as it calls Dynamo's NativeReplayPolicy. This
class is that object, over one offline-router process:

    from offline_router_policy import OfflineRouterPolicy

    policy = OfflineRouterPolicy("aggregated", json.dumps({"policy": "kv_router"}),
                                 json.dumps({"api_version": 1, "dp_size": 1, "block_size": 16,
                                             "total_kv_blocks": 4096, "max_num_batched_tokens": 8192,
                                             "host_offload": False, "g3_offload": False,
                                             "capture_decisions": True,
                                             "workers": [{"worker_id": 1}, {"worker_id": 2}]}))
    out = json.loads(policy.place(json.dumps({"request_id": "r1", "input_tokens": 32, ...}), 0.0))

The binary is $OFFLINE_ROUTER_BIN, else offline-router on PATH. Times are
float milliseconds; JSON strings in and out, as the bridge passes them.

timeout (seconds, None for none; by default $OFFLINE_ROUTER_TIMEOUT_S, unset
or empty: none) bounds each wait for the router, as in the driver: a router
that does not answer in time is killed and the callback raises RouterTimeout,
a RouterDied, which like any RouterDied is not turned into a ValueError; later
callbacks raise RouterClosed. close() or the with block ends the process; a
policy dropped without close() ends it when collected, or at exit.

config_json: {"policy": "kv_router" (Dynamo's cost; also "round_robin",
"random", "least_loaded", "session_hash", "sglang_cache_aware", "llmd"; their
knobs go in "sglang" and "llmd" objects as in the router's config), "affinity": {"mode": "session" | "sibling_group",
"ttl_seconds": N}} (mode "none", "off" or absent: no affinity); every other key goes to the router's config as it is
(docs/PROTOCOL.md, section 2: overlap_score_credit, temperature, seed,
queue_threshold, queue_policy, queue_timeout_ms, the busy thresholds,
prefill_load_model, default_policy_class and policy_classes, ...), and the
router checks it. block_size comes from
workers_json.

With affinity on, every request needs a nonempty session identity, and
under sibling_group a nonempty root (Dynamo's NativeReplayPolicy refuses
one without). Its group key is the material of Dynamo's key
(scripts/affinity_keys.json, the spec with vectors): ["session", scope,
session]; under sibling_group ["siblings", scope, root, parent] for a
request with a parent, which its siblings share, and ["root", scope, root,
session] for one without, apart from its children.

A payload's priority, strict_priority and policy_class go on the router's
place as the bridge passes them (the router takes a negative priority as 0,
as Dynamo's priority jump does). With policy_classes (and default_policy_class) in
config_json the router classifies by policy_class, as Dynamo does; without,
the name is ignored, as Dynamo ignores it. A place the router answers with
an error (unknown_policy_class, all_workers_busy, ...) raises ValueError,
which fails the run, as the bridge takes any provider error.

What the bridge cannot be told is kept here: placements the router
releases in the response of dispatch_committed or dispatch_aborted (whose
result the bridge ignores) are held, next_wakeup_ms() then returns the
current time, and the next callback that returns a list hands them out; a
request the router rejects, at its place or later from its queue (a class's
queue full: queue_rejected; its slo_ms passed: queue_deadline_exceeded;
queue_timeout_ms), is listed in evidence()["rejected"]: the bridge has no
rejection, so such a place's decision is null, as for one that waits, and
the request is never released.

Standard library only.
"""

import hashlib
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from offline_router import FROM_ENV, OfflineRouter, RouterError  # noqa: E402  (the driver beside this file)

__all__ = ["OfflineRouterPolicy"]

API_VERSION = 1
ROLES = ("aggregated", "prefill", "decode")
POLICIES = {"kv_router": "kv", "kv": "kv", "round_robin": "round_robin", "random": "random",
            "least_loaded": "least_loaded", "session_hash": "session_hash",
            "sglang_cache_aware": "sglang_cache_aware", "llmd": "llmd"}
AFFINITY_KEYS = {"session": "session", "sibling_group": "sibling_group"}
# Dynamo bounds a group key; a longer one is replaced by its digest.
MAX_GROUP_KEY_BYTES = 256
# What a host can match in a router error, beside the router's own words.
ERROR_HINTS = {
    "clock_regression": "now_ms must be monotonic (never before the last call's)",
    "duplicate_request": "duplicate request id: it is still in flight",
}


def _binary():
    env = os.environ.get("OFFLINE_ROUTER_BIN")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise FileNotFoundError(f"OFFLINE_ROUTER_BIN={env!r} is not an executable file")
        return env
    found = shutil.which("offline-router")
    if found:
        return found
    raise FileNotFoundError("offline-router not found: set OFFLINE_ROUTER_BIN to the binary, "
                            "or put offline-router on PATH (go build -o offline-router ./cmd/offline-router)")


def _key_material(mode, scope, session, root, parent):
    """The material of Dynamo's affinity group key (scripts/affinity_keys.json
    is its spec and vectors): compact JSON as serde_json writes it, so
    non-ASCII stays as it is. A child's siblings share theirs; a root's is
    its own, apart from its children's."""
    if mode == "session":
        parts = ["session", scope, session]
    elif parent is not None:
        parts = ["siblings", scope, root, parent]
    else:
        parts = ["root", scope, root, session]
    return json.dumps(parts, separators=(",", ":"), ensure_ascii=False)


def _group_key(material):
    """The key sent: the material itself, or, past MAX_GROUP_KEY_BYTES bytes,
    a digest of it, the same on every run. (Dynamo stores a blake3 digest of
    every key; blake3 is not in Python's standard library, and the material
    reads better in the evidence.)"""
    if len(material.encode()) <= MAX_GROUP_KEY_BYTES:
        return material
    return "sha256:" + hashlib.sha256(material.encode()).hexdigest()


def _selected(p):
    return {"request_id": p["request_id"], "worker_id": p["worker_id"], "dp_rank": p["dp_rank"],
            "cached_tokens": p["cached_tokens"], "overlap_blocks": p["overlap_blocks"],
            "best_available_overlap_blocks": p["best_available_overlap_blocks"],
            "isl_blocks": p["isl_blocks"]}


def _is_device(tier):
    return tier is None or tier == "device"


class OfflineRouterPolicy:
    """One role's placement policy: one offline-router process."""

    @classmethod
    def contract(cls):
        return {"api_version": API_VERSION, "roles": list(ROLES), "policies": sorted(POLICIES),
                "affinity_modes": sorted(AFFINITY_KEYS), "implementation": "offline-router"}

    def __init__(self, role, config_json, workers_json, timeout=FROM_ENV):
        """timeout: seconds to wait for each router response (see the module
        docstring); the bridge passes only the first three arguments, so
        $OFFLINE_ROUTER_TIMEOUT_S is its way to set one."""
        if role not in ROLES:
            raise ValueError(f"role {role!r}: expected one of {', '.join(ROLES)}")
        config = json.loads(config_json) if config_json else {}
        workers = json.loads(workers_json)
        if workers.get("api_version") != API_VERSION:
            raise ValueError(f"policy API version {workers.get('api_version')!r} is not supported: "
                             f"this adapter speaks API version {API_VERSION}")
        for tier in ("host_offload", "g3_offload"):
            if workers.get(tier):
                raise ValueError(f"{tier} is on: offline-router models device KV only "
                                 "(no host or G3 offload tiers)")
        self.role = role
        self._capture = bool(workers.get("capture_decisions"))
        self._affinity_key, router_config = self._router_config(config, workers)
        binary = _binary()
        try:
            self._router = OfflineRouter(binary, config=router_config, timeout=timeout)
        except RouterError as e:
            raise ValueError(f"config: {e.code}: {e.message}") from e
        try:
            for w in workers.get("workers", []):
                fields = {"role": role, "dp_size": workers.get("dp_size"),
                          "total_kv_blocks": workers.get("total_kv_blocks"),
                          "max_num_batched_tokens": workers.get("max_num_batched_tokens")}
                self._router.worker_ready(w["worker_id"], **fields)
        except BaseException as e:
            self._router._abandon()  # the process must not outlive a failed constructor
            if isinstance(e, RouterError):
                raise ValueError(f"workers: {e.code}: {e.message}") from e
            raise
        self._now = 0.0
        self._held = []  # released in a response the bridge ignores
        self._pending = 0
        self._wakeup = None
        self._keys = {}  # request id -> its group key, until it is placed
        self._physical_kv_events = 0
        self._decision_count = 0
        self._decisions = []
        self._rejected = []

    @staticmethod
    def _router_config(config, workers):
        config = dict(config)
        policy = config.pop("policy", "kv_router")
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r}: expected one of {', '.join(sorted(POLICIES))}")
        # The bridge reads none of a placement's evidence: "none" halves
        # what each response carries (unless the host asks for it).
        out = {"policy": POLICIES[policy], "evidence": "none"}
        affinity = config.pop("affinity", None) or {}
        mode = affinity.get("mode")
        key = None
        if mode not in (None, "none", "off"):
            if mode not in AFFINITY_KEYS:
                raise ValueError(f"affinity.mode {mode!r}: expected one of {', '.join(sorted(AFFINITY_KEYS))}")
            key = AFFINITY_KEYS[mode]
            out["affinity"] = {"mode": "hard", "key": key}
            if affinity.get("ttl_seconds") is not None:
                out["affinity"]["ttl_ms"] = 1000 * affinity["ttl_seconds"]
        if "block_size" in config and config["block_size"] != workers.get("block_size"):
            raise ValueError(f"block_size {config['block_size']!r} in the config differs from "
                             f"workers' {workers.get('block_size')!r}")
        config.pop("block_size", None)
        if workers.get("block_size") is not None:
            out["block_size"] = workers["block_size"]
        out.update(config)  # the router's own keys, checked by the router
        return key, out

    # -- the bridge's callbacks ---------------------------------------------

    def place(self, payload_json, now_ms):
        cmd, key = self._place_command(json.loads(payload_json))
        rid = cmd["request_id"]
        mine = rid not in self._keys  # else a waiting request has the id: the router refuses it
        if mine:
            self._keys[rid] = key
        try:
            resp = self._send(cmd, now_ms)
        except ValueError:
            if mine:
                del self._keys[rid]
            raise
        decision = None
        released = []
        for p in resp["placements"]:
            if p["request_id"] == rid and decision is None:
                decision = _selected(p)
            else:
                released.append(_selected(p))
        return json.dumps({"decision": decision, "released": self._hand_out(released)})

    def observe(self, events_json, now_ms):
        events = json.loads(events_json)
        for i, ev in enumerate(events):
            tier = ev.get("event", {}).get("tier")
            if not _is_device(tier) or not _is_device(ev.get("storage_tier")):
                raise ValueError(f"events[{i}]: tier {tier or ev.get('storage_tier')!r}: "
                                 "offline-router models device KV only")
        resp = self._send({"op": "observe", "events": events}, now_ms)
        self._physical_kv_events += resp.get("evidence", {}).get("events_applied", 0)
        return json.dumps(self._hand_out(self._released(resp)))

    def dispatch_committed(self, request_id, now_ms):
        self._held += self._released(self._send({"op": "dispatch_committed", "request_id": request_id}, now_ms))

    def dispatch_aborted(self, request_id, now_ms):
        self._held += self._released(self._send({"op": "dispatch_aborted", "request_id": request_id}, now_ms))
        self._keys.pop(request_id, None)  # a waiting request ends with its abort

    def prefill_completed(self, request_id, now_ms):
        return self._listing({"op": "prefill_completed", "request_id": request_id}, now_ms)

    def request_terminal(self, request_id, now_ms):
        out = self._listing({"op": "request_terminal", "request_id": request_id}, now_ms)
        self._keys.pop(request_id, None)  # a waiting request ends with it
        return out

    def advance_clock(self, now_ms):
        return self._listing({"op": "advance_clock"}, now_ms)

    def next_wakeup_ms(self):
        if self._held:
            return self._now
        return self._wakeup

    def pending_count(self):
        return self._pending

    def cancel_pending(self, request_id):
        resp = self._send({"op": "cancel_pending", "request_id": request_id}, None)
        if resp["cancelled"]:
            self._keys.pop(request_id, None)
        return bool(resp["cancelled"])

    def evidence(self):
        return json.dumps({"physical_kv_events": self._physical_kv_events,
                           "decision_count": self._decision_count,
                           "decisions_captured": self._capture,
                           "decisions": self._decisions,
                           "rejected": self._rejected,
                           "pending_count": self._pending})

    # -- the process ----------------------------------------------------------

    def close(self):
        self._router.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self._router.__exit__(exc_type, exc, tb)

    # -- internals ------------------------------------------------------------

    def _place_command(self, payload):
        """The router's place command for a bridge payload, and the request's
        group key; refusals come before anything is sent or recorded."""
        rid = payload.get("request_id")
        if not isinstance(rid, str):
            raise ValueError(f"request_id {rid!r}: expected a string")
        source = payload.get("prompt_token_source")
        if source not in (None, "materialized"):
            raise ValueError(f"prompt_token_source {source!r}: only materialized prompts are supported")
        for pin in ("preferred_dp_rank", "preferred_prefill_dp_rank"):
            if payload.get(pin) is not None:
                raise ValueError(f"{pin} {payload[pin]!r}: DP pins are not supported")
        local = payload.get("local_block_hashes") or []
        seq = payload.get("sequence_hashes") or []
        if seq and len(seq) != len(local):
            raise ValueError(f"{len(local)} local_block_hashes and {len(seq)} sequence_hashes: "
                             "the counts must be equal")
        identity = payload.get("identity") or {}
        if identity.get("session") is not None and not identity.get("lineage_available", False):
            raise ValueError("identity has a session but lineage_available is false: "
                             "affinity needs the request's lineage")
        cmd = {"op": "place", "request_id": rid, "role": self.role, "input_tokens": payload.get("input_tokens", 0)}
        if payload.get("output_tokens") is not None:
            cmd["output_tokens"] = payload["output_tokens"]
        if local:
            cmd["block_hashes"] = local
        if seq:
            cmd["sequence_hashes"] = seq
        for f, v in (("priority", payload.get("priority")), ("strict_priority", payload.get("strict_priority")),
                     ("policy_class", payload.get("policy_class"))):
            if v is not None:
                cmd[f] = v
        key = None
        if self._affinity_key is not None:
            session = identity.get("session", payload.get("session_id"))
            if not session:
                # Dynamo: "conversation affinity requires nonempty session identity"
                raise ValueError("affinity is on: the request needs a nonempty session identity")
            scope, root, parent = identity.get("scope"), identity.get("root"), identity.get("parent")
            if self._affinity_key == "sibling_group" and (not root or parent == ""):
                raise ValueError("sibling_group affinity needs the request's lineage: a nonempty root, "
                                 "and a nonempty parent when it has one")
            key = _group_key(_key_material(self._affinity_key, scope, session, root, parent))
            if self._affinity_key == "sibling_group" and parent is not None:
                cmd["parent_session_id"] = key
            else:
                cmd["session_id"] = key
        return cmd, key

    def _send(self, cmd, now_ms):
        if now_ms is not None:
            cmd["now_ms"] = now_ms
        try:
            resp = self._router.send(cmd)
        except RouterError as e:
            hint = ERROR_HINTS.get(e.code)
            raise ValueError(f"{e.code}: {e.message}" + (f" ({hint})" if hint else "")) from e
        self._now = float(resp["now_ms"])
        self._pending = resp["pending_count"]
        self._wakeup = None if resp["next_wakeup_ms"] is None else float(resp["next_wakeup_ms"])
        for p in resp["placements"]:
            self._record(p, self._keys.pop(p["request_id"], None))
        for r in resp.get("rejected", []):
            self._keys.pop(r["request_id"], None)
            self._rejected.append(r)
        return resp

    def _released(self, resp):
        return [_selected(p) for p in resp["placements"]]

    def _listing(self, cmd, now_ms):
        return json.dumps(self._hand_out(self._released(self._send(cmd, now_ms))))

    def _hand_out(self, released):
        out, self._held = self._held + released, []
        return out

    def _record(self, placement, key):
        self._decision_count += 1
        if self._capture:
            self._decisions.append({"request_id": placement["request_id"], "worker_id": placement["worker_id"],
                                    "dp_rank": placement["dp_rank"], "group_key": key,
                                    "binding_reused": placement.get("binding") == "bound",
                                    "overlap_blocks": placement["overlap_blocks"]})
