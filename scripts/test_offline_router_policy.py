"""Tests of OfflineRouterPolicy, called as AISimulate's policy bridge calls it,
and of the driver's process handling under it (finalizer, timeouts).

Needs the binary: OFFLINE_ROUTER_BIN, or offline-router on PATH. Run:
    go build -o /tmp/offline-router ./cmd/offline-router
    OFFLINE_ROUTER_BIN=/tmp/offline-router python3 -m unittest -v scripts/test_offline_router_policy.py
(`go test ./cmd/offline-router/` builds the binary and runs this suite.)
"""

import contextlib
import gc
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from offline_router import (TIMEOUT_ENV, OfflineRouter, RouterClosed, RouterDied,  # noqa: E402
                            RouterTimeout)
from offline_router_policy import MAX_GROUP_KEY_BYTES, OfflineRouterPolicy, _binary, _key_material  # noqa: E402

SELECTED = {"request_id", "worker_id", "dp_rank", "cached_tokens", "overlap_blocks",
            "best_available_overlap_blocks", "isl_blocks"}


def workers(n=2, **over):
    w = {"api_version": 1, "dp_size": 1, "block_size": 4, "total_kv_blocks": 1000,
         "max_num_batched_tokens": 64, "host_offload": False, "g3_offload": False,
         "capture_decisions": True, "workers": [{"worker_id": i + 1} for i in range(n)]}
    w.update(over)
    return json.dumps(w)


def config(mode=None, ttl=None, **router):
    c = {"policy": "kv_router", **router}
    if mode:
        c["affinity"] = {"mode": mode, "ttl_seconds": ttl}
    return json.dumps(c)


def req(rid, blocks=(1, 2), scope="play", session=None, parent=None, root=None, **over):
    p = {"request_id": rid, "input_tokens": 4 * len(blocks), "output_tokens": 8,
         "local_block_hashes": list(blocks), "sequence_hashes": [100 + b for b in blocks],
         "priority": None, "strict_priority": None, "policy_class": None, "preferred_dp_rank": None,
         "preferred_prefill_dp_rank": None, "prompt_token_source": "materialized",
         "authored_request_id": rid, "session_id": session,
         "identity": {"scope": scope, "session": session, "root": session if root is None else root, "parent": parent,
                      "lineage_available": True}}
    p.update(over)
    return json.dumps(p)


def stored(worker, event_id, blocks, tier=None, parent=None, storage_tier=None, dp_rank=0):
    """A store of blocks (block hash 100 + local hash), under the block of
    hash parent; tier is AISimulate's, inside the event."""
    ev = {"event_id": event_id, "dp_rank": dp_rank,
          "data": {"stored": {"parent_hash": parent, "start_position": 0,
                              "blocks": [{"block_hash": 100 + b, "tokens_hash": b, "token_ids": [b] * 4,
                                          "mm_extra_info": None} for b in blocks]}}}
    if tier:
        ev["tier"] = tier
    out = {"worker_id": worker, "event": ev}
    if storage_tier:
        out["storage_tier"] = storage_tier
    return out


class PolicyTest(unittest.TestCase):
    def policy(self, cfg=None, wk=None, role="aggregated"):
        p = OfflineRouterPolicy(role, cfg or config(), wk or workers())
        self.addCleanup(p.close)
        return p

    def evidence(self, p):
        return json.loads(p.evidence())


class Construction(PolicyTest):
    def test_contract_on_the_class(self):
        self.assertEqual(OfflineRouterPolicy.contract()["api_version"], 1)

    def test_missing_binary_names_both_places(self):
        with mock.patch.dict(os.environ, {"OFFLINE_ROUTER_BIN": "", "PATH": tempfile.gettempdir()}):
            with self.assertRaises(FileNotFoundError) as e:
                OfflineRouterPolicy("aggregated", config(), workers())
        self.assertIn("OFFLINE_ROUTER_BIN", str(e.exception))
        self.assertIn("PATH", str(e.exception))

    def test_refused_workers(self):
        with self.assertRaises(ValueError) as e:
            OfflineRouterPolicy("aggregated", config(), workers(api_version=2))
        self.assertIn("API version", str(e.exception))
        with self.assertRaises(ValueError):
            OfflineRouterPolicy("encode", config(), workers())

    def test_offload_tiers_are_accepted(self):
        # The router indexes host and disk tiers: catches the old refusal
        # of host_offload or g3_offload coming back.
        p = self.policy(wk=workers(host_offload=True, g3_offload=True))
        self.assertIsNotNone(json.loads(p.place(req("a"), 0.0))["decision"])

    def test_a_dead_router_carries_its_stderr(self):
        with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
            f.write("#!/bin/sh\necho 'the router broke' >&2\nexit 3\n")
        self.addCleanup(os.unlink, f.name)
        os.chmod(f.name, 0o755)
        with mock.patch.dict(os.environ, {"OFFLINE_ROUTER_BIN": f.name}):
            with self.assertRaises(RouterDied) as e:
                OfflineRouterPolicy("aggregated", config(), workers())
        self.assertIn("the router broke", e.exception.stderr)

    def test_router_config_passes_through_and_is_checked(self):
        with self.assertRaises(ValueError) as e:
            OfflineRouterPolicy("aggregated", config(no_such_key=1), workers())
        self.assertIn("no_such_key", str(e.exception))


class Callbacks(PolicyTest):
    def test_every_callback(self):
        p = self.policy()
        self.assertEqual(json.loads(p.observe(json.dumps([stored(2, 1, [1, 2])]), 0.0)), [])
        self.assertEqual(self.evidence(p)["physical_kv_events"], 1)
        out = json.loads(p.place(req("a"), 1.0))
        self.assertEqual(set(out["decision"]), SELECTED)
        self.assertEqual((out["decision"]["worker_id"], out["decision"]["overlap_blocks"],
                          out["decision"]["cached_tokens"], out["decision"]["isl_blocks"]), (2, 2, 8, 2))
        self.assertEqual(out["released"], [])
        self.assertIsNone(p.dispatch_committed("a", 1.0))
        self.assertEqual(json.loads(p.prefill_completed("a", 2.0)), [])
        self.assertEqual(json.loads(p.request_terminal("a", 3.0)), [])
        self.assertEqual(json.loads(p.advance_clock(4.0)), [])
        self.assertIsNone(p.next_wakeup_ms())
        self.assertEqual(p.pending_count(), 0)
        self.assertIs(p.cancel_pending("a"), False)
        json.loads(p.place(req("b"), 5.0))
        self.assertIsNone(p.dispatch_aborted("b", 5.0))
        ev = self.evidence(p)
        self.assertEqual((ev["decision_count"], ev["decisions_captured"]), (2, True))
        self.assertEqual([d["request_id"] for d in ev["decisions"]], ["a", "b"])

    def test_peer_policies_and_their_knobs(self):
        # sglang_cache_aware never hears KV events: worker 2's stored blocks
        # do not draw "a", which goes to the first idle worker; llmd's
        # prefix scorer follows them to worker 2.
        for policy, knobs, worker in (("sglang_cache_aware", {"sglang": {"cache_threshold": 0.9}}, 1),
                                      ("llmd", {"llmd": {"queue_scorer_weight": 1}}, 2)):
            p = self.policy(config(**{"policy": policy, **knobs}))
            p.observe(json.dumps([stored(2, 1, [1, 2])]), 0.0)
            self.assertEqual(json.loads(p.place(req("a"), 1.0))["decision"]["worker_id"], worker, policy)
        with self.assertRaises(ValueError) as e:
            OfflineRouterPolicy("aggregated", config(policy="llmd", llmd={"queue_weight": 1}), workers())
        self.assertIn("queue_weight", str(e.exception))
        self.assertIn("llmd", OfflineRouterPolicy.contract()["policies"])

    def test_roles(self):
        for role in ("prefill", "decode"):
            p = self.policy(role=role)
            self.assertIsNotNone(json.loads(p.place(req("a"), 0.0))["decision"])

    def test_router_errors_are_value_errors_a_host_can_match(self):
        p = self.policy()
        p.place(req("a"), 5.0)
        with self.assertRaises(ValueError) as e:
            p.place(req("a"), 5.0)
        self.assertIn("duplicate", str(e.exception))


    def test_refusals_record_nothing(self):
        p = self.policy(config("session"))
        cases = ((dict(prompt_token_source="synthetic"), "materialized"),
                 (dict(preferred_dp_rank=0), "DP pins"), (dict(preferred_prefill_dp_rank=1), "DP pins"),
                 (dict(sequence_hashes=[101]), "counts"))
        for over, word in cases:
            with self.assertRaises(ValueError) as e:
                p.place(req("a", session="s", **over), 0.0)
            self.assertIn(word, str(e.exception))
        no_lineage = json.loads(req("a", session="s"))
        no_lineage["identity"]["lineage_available"] = False
        with self.assertRaises(ValueError) as e:
            p.place(json.dumps(no_lineage), 0.0)
        self.assertIn("lineage", str(e.exception))
        self.assertEqual((self.evidence(p)["decision_count"], p.pending_count()), (0, 0))
        self.assertIsNotNone(json.loads(p.place(req("a", session="s"), 0.0))["decision"])


class Tiers(PolicyTest):
    def cached(self, events):
        p = self.policy()
        p.observe(json.dumps(events), 0.0)
        self.assertEqual(self.evidence(p)["physical_kv_events"], len(events))
        return json.loads(p.place(req("a", blocks=(1, 2, 3, 4, 5)), 1.0))["decision"]["cached_tokens"]

    def test_a_lower_tier_store_extends_the_device_prefix(self):
        # Device blocks 1, 2 credit 2 x 4 tokens; a host_pinned store of 3
        # under device block 102 adds 0.75 x 4 (the router's default host
        # weight): 11; disk 4 and external 5 below it add 0.25 x 4 each
        # (its disk weight): 13. Catches the old refusal of a lower tier,
        # a tier dropped (block 3 taken as device: 12), or renamed on the
        # way (the router ignores a name it does not know: 8).
        device = [stored(1, 1, [1, 2])]
        host = [stored(1, 2, [3], tier="host_pinned", parent=102)]
        lower = [stored(1, 3, [4], tier="disk", parent=103), stored(1, 4, [5], tier="external", parent=104)]
        self.assertEqual(self.cached(device), 8)
        self.assertEqual(self.cached(device + host), 11)
        self.assertEqual(self.cached(device + host + lower), 13)
        # Dynamo's own key beside the event, and "device" spelt out.
        spelt = [stored(1, 1, [1, 2], tier="device"), stored(1, 2, [3], storage_tier="host_pinned", parent=102)]
        self.assertEqual(self.cached(spelt), 11)

    def test_an_unknown_tier_is_refused_by_name(self):
        # The router ignores an event tier it does not know and applies the
        # rest: catches the adapter's check gone (no error, block 1 stored).
        # A null is no tier either, as in Dynamo's String field. A bad
        # storage_tier the router refuses itself, but without events[1]
        # leading its words.
        null = stored(1, 2, [2])
        null["event"]["tier"] = None
        p = self.policy()
        for ev, field, value in ((stored(1, 2, [2], tier="host"), "event.tier", "host"),
                                 (null, "event.tier", None),
                                 (stored(1, 2, [2], storage_tier="gpu"), "storage_tier", "gpu")):
            with self.assertRaises(ValueError) as e:
                p.observe(json.dumps([stored(2, 1, [1]), ev]), 0.0)
            self.assertTrue(str(e.exception).startswith(f"events[1].{field} {value!r}:"), str(e.exception))
        self.assertEqual(self.evidence(p)["physical_kv_events"], 0)


class EventChecks(PolicyTest):
    def test_observe_checks_every_event_before_sending_any(self):
        # Each bad second event after a good first one. The router would
        # skip an unknown worker's or rank's event (unknown_worker,
        # unknown_dp_rank) and apply the first: catches any one check gone,
        # or events sent before all are checked, by the place after, which
        # would then find blocks 1, 2 on worker 2. The bad calls' now_ms 5
        # must not move the clock: the good observe at 1 follows them.
        bad = []
        for field, value in (("worker_id", 9), ("worker_id", True), ("worker_id", "1"),
                             ("dp_rank", 1), ("dp_rank", -1), ("dp_rank", True), ("dp_rank", None)):
            ev = stored(1, 2, [3])
            if field == "worker_id":
                ev["worker_id"] = value
                bad.append((ev, "events[1].worker_id"))
            else:
                ev["event"]["dp_rank"] = value
                bad.append((ev, "events[1].event.dp_rank"))
        bad.append((stored(1, 2, [3], tier="hbm"), "events[1].event.tier"))
        bad.append(({"worker_id": 1}, "events[1]"))

        def run(p):
            p.observe(json.dumps([stored(1, 1, [7])]), 1.0)
            return json.loads(p.place(req("a"), 2.0)), self.evidence(p)

        p = self.policy()
        for ev, name in bad:
            with self.assertRaises(ValueError) as e:
                p.observe(json.dumps([stored(2, 1, [1, 2]), ev]), 5.0)
            self.assertTrue(str(e.exception).startswith(name), (name, str(e.exception)))
        got = run(p)
        self.assertEqual(got[0]["decision"]["overlap_blocks"], 0)
        self.assertEqual(got, run(self.policy()))  # as if the bad calls never happened

    def test_a_rank_below_dp_size_is_taken(self):
        # Catches a bound of rank 0 alone, or one short of dp_size.
        p = self.policy(wk=workers(dp_size=2))
        self.assertEqual(json.loads(p.observe(json.dumps([stored(2, 1, [1, 2], dp_rank=1)]), 0.0)), [])
        self.assertEqual(self.evidence(p)["physical_kv_events"], 1)
        with self.assertRaisesRegex(ValueError, r"events\[0\]\.event\.dp_rank 2"):
            p.observe(json.dumps([stored(2, 2, [3], dp_rank=2)]), 0.0)


class Releases(PolicyTest):
    def test_waiters_are_released_only_by_advance_clock(self):
        # Linear prefill decay at 2 tokens/ms, one worker of batch 64 (the
        # golden queue_linear_decay): a's 200 tokens keep b waiting until
        # 68 ms. c's place at 70 moves the clock past 68, so the router
        # places b in c's response; c waits until 118. advance_clock(500)
        # hands out b, held since 70, then c, released in its own response.
        # Catches b in place's "released" (the old behaviour), the held
        # ones not counted as pending or not waking the host now, the held
        # ones lost, or handed out after advance_clock's own.
        p = self.policy(config(queue_threshold=1, prefill_load_model="linear", prefill_tokens_per_ms=2),
                        workers(n=1))
        self.assertIsNotNone(json.loads(p.place(req("a", blocks=(), input_tokens=200), 0.0))["decision"])
        self.assertIsNone(json.loads(p.place(req("b", blocks=(), input_tokens=100), 10.0))["decision"])
        self.assertEqual(p.next_wakeup_ms(), 68.0)
        self.assertEqual(json.loads(p.place(req("c", blocks=(), input_tokens=16), 70.0)),
                         {"decision": None, "released": []})
        self.assertEqual((p.next_wakeup_ms(), p.pending_count()), (70.0, 2))
        self.assertEqual(self.evidence(p)["pending_count"], 2)
        self.assertEqual([s["request_id"] for s in json.loads(p.advance_clock(500.0))], ["b", "c"])
        self.assertEqual((p.next_wakeup_ms(), p.pending_count()), (None, 0))
        self.assertEqual(json.loads(p.advance_clock(500.0)), [])  # handed out once

    def test_list_callbacks_return_nothing(self):
        # One worker of batch 8 (queue_threshold 0.5) behind x: x's prefill
        # completing, then its end, each let the router place the next
        # waiter in that callback's response; under linear decay an
        # observe's time does. Each returns [] and the placement waits for
        # advance_clock. Catches any of them handing it out (the old
        # behaviour) or dropping it.
        def held(p, t):
            self.assertEqual((p.next_wakeup_ms(), p.pending_count()), (t, 1))
            return [s["request_id"] for s in json.loads(p.advance_clock(t))]

        p = self.policy(config(queue_threshold=0.5), workers(n=1, max_num_batched_tokens=8))
        p.place(req("x"), 0.0)
        p.place(req("a", blocks=(3, 4)), 1.0)
        p.dispatch_committed("x", 1.0)
        self.assertEqual(json.loads(p.prefill_completed("x", 2.0)), [])
        self.assertEqual(held(p, 2.0), ["a"])
        p.dispatch_committed("a", 2.0)
        p.prefill_completed("a", 2.0)
        p.place(req("b", blocks=(5, 6)), 3.0)  # x and a decode: b's prefill fits
        p.dispatch_committed("b", 3.0)
        p.place(req("c", blocks=(7, 8)), 3.0)  # b's prefill is busy: c waits
        self.assertEqual(json.loads(p.request_terminal("b", 4.0)), [])
        self.assertEqual(held(p, 4.0), ["c"])

        p = self.policy(config(queue_threshold=1, prefill_load_model="linear", prefill_tokens_per_ms=2), workers(n=1))
        p.place(req("a", blocks=(), input_tokens=200), 0.0)
        p.place(req("b", blocks=(), input_tokens=100), 10.0)
        self.assertEqual(json.loads(p.observe(json.dumps([stored(1, 1, [9])]), 70.0)), [])
        self.assertEqual(held(p, 70.0), ["b"])

    def test_a_held_placement_is_cancelled_and_its_booking_freed(self):
        # b waits on a's binding; a's commit makes the router place b, held
        # for advance_clock: to the host b is still waiting, so
        # cancel_pending takes it back (Dynamo's waiter leaves its queue).
        # Catches the router's "cancelled: false" for a placed request
        # passed on, b handed out after all, or its booking kept.
        p = self.policy(config("session", 60))
        p.place(req("a", session="s"), 0.0)
        p.place(req("b", session="s"), 0.0)
        p.dispatch_committed("a", 1.0)
        self.assertEqual(p.pending_count(), 1)
        self.assertIs(p.cancel_pending("b"), True)
        self.assertEqual((p.pending_count(), p.next_wakeup_ms()), (0, None))
        self.assertEqual(json.loads(p.advance_clock(1.0)), [])
        self.assertEqual([r["request_id"] for r in p._router.inspect()["requests"]], ["a"])
        self.assertIs(p.cancel_pending("b"), False)
        self.assertIsNotNone(json.loads(p.place(req("b", session="s"), 1.0))["decision"])  # its id is free


class Clock(PolicyTest):
    def test_the_clock_must_be_finite_nonnegative_and_monotonic(self):
        # Every callback, every bad time, refused in Dynamo's words before
        # anything is sent. Catches a callback without the check (the
        # router's clock_regression, invalid_field or a JSON error instead,
        # and a send), a check after the send, or one that takes an equal
        # time as a regression.
        p = self.policy()
        p.place(req("a"), 5.0)
        calls = (lambda t: p.place(req("b"), t), lambda t: p.observe(json.dumps([stored(1, 1, [1])]), t),
                 lambda t: p.dispatch_committed("a", t), lambda t: p.dispatch_aborted("a", t),
                 lambda t: p.prefill_completed("a", t), lambda t: p.request_terminal("a", t),
                 p.advance_clock)
        with mock.patch.object(p._router, "send", wraps=p._router.send) as send:
            for call in calls:
                for t in (4.0, 4, -1.0, float("nan"), float("inf"), -float("inf"), None, "6", True):
                    with self.assertRaises(ValueError) as e:
                        call(t)
                    self.assertIn("native replay clock must be finite, nonnegative and monotonic", str(e.exception))
                    self.assertIn(repr(t), str(e.exception))
                    self.assertIn("5.0", str(e.exception))
            self.assertEqual(send.call_count, 0)
        with self.assertRaisesRegex(ValueError, "native replay clock"):
            self.policy().advance_clock(True)  # JSON's true, not a time, though past a clock at 0
        self.assertEqual(json.loads(p.advance_clock(5)), [])  # the same time is fine, an int too
        self.assertEqual(json.loads(p.place(req("b"), 5.0))["released"], [])
        self.assertEqual(self.evidence(p)["decision_count"], 2)

    def test_a_refused_call_moves_no_clock(self):
        # The router applies nothing of a failed command, its now_ms
        # included; the adapter's bound is the router's clock, so a time
        # after the refused one's is still fine. Catches the bound taken
        # from the last call made rather than the last accepted.
        p = self.policy()
        p.place(req("a"), 1.0)
        with self.assertRaisesRegex(ValueError, "duplicate"):
            p.place(req("a"), 9.0)
        self.assertEqual(json.loads(p.advance_clock(2.0)), [])


CLASSES = {"default_policy_class": "regular",
           "policy_classes": [{"name": "premium", "slo_ms": 600000, "quantum": 512},
                              {"name": "regular", "slo_ms": 600000, "quantum": 128}]}


class Classes(PolicyTest):
    def test_a_class_reaches_the_router(self):
        # The router classifies by the payload's policy_class: a name of no
        # class is its unknown_policy_class, refused before anything is
        # booked. Catches the class dropped (the router would place "gold"
        # in the default class) or the adapter's old refusal. Needs the
        # wire's policy_class and policy_classes, and the engine's classes.
        p = self.policy(config(**CLASSES))
        self.assertIsNotNone(json.loads(p.place(req("a", policy_class="premium"), 0.0))["decision"])
        self.assertIsNotNone(json.loads(p.place(req("b"), 0.0))["decision"])  # none: the default class
        with self.assertRaises(ValueError) as e:
            p.place(req("c", policy_class="gold"), 1.0)
        self.assertIn("unknown_policy_class", str(e.exception))
        self.assertIn("gold", str(e.exception))
        self.assertEqual((self.evidence(p)["decision_count"], p.pending_count()), (2, 0))
        self.assertIsNotNone(json.loads(p.place(req("c", policy_class="regular"), 1.0))["decision"])

    def test_without_classes_a_class_is_ignored(self):
        # As Dynamo's fallback profile ignores a requested name. Catches the
        # adapter's old refusal. Needs the wire's policy_class on place.
        p = self.policy()
        self.assertIsNotNone(json.loads(p.place(req("a", policy_class="gold"), 0.0))["decision"])

    def test_a_class_past_its_slo_is_rejected_in_the_evidence(self):
        # Dynamo's slo_rejection case: the worker is busy above 0 prefill
        # tokens, so "a" of class latency waits; when the blocker ends at
        # 200 ms, past a's deadline (1 + 100 ms), the queue's next poll
        # rejects it, queue_deadline_exceeded, which the bridge cannot be
        # told: the evidence lists it. Needs the engine's slo_ms expiry.
        classes = {"default_policy_class": "standard",
                   "policy_classes": [{"name": "standard", "slo_ms": 30000, "quantum": 512, "prefill_busy_threshold": 0},
                                      {"name": "latency", "slo_ms": 100, "quantum": 512, "prefill_busy_threshold": 0}]}
        p = self.policy(config(**classes), workers(n=1))
        self.assertIsNotNone(json.loads(p.place(req("x"), 0.0))["decision"])
        self.assertIsNone(json.loads(p.place(req("a", blocks=(3, 4), policy_class="latency"), 1.0))["decision"])
        self.assertEqual(p.pending_count(), 1)
        p.request_terminal("x", 200.0)
        self.assertEqual([(r["request_id"], r["code"]) for r in self.evidence(p)["rejected"]],
                         [("a", "queue_deadline_exceeded")])
        self.assertEqual(p.pending_count(), 0)

    def test_a_class_queue_full_is_rejected_in_the_evidence(self):
        # A class with a queue limit of 0 places what it can and rejects
        # what would wait (Dynamo's "limit 0 keeps the direct path"): "a"
        # finds the worker busy, its place is rejected, queue_rejected, in
        # the place's own response; the bridge's decision is null and the
        # evidence lists it, nothing waits. Catches a rejection in the
        # place's response taken for a wait (pending_count 1, no evidence).
        # Needs the engine's queue limits.
        classes = {"default_policy_class": "standard",
                   "policy_classes": [{"name": "standard", "slo_ms": 30000, "quantum": 512},
                                      {"name": "capped", "slo_ms": 30000, "quantum": 512, "prefill_busy_threshold": 0,
                                       "request_queue_limit_per_worker": 0}]}
        p = self.policy(config(**classes), workers(n=1))
        self.assertIsNotNone(json.loads(p.place(req("x"), 0.0))["decision"])
        out = json.loads(p.place(req("a", blocks=(3, 4), policy_class="capped"), 1.0))
        self.assertEqual(out, {"decision": None, "released": []})
        self.assertEqual([(r["request_id"], r["code"]) for r in self.evidence(p)["rejected"]], [("a", "queue_rejected")])
        self.assertEqual(p.pending_count(), 0)

    def test_a_negative_priority_jumps_nothing(self):
        # Dynamo's jump is max(priority, 0): "a", priority -5, and "b",
        # priority 0, wait fcfs behind "x"; clamped, a's score (0 - 0.001 s)
        # beats b's (0 - 0.002 s) and a goes first when x ends; taken raw,
        # a's -5.001 would put b first. Catches the router's clamp dropped
        # (internal/engine demand.go).
        p = self.policy(config(queue_threshold=0.5), workers(n=1, max_num_batched_tokens=8))
        p.place(req("x"), 0.0)
        self.assertIsNone(json.loads(p.place(req("a", blocks=(3, 4), priority=-5), 1.0))["decision"])
        self.assertIsNone(json.loads(p.place(req("b", blocks=(5, 6), priority=0), 2.0))["decision"])
        self.assertEqual(json.loads(p.request_terminal("x", 3.0)), [])  # released, held for advance_clock
        self.assertEqual([s["request_id"] for s in json.loads(p.advance_clock(3.0))], ["a"])
        self.assertEqual(json.loads(p.request_terminal("a", 4.0)), [])
        self.assertEqual([s["request_id"] for s in json.loads(p.advance_clock(4.0))], ["b"])


class Affinity(PolicyTest):
    def test_waiter_released_at_the_same_time_after_the_commit(self):
        p = self.policy(config("session", 60))
        first = json.loads(p.place(req("a", session="s"), 0.0))["decision"]
        self.assertIsNone(json.loads(p.place(req("b", session="s"), 1.0))["decision"])
        self.assertEqual(p.pending_count(), 1)
        self.assertIsNone(p.dispatch_committed("a", 2.0))
        self.assertEqual(p.next_wakeup_ms(), 2.0)  # held by the adapter: wake me now
        out = json.loads(p.advance_clock(2.0))
        self.assertEqual([(s["request_id"], s["worker_id"]) for s in out], [("b", first["worker_id"])])
        self.assertIsNone(p.next_wakeup_ms())
        self.assertEqual(json.loads(p.advance_clock(2.0)), [])  # handed out once
        self.assertTrue(self.evidence(p)["decisions"][1]["binding_reused"])

    def test_abort_promotes_the_waiter(self):
        p = self.policy(config("session", 60))
        p.place(req("a", session="s"), 0.0)
        p.place(req("b", session="s"), 0.0)
        p.place(req("c", session="s"), 0.0)
        self.assertEqual(p.pending_count(), 2)
        p.dispatch_aborted("a", 1.0)
        self.assertEqual(p.next_wakeup_ms(), 1.0)
        out = json.loads(p.place(req("d", session="other"), 1.0))
        self.assertEqual(out["released"], [])  # only advance_clock hands b out
        self.assertEqual(p.pending_count(), 2)  # b held, c waiting for b's commit
        self.assertEqual([s["request_id"] for s in json.loads(p.advance_clock(1.0))], ["b"])
        self.assertEqual(p.pending_count(), 1)
        p.dispatch_committed("b", 2.0)
        self.assertEqual(json.loads(p.request_terminal("d", 2.0)), [])
        self.assertEqual([s["request_id"] for s in json.loads(p.advance_clock(2.0))], ["c"])
        self.assertEqual(p.pending_count(), 0)

    def test_cancel(self):
        p = self.policy(config("session", 60))
        p.place(req("a", session="s"), 0.0)
        p.place(req("b", session="s"), 0.0)
        self.assertIs(p.cancel_pending("b"), True)
        self.assertIs(p.cancel_pending("b"), False)
        self.assertIs(p.cancel_pending("never-seen"), False)
        self.assertEqual(p.pending_count(), 0)
        p.dispatch_committed("a", 1.0)
        self.assertEqual(json.loads(p.advance_clock(1.0)), [])

    def test_binding_expires_at_last_release_plus_ttl(self):
        p = self.policy(config("session", 1))
        for rid, t in (("a", 0.0), ("b", 999.5)):  # b arrives before a's lease expires
            p.place(req(rid, session="s"), t)
            p.dispatch_committed(rid, t)
            p.request_terminal(rid, t + 10)
        p.place(req("c", session="s"), 999.5 + 10 + 1000)  # exactly b's release + TTL: fresh
        reused = [d["binding_reused"] for d in self.evidence(p)["decisions"]]
        self.assertEqual(reused, [False, True, False])

    def test_key_material_matches_the_spec(self):
        # scripts/affinity_keys.json: Dynamo's key shapes and serde_json's
        # escaping. Catches a root keyed as its children, a missing scope
        # written as "" instead of null, or non-ASCII escaped.
        with open(os.path.join(HERE, "affinity_keys.json"), encoding="utf-8") as f:
            spec = json.load(f)
        for v in spec["vectors"]:
            got = _key_material(v["mode"], v["scope"], v["session"], v["root"], v["parent"])
            self.assertEqual(got, v["key"], v["comment"])

    def test_a_parent_and_its_children_are_apart(self):
        # Dynamo keys a root ["root",scope,root,session] and its children
        # ["siblings",scope,root,parent]: the evidence shows two groups.
        p = self.policy(config("sibling_group", 60))
        p.place(req("parent", session="parent", root="parent"), 0.0)
        p.place(req("child1", session="c1", root="parent", parent="parent"), 0.0)
        p.dispatch_committed("child1", 0.0)  # its binding commits: its sibling joins it
        p.place(req("child2", session="c2", root="parent", parent="parent"), 0.0)
        keys = [d["group_key"] for d in self.evidence(p)["decisions"]]
        self.assertEqual(keys, ['["root","play","parent","parent"]', '["siblings","play","parent","parent"]',
                                '["siblings","play","parent","parent"]'])

    def test_affinity_needs_a_session(self):
        # Dynamo refuses an empty session as it refuses a missing one.
        # Catches a test of None alone ("" passes: every sessionless request
        # in one group) or of "" alone (a missing one passes, keyed null).
        missing = json.loads(req("c"))
        del missing["identity"]["session"], missing["session_id"]
        for mode in ("session", "sibling_group"):
            p = self.policy(config(mode, 60))
            for payload in (req("a", session="", root="r"), req("b", session=None, root="r"), json.dumps(missing)):
                with self.assertRaisesRegex(ValueError, "nonempty session"):
                    p.place(payload, 0.0)
            self.assertEqual((p.pending_count(), self.evidence(p)["decision_count"]), (0, 0))
            self.assertIsNotNone(json.loads(p.place(req("a", session="s"), 0.0))["decision"])

    def test_scopes_never_share_a_binding(self):
        p = self.policy(config("session", 60))
        p.place(req("a", scope="play1", session="s"), 0.0)
        self.assertIsNotNone(json.loads(p.place(req("b", scope="play2", session="s"), 0.0))["decision"])
        keys = [d["group_key"] for d in self.evidence(p)["decisions"]]
        self.assertNotEqual(keys[0], keys[1])
        # Names that a plain separator would confuse stay apart.
        p.place(req("c", scope="x/y", session="z"), 0.0)
        self.assertIsNotNone(json.loads(p.place(req("d", scope="x", session="y/z"), 0.0))["decision"])

    def test_long_identities_give_bounded_stable_keys(self):
        long = "é" * 128  # 256 bytes each
        p = self.policy(config("sibling_group", 60))
        q = self.policy(config("sibling_group", 60))
        for pol in (p, q):
            pol.place(req("a", scope=long, session=long, parent=long + "1"), 0.0)
            pol.place(req("b", scope=long, session=long, parent=long + "2"), 0.0)
        kp = [d["group_key"] for d in self.evidence(p)["decisions"]]
        self.assertEqual(kp, [d["group_key"] for d in self.evidence(q)["decisions"]])
        self.assertNotEqual(kp[0], kp[1])
        self.assertTrue(all(len(k.encode()) <= MAX_GROUP_KEY_BYTES for k in kp), kp)

    def test_capture_off_keeps_counting(self):
        p = self.policy(wk=workers(capture_decisions=False))
        p.place(req("a"), 0.0)
        ev = self.evidence(p)
        self.assertEqual((ev["decision_count"], ev["decisions_captured"], ev["decisions"]), (1, False, []))

    def test_queue_timeout_rejections_are_in_the_evidence(self):
        p = self.policy(config(queue_threshold=0.5, queue_timeout_ms=100), workers(n=1, max_num_batched_tokens=8))
        p.place(req("a"), 0.0)
        self.assertIsNone(json.loads(p.place(req("b"), 1.0))["decision"])
        self.assertEqual(p.next_wakeup_ms(), 101.0)
        self.assertEqual(json.loads(p.advance_clock(101.0)), [])
        self.assertEqual([r["request_id"] for r in self.evidence(p)["rejected"]], ["b"])
        self.assertEqual(p.pending_count(), 0)


class HostLoop(PolicyTest):
    def test_many_sessions_nothing_stranded(self):
        """A host as the bridge runs one: requests arrive in 40 sessions,
        each is committed when placed, its prefill completes and it ends
        later; the host wakes the policy when it asks. Every request is
        placed exactly once and nothing waits at the end."""
        rng = random.Random(7)
        p = self.policy(config("session", 5), workers(n=4, max_num_batched_tokens=256))
        now, placed, running = 0.0, {}, []
        arrivals = [(i * 3.0, f"r{i}", f"s{rng.randrange(40)}") for i in range(400)]

        def took(selected, t):
            for s in selected:
                self.assertNotIn(s["request_id"], placed)
                placed[s["request_id"]] = s["worker_id"]
                p.dispatch_committed(s["request_id"], t)
                running.append((t + rng.uniform(1, 30), s["request_id"]))

        i = 0
        while i < len(arrivals) or running or p.pending_count():
            wake = p.next_wakeup_ms()
            nexts = [t for t in (arrivals[i][0] if i < len(arrivals) else None,
                                 min(running)[0] if running else None, wake) if t is not None]
            self.assertTrue(nexts, f"stranded: {p.pending_count()} waiting and nothing to wake them")
            now = max(now, min(nexts))
            if i < len(arrivals) and arrivals[i][0] <= now:
                _, rid, session = arrivals[i]
                i += 1
                blocks = [hash(session) % 97, rng.randrange(1000)]
                out = json.loads(p.place(req(rid, blocks, session=session), now))
                took(([out["decision"]] if out["decision"] else []) + out["released"], now)
            elif running and min(running)[0] <= now:
                running.sort()
                _, rid = running.pop(0)
                took(json.loads(p.prefill_completed(rid, now)), now)
                took(json.loads(p.request_terminal(rid, now)), now)
            else:
                took(json.loads(p.advance_clock(now)), now)
        self.assertEqual(len(placed), 400)
        self.assertEqual((p.pending_count(), p.next_wakeup_ms()), (0, None))
        self.assertEqual(self.evidence(p)["decision_count"], 400)


def all_stopped(pid):
    """Whether every thread of pid is stopped (state T in /proc), or there
    is no /proc to tell (then the stop is taken as done)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return True
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state not in ("T", "t"):
            return False
    return True


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def our_child(pid):
    """pid is a process (running, stopped or a zombie) whose parent is this
    one: a router not reaped. A reused pid has another parent."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return int(fields[1]) == os.getpid()


@contextlib.contextmanager
def no_hang(seconds=10):
    """A call that blocks (the bug) fails the test instead of hanging it."""
    def hung(signum, frame):
        raise AssertionError(f"still blocked after {seconds} s")
    old = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@unittest.skipUnless(os.path.isdir("/proc/self/fd"), "needs /proc to count processes and descriptors")
class Process(PolicyTest):
    def setUp(self):
        self.bin = _binary()
        OfflineRouter(self.bin, timeout=None).close()  # whatever the first start opens for good, before counting
        gc.collect()
        self.fds = open_fds()

    def stop(self, pid):
        os.kill(pid, signal.SIGSTOP)
        self.addCleanup(lambda: our_child(pid) and os.kill(pid, signal.SIGKILL))  # only if a test failed
        # kill() returns before the stop is done: the thread the kernel picks
        # starts the group stop when it next runs, and on a loaded machine
        # another thread of the router can answer a command first. Wait until
        # every thread is stopped.
        deadline = time.monotonic() + 10
        while not all_stopped(pid):
            if time.monotonic() > deadline:
                self.fail(f"router {pid} did not stop within 10 s of SIGSTOP")
            time.sleep(0.001)

    def assert_gone(self, pid):
        self.assertFalse(our_child(pid), f"router {pid} is still a child of this process (alive or unreaped)")

    def test_dropped_objects_leave_no_process_nor_descriptor(self):
        pids = []
        for i in range(8):
            p = OfflineRouterPolicy("aggregated", config(), workers())
            p.place(req("a"), 0.0)
            pids.append(p._router._proc.pid)
            del p
        for i in range(4):
            r = OfflineRouter(self.bin, config={"block_size": 4}, timeout=None)
            r.itself = r  # a cycle: only the collector can free it
            pids.append(r._proc.pid)
            del r
        gc.collect()
        self.assertEqual([pid for pid in pids if our_child(pid)], [], "routers left behind")
        self.assertEqual(open_fds(), self.fds, "descriptors left behind")

    def test_a_stopped_router_is_killed_at_interpreter_exit(self):
        script = (f"import os, signal, sys; sys.path.insert(0, {HERE!r})\n"
                  "from offline_router import OfflineRouter\n"
                  f"r = OfflineRouter({self.bin!r}, timeout=None)\n"
                  "os.kill(r._proc.pid, signal.SIGSTOP)\n"
                  "print(r._proc.pid, open(f'/proc/{r._proc.pid}/stat').read().rsplit(')', 1)[1].split()[19])\n")
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20)
        self.assertEqual(out.returncode, 0, out.stderr)
        pid, started = out.stdout.split()
        try:
            with open(f"/proc/{pid}/stat") as f:
                left = f.read().rsplit(")", 1)[1].split()[19] == started
        except FileNotFoundError:
            left = False
        if left:
            os.kill(int(pid), signal.SIGKILL)
        self.assertFalse(left, f"the stopped router {pid} outlived the interpreter that started it")

    def chatty_binary(self):
        """The router, after a line on stderr."""
        with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
            f.write(f"#!/bin/sh\necho 'router started' >&2\nexec {shlex.quote(self.bin)} \"$@\"\n")
        self.addCleanup(os.unlink, f.name)
        os.chmod(f.name, 0o755)
        return f.name

    def test_a_stopped_router_times_out_killed_and_reaped(self):
        with mock.patch.dict(os.environ, {"OFFLINE_ROUTER_BIN": self.chatty_binary()}):
            p = OfflineRouterPolicy("aggregated", config(), workers(), timeout=0.5)
        pid = p._router._proc.pid
        self.stop(pid)
        t = time.monotonic()
        with no_hang(), self.assertRaises(RouterTimeout) as e:
            p.place(req("a"), 0.0)
        self.assertLess(time.monotonic() - t, 2.5)
        self.assertIsInstance(e.exception, RouterDied)
        self.assertIn("router started", e.exception.stderr)
        self.assertIn("0.5 s", str(e.exception))
        self.assertEqual((e.exception.timeout, e.exception.returncode), (0.5, -signal.SIGKILL))
        self.assert_gone(pid)
        self.assertEqual(open_fds(), self.fds, "the dead router's pipes are still open")
        with no_hang(), self.assertRaises(RouterClosed) as later:
            p.advance_clock(1.0)
        self.assertIn("0.5 s", str(later.exception))
        p.close()  # harmless

    def test_a_write_to_a_stopped_router_times_out(self):
        r = OfflineRouter(self.bin, timeout=0.5)
        self.stop(r._proc.pid)
        t = time.monotonic()
        with no_hang(), self.assertRaises(RouterTimeout):
            r.place("a", input_tokens=4, block_hashes=list(range(200_000)))  # far more than a pipe holds
        self.assertLess(time.monotonic() - t, 2.5)
        self.assert_gone(r._proc.pid)

    def test_a_batch_to_a_stopped_router_times_out(self):
        r = OfflineRouter(self.bin, timeout=0.5)
        self.stop(r._proc.pid)
        threads = threading.active_count()
        with no_hang(), self.assertRaises(RouterTimeout) as e:
            r.send_many([{"op": "advance_clock", "now_ms": i} for i in range(10_000)])  # more than a pipe holds
        self.assertEqual(e.exception.responses, [])
        self.assertEqual(threading.active_count(), threads, "the batch's writer is still running")
        self.assert_gone(r._proc.pid)
        self.assertEqual(open_fds(), self.fds)

    def test_a_big_batch_under_a_timeout(self):
        r = OfflineRouter(self.bin, config={"block_size": 4, "evidence": "none"}, timeout=10)
        self.addCleanup(r.close)
        r.worker_ready(1, max_num_batched_tokens=8192)
        batch = [{"op": "place", "request_id": f"m{i}", "input_tokens": 200, "block_hashes": list(range(i, i + 50))}
                 for i in range(3000)]
        batch += [{"op": "request_terminal", "request_id": f"m{i}"} for i in range(3000)]
        with no_hang(60):
            out = r.send_many(batch)
        self.assertEqual((len(out), all(o["ok"] for o in out)), (6000, True))

    def test_a_line_in_pieces_is_one_response(self):
        script = ("read l; printf '{\"ok\":'; sleep 0.3; printf 'true,\"n\":1}\\n{\"ok\":true,\"n\":2}\\n'; "
                  "read l; read l; printf '{\"ok\":tr'; exec sleep 30")
        r = OfflineRouter("sh", args=("-c", script), timeout=5)
        self.assertEqual(r.send({"op": "inspect"}), {"ok": True, "n": 1})
        self.assertEqual(r.send({"op": "inspect"}), {"ok": True, "n": 2})
        r.timeout = 0.5
        with no_hang(), self.assertRaises(RouterTimeout):
            r.send({"op": "inspect"})  # a line begun, never ended
        self.assert_gone(r._proc.pid)

    def test_an_interrupted_batch_ends_the_router(self):
        r = OfflineRouter(self.bin, timeout=None)
        pid = r._proc.pid
        # Without the fix the batch's writer blocks for good: this ends it,
        # late, so that the test fails instead of hanging.
        rescue = threading.Timer(8, lambda: our_child(pid) and os.kill(pid, signal.SIGKILL))
        rescue.start()
        self.addCleanup(rescue.cancel)
        self.stop(pid)
        # 350 KB, more than a pipe holds; built before the alarm, and encoded
        # in milliseconds, so that the alarm comes in the wait.
        batch = [{"op": "advance_clock", "now_ms": i} for i in range(10_000)]
        t = time.monotonic()
        with self.assertRaises(AssertionError), no_hang(1):  # the host's own deadline, or Ctrl-C
            r.send_many(batch)
        self.assertLess(time.monotonic() - t, 3)
        self.assert_gone(pid)
        with self.assertRaises(RouterClosed):
            r.inspect()
        self.assertEqual(open_fds(), self.fds)

    def test_a_line_not_json_ends_the_router(self):
        r = OfflineRouter("sh", args=("-c", "read l; echo nope; exec sleep 30"), timeout=5)
        with self.assertRaises(json.JSONDecodeError):
            r.send({"op": "inspect"})
        self.assert_gone(r._proc.pid)
        with self.assertRaises(RouterClosed):
            r.send({"op": "inspect"})  # not the next line taken as its answer
        self.assertEqual(open_fds(), self.fds)

    def test_close_of_a_stopped_router_kills_it_after_a_second(self):
        r = OfflineRouter(self.bin, timeout=None)
        self.stop(r._proc.pid)
        t = time.monotonic()
        with no_hang(), self.assertRaises(RouterDied) as e, mock.patch("offline_router.CLOSE_WAIT_S", 1.0):
            r.close()
        self.assertGreater(time.monotonic() - t, 0.9)
        self.assertEqual(e.exception.returncode, -signal.SIGKILL)
        self.assert_gone(r._proc.pid)
        r.close()  # twice is harmless
        self.assertEqual(open_fds(), self.fds)


class TimeoutSetting(unittest.TestCase):
    def test_the_variable_is_the_default(self):
        with mock.patch.dict(os.environ, {TIMEOUT_ENV: " 0.25 "}):
            with OfflineRouter(_binary()) as r:
                self.assertEqual(r.timeout, 0.25)
            with OfflineRouter(_binary(), timeout=None) as r:  # the argument wins
                self.assertIsNone(r.timeout)
            with OfflineRouterPolicy("aggregated", config(), workers()) as p:
                self.assertEqual(p._router.timeout, 0.25)
            with OfflineRouterPolicy("aggregated", config(), workers(), timeout=3) as p:
                self.assertEqual(p._router.timeout, 3.0)
        with mock.patch.dict(os.environ, {TIMEOUT_ENV: ""}):
            with OfflineRouter(_binary()) as r:
                self.assertIsNone(r.timeout)
            del os.environ[TIMEOUT_ENV]
            with OfflineRouter(_binary()) as r:
                self.assertIsNone(r.timeout)

    def test_bad_values_are_refused_by_name_before_a_start(self):
        with mock.patch("subprocess.Popen", side_effect=AssertionError("a router was started")):
            for bad in ("abc", "0", "-1", "nan", "inf", "1s"):
                with mock.patch.dict(os.environ, {TIMEOUT_ENV: bad}):
                    for make in (lambda: OfflineRouter(_binary()),
                                 lambda: OfflineRouterPolicy("aggregated", config(), workers())):
                        with self.assertRaises(ValueError) as e:
                            make()
                        self.assertIn(TIMEOUT_ENV, str(e.exception))
                        self.assertIn(repr(bad), str(e.exception))
            for bad in (0, -1, float("nan"), float("inf"), "1", True):
                with self.assertRaises(ValueError) as e:
                    OfflineRouter(_binary(), timeout=bad)
                self.assertIn("timeout", str(e.exception))


if __name__ == "__main__":
    unittest.main()
