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

Waiters are released only by advance_clock, as in Dynamo's
NativeReplayPolicy: place always returns "released": [] (its own request,
when placed, is its "decision"), and observe, prefill_completed and
request_terminal return []. Any other placement the router hands out, in
the response to any callback, is held here; while one is, next_wakeup_ms()
returns the current time and pending_count() counts it, as Dynamo counts a
waiter until its retry, and advance_clock(now_ms) returns the held
placements, then what its own response releases, in the order the router
released them. cancel_pending of a held request takes it back with the
router's dispatch_aborted, as the host never saw it placed. A request the
router rejects, at its place or later from its queue (a class's queue
full: queue_rejected; its slo_ms passed: queue_deadline_exceeded;
queue_timeout_ms), is listed in evidence()["rejected"]: the bridge has no
rejection, so such a place's decision is null, as for one that waits, and
the request is never released.

Every callback's now_ms must be finite, nonnegative and never before the
router's clock (the last accepted call's time), else ValueError with
Dynamo's words, before anything is sent; the router's own clock_regression
then cannot be reached.

KV events: an event's "tier" (AISimulate's, inside "event") and the
"storage_tier" beside it are each device, host_pinned, disk or external
(absent: device) and go to the router as they are; the router indexes the
lower tiers apart and credits their hits with its host and disk weights
(docs/PROTOCOL.md). observe checks every event before it sends any, as
Dynamo does: its worker_id one of the constructor's workers, its dp_rank
(absent: 0) an integer in [0, dp_size), its tiers as above; the first
failure raises ValueError naming events[i] and the field, and nothing is
sent. (The router would skip an event of an unknown worker or rank and
ignore one of an unknown tier, applying the rest.) host_offload and
g3_offload in workers_json are accepted: the router indexes those tiers.

Standard library only.
"""

import hashlib
import json
import math
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
# Dynamo's StorageTier names; the router takes each as it is.
TIERS = ("device", "host_pinned", "disk", "external")
# Dynamo bounds a group key; a longer one is replaced by its digest.
MAX_GROUP_KEY_BYTES = 256
# What a host can match in a router error, beside the router's own words.
ERROR_HINTS = {
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


def _is_int(v):
    # JSON's true is Python's True, an int equal to 1: not a worker id or rank.
    return isinstance(v, int) and not isinstance(v, bool)


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
        self._worker_ids = {w["worker_id"] for w in workers.get("workers", [])}
        self._dp_size = 1 if workers.get("dp_size") is None else workers["dp_size"]  # the router's default
        self._now = 0.0
        # Request id -> its placement, in release order: placed by the
        # router, not yet handed out (only advance_clock does).
        self._held = {}
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
        self._at(now_ms, cmd)
        rid = cmd["request_id"]
        mine = rid not in self._keys  # else a waiting request has the id: the router refuses it
        if mine:
            self._keys[rid] = key
        try:
            resp = self._send(cmd)
        except ValueError:
            if mine:
                del self._keys[rid]
            raise
        decision = None
        for p in resp["placements"]:
            if p["request_id"] == rid and decision is None:
                decision = _selected(p)
            else:
                self._held[p["request_id"]] = _selected(p)
        return json.dumps({"decision": decision, "released": []})

    def observe(self, events_json, now_ms):
        events = json.loads(events_json)
        self._check_events(events)
        resp = self._hold(self._at(now_ms, {"op": "observe", "events": events}))
        self._physical_kv_events += resp.get("evidence", {}).get("events_applied", 0)
        return "[]"

    def dispatch_committed(self, request_id, now_ms):
        self._hold(self._at(now_ms, {"op": "dispatch_committed", "request_id": request_id}))

    def dispatch_aborted(self, request_id, now_ms):
        self._hold(self._at(now_ms, {"op": "dispatch_aborted", "request_id": request_id}))
        self._keys.pop(request_id, None)  # a waiting request ends with its abort

    def prefill_completed(self, request_id, now_ms):
        self._hold(self._at(now_ms, {"op": "prefill_completed", "request_id": request_id}))
        return "[]"

    def request_terminal(self, request_id, now_ms):
        self._hold(self._at(now_ms, {"op": "request_terminal", "request_id": request_id}))
        self._keys.pop(request_id, None)  # a waiting request ends with it
        return "[]"

    def advance_clock(self, now_ms):
        self._hold(self._at(now_ms, {"op": "advance_clock"}))
        out, self._held = list(self._held.values()), {}
        return json.dumps(out)

    def next_wakeup_ms(self):
        if self._held:
            return self._now
        return self._wakeup

    def pending_count(self):
        return self._pending + len(self._held)

    def cancel_pending(self, request_id):
        if request_id in self._held:
            # Still waiting for the host, placed for the router: the abort
            # gives back its booking and any binding it holds. Dropped only
            # once the router took it, so that a failure loses nothing.
            self._hold({"op": "dispatch_aborted", "request_id": request_id})
            del self._held[request_id]
            return True
        resp = self._send({"op": "cancel_pending", "request_id": request_id})
        if resp["cancelled"]:
            self._keys.pop(request_id, None)
        return bool(resp["cancelled"])

    def evidence(self):
        return json.dumps({"physical_kv_events": self._physical_kv_events,
                           "decision_count": self._decision_count,
                           "decisions_captured": self._capture,
                           "decisions": self._decisions,
                           "rejected": self._rejected,
                           "pending_count": self.pending_count()})

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
                # Dynamo: "conversation affinity requires nonempty session identity";
                # "" would key every sessionless request into one group.
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

    def _check_events(self, events):
        """Dynamo's checks of an observe, all before any event is sent."""
        if not isinstance(events, list):
            raise ValueError(f"events: expected a JSON array, got {type(events).__name__}")
        for i, ev in enumerate(events):
            body = ev.get("event") if isinstance(ev, dict) else None
            if not isinstance(body, dict):
                raise ValueError(f"events[{i}]: expected an object with an \"event\" object")
            worker = ev.get("worker_id")
            if not _is_int(worker) or worker not in self._worker_ids:
                raise ValueError(f"events[{i}].worker_id {worker!r}: not one of the workers "
                                 "this policy was built with")
            rank = body.get("dp_rank", 0)
            if not _is_int(rank) or not 0 <= rank < self._dp_size:
                raise ValueError(f"events[{i}].event.dp_rank {rank!r}: expected an integer "
                                 f"in [0, {self._dp_size}) (dp_size {self._dp_size})")
            for field, tier in (("event.tier", body.get("tier", "device")),
                                ("storage_tier", ev.get("storage_tier", "device"))):
                if not isinstance(tier, str) or tier not in TIERS:
                    raise ValueError(f"events[{i}].{field} {tier!r}: expected one of {', '.join(TIERS)}")

    def _at(self, now_ms, cmd):
        """cmd at now_ms, refused before anything is sent as Dynamo's
        advance refuses it. The router's clock is the last accepted call's
        time: a call the router refused moved nothing."""
        # Comparisons, not math.isfinite: a NaN fails each, and an int too
        # big for a float still compares. The clock starts at 0, so never
        # before it is nonnegative too.
        if not (isinstance(now_ms, (int, float)) and not isinstance(now_ms, bool)
                and self._now <= now_ms < math.inf):
            raise ValueError(f"now_ms {now_ms!r} (the clock is at {self._now!r}): "
                             "native replay clock must be finite, nonnegative and monotonic")
        cmd["now_ms"] = now_ms
        return cmd

    def _hold(self, cmd):
        """Sends cmd and holds whatever it places: only advance_clock hands
        placements out."""
        resp = self._send(cmd)
        for p in resp["placements"]:
            self._held[p["request_id"]] = _selected(p)
        return resp

    def _send(self, cmd):
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

    def _record(self, placement, key):
        self._decision_count += 1
        if self._capture:
            self._decisions.append({"request_id": placement["request_id"], "worker_id": placement["worker_id"],
                                    "dp_rank": placement["dp_rank"], "group_key": key,
                                    "binding_reused": placement.get("binding") == "bound",
                                    "overlap_blocks": placement["overlap_blocks"]})
