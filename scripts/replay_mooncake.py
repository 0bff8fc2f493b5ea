#!/usr/bin/env python3
"""Replay a Mooncake trace through offline-router from Python.

A plain host loop on OfflineRouter, with the same simple cluster model as
`offline-router replay --engine simple` (per-worker prefix cache with LRU eviction of
unreferenced blocks, one FIFO prefill server, decode time per output token,
a limit on running requests). It honours pending_count and next_wakeup_ms
the way a simulator should, and prints the same headline numbers as
`offline-router replay --engine simple` for the same trace and settings (the test suite
checks that they are equal).

    python3 scripts/replay_mooncake.py trace.jsonl --workers 8 --binary ./offline-router
"""

import argparse
import heapq
import json
import math
import os
import sys
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from offline_router import OfflineRouter, RouterError  # noqa: E402

# The place errors a serving frontend answers with a refusal to its client
# rather than a host's mistake (as the Go replay counts them).
TURNED_AWAY = {"all_workers_busy", "no_eligible_worker", "pinned_worker_unavailable",
               "pinned_worker_overloaded", "affinity_conflict"}
# The trace's fields that go on its place as they are, as the Go replay
# sends them.
PLACE_FIELDS = ("priority", "strict_priority", "policy_class")

MASK = (1 << 64) - 1


def chain(ids):
    """Sequence addresses for the blocks: any hash of the whole prefix will
    do, because the router matches prompts by the local hashes (the ids) and
    uses these only to address stored and removed blocks."""
    out, h = [], 0
    for i in ids:
        h = (h ^ (i + 0x9E3779B97F4A7C15 + ((h << 6) & MASK) + (h >> 2))) & MASK
        out.append(h)
    return out


def read_trace(path, block_size):
    reqs = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = json.loads(line)
            sid = m.get("session_id")
            r = {
                "id": f"r{len(reqs)}",
                "arrival": float(m.get("timestamp", 0)),
                "input": int(m["input_length"]),
                "output": int(m["output_length"]),
                "ids": list(m.get("hash_ids", [])),
                "session": "" if sid is None else str(sid),
                "delay": m.get("delay_ms", m.get("delay")),
                # "" is no class, as the Go replay reads it
                "place": {k: m[k] for k in PLACE_FIELDS if m.get(k) not in (None, "")},
            }
            if m.get("lora_name") not in (None, ""):
                # The Go replay salts an adapter's hash_ids with XXH3, which
                # the standard library lacks: refused rather than replayed
                # unsalted, which would share blocks across adapters.
                sys.exit(f"{path}:{n}: field \"lora_name\": this script does not salt hash_ids by "
                         "adapter; replay LoRA traces with `offline-router replay` (docs/replay.md)")
            if len(r["ids"]) > -(-r["input"] // block_size):
                sys.exit(f"{path}:{n}: more hash_ids than blocks of {block_size} tokens")
            reqs.append(r)
    return reqs


class Worker:
    def __init__(self, wid):
        self.id = wid
        self.blocks = {}  # address -> {"local", "refs", "stored"}
        self.idle = OrderedDict()  # unreferenced blocks, least recently used first
        self.running = 0
        self.backlog = 0  # uncached tokens admitted and not yet prefilled
        self.prefill_free_at = 0.0
        self.waiting = []
        self.event_id = 0

    def cached_prefix(self, seq):
        n = 0
        while n < len(seq) and seq[n] in self.blocks and self.blocks[seq[n]]["stored"]:
            n += 1
        return n

    def admit(self, r, c):
        if self.running >= c.max_num_seqs:
            return None, False
        hit = self.cached_prefix(r["seq"])
        uncached = r["input"] - min(hit * c.block_size, r["input"])
        if self.backlog > 0 and self.backlog + uncached > c.max_num_batched_tokens:
            return None, False
        missing = sum(1 for h in r["seq"] if h not in self.blocks)
        free = c.kv_blocks - len(self.blocks) + len(self.idle)
        if missing > free and self.running > 0:
            return None, False
        r["hit"], r["uncached"] = hit, uncached
        self.backlog += uncached
        for h in r["seq"]:
            if h in self.blocks:
                b = self.blocks[h]
                if b["refs"] == 0:
                    self.idle.pop(h, None)
                b["refs"] += 1
        evicted = []
        for i, h in enumerate(r["seq"]):
            if h in self.blocks:
                continue
            while len(self.blocks) >= c.kv_blocks and self.idle:
                old, _ = self.idle.popitem(last=False)
                del self.blocks[old]
                evicted.append(old)
            if len(self.blocks) >= c.kv_blocks:
                break
            self.blocks[h] = {"local": r["ids"][i], "refs": 1, "stored": False}
        self.running += 1
        return evicted, True

    def store(self, r):
        seq, hit = r["seq"], r["hit"]
        blocks = []
        for i in range(hit, len(seq)):
            b = self.blocks.get(seq[i])
            if b is None:
                break
            b["stored"] = True
            blocks.append({"block_hash": seq[i], "tokens_hash": b["local"]})
        if not blocks:
            return None
        self.event_id += 1
        parent = seq[hit - 1] if hit > 0 else None
        return {"worker_id": self.id, "storage_tier": "device",
                "event": {"event_id": self.event_id, "dp_rank": 0,
                          "data": {"stored": {"parent_hash": parent, "blocks": blocks}}}}

    def release(self, r):
        for h in reversed(r["seq"]):
            b = self.blocks.get(h)
            if b is None:
                continue
            b["refs"] -= 1
            if b["refs"] == 0:
                if not b["stored"]:
                    del self.blocks[h]
                    continue
                self.idle[h] = b
        self.running -= 1

    def removed(self, hashes):
        self.event_id += 1
        return {"worker_id": self.id, "storage_tier": "device",
                "event": {"event_id": self.event_id, "dp_rank": 0, "data": {"removed": {"block_hashes": hashes}}}}


class Host:
    """The event loop: trace arrivals and worker completions in time order,
    and the router woken at next_wakeup_ms whenever that comes first."""

    def __init__(self, router, cluster, trace):
        self.router, self.c = router, cluster
        self.workers = {i + 1: Worker(i + 1) for i in range(cluster.workers)}
        self.events, self.next_seq = [], 0
        self.by_id, self.waiting = {}, {}  # waiting: sent, neither placed nor rejected (in sent order)
        self.wakeup, self.pending, self.placed, self.now = None, 0, [], 0.0
        # In approximate mode a host has no event stream: it sends none.
        self.events_on = router.config is None or router.config["kv_events"]
        for w in self.workers.values():
            self.send({"op": "worker_ready", "now_ms": 0, "worker_id": w.id, "total_kv_blocks": cluster.kv_blocks,
                       "max_num_batched_tokens": cluster.max_num_batched_tokens, "max_num_seqs": cluster.max_num_seqs})
        last = {}  # a later turn follows the turn before it in its session
        for r in trace:
            r.update(seq=chain(r["ids"]), isl_blocks=-(-r["input"] // cluster.block_size), worker=None,
                     rejected=None, done=0.0, hit=0, next=None)
            self.by_id[r["id"]] = r
            if r["delay"] is not None:
                last[r["session"]]["next"] = r
            else:
                self.schedule(r["arrival"], "arrival", r)
            if r["session"]:
                last[r["session"]] = r

    def schedule(self, at, kind, r):
        self.next_seq += 1
        heapq.heappush(self.events, (at, self.next_seq, kind, r["id"]))

    def run(self):
        while True:
            nxt = self.events[0][0] if self.events else math.inf
            if self.wakeup is not None and self.wakeup <= nxt:
                self.send({"op": "advance_clock", "now_ms": self.wakeup})
                continue
            if not self.events:
                if self.pending and self.give_up():
                    continue
                break
            at, _, kind, rid = heapq.heappop(self.events)
            getattr(self, kind)(at, self.by_id[rid])
        if self.pending:
            sys.exit(f"{self.pending} requests still wait in the router, and cancelling them failed")

    def give_up(self):
        """Cancels, in the order they were sent, the requests the router holds
        when nothing else will happen (rejected as waiting_at_end)."""
        stuck = list(self.waiting.values())
        for r in stuck:
            self.send({"op": "cancel_pending", "request_id": r["id"]})
            del self.waiting[r["id"]]
            r.update(rejected="waiting_at_end", done=self.now)
            self.ended(self.now, r)
        return bool(stuck)

    def send(self, cmd):
        try:
            resp = self.router.send(cmd)
        except RouterError as e:
            # Refused as a frontend refuses its client (Dynamo's HTTP 529):
            # counted, and the run goes on. The refused command left the
            # router's clock behind: the request ends when it arrived.
            if cmd["op"] != "place" or e.code not in TURNED_AWAY:
                raise
            resp = e.response
            r = self.by_id[cmd["request_id"]]
            r.update(rejected=e.code, done=cmd["now_ms"])
            self.waiting.pop(r["id"], None)
            self.ended(r["done"], r)
        t = self.now = resp["now_ms"]
        self.wakeup, self.pending = resp["next_wakeup_ms"], resp["pending_count"]
        for p in resp["placements"]:
            r = self.by_id[p["request_id"]]
            self.waiting.pop(r["id"], None)
            r.update(worker=self.workers[p["worker_id"]], overlap=p["overlap_blocks"],
                     best=p["best_available_overlap_blocks"])
            self.placed.append(r)
        for rj in resp.get("rejected", []):
            r = self.by_id[rj["request_id"]]
            self.waiting.pop(r["id"], None)
            r.update(rejected=rj["code"], done=t)
            self.ended(t, r)
        while self.placed and cmd["op"] != "dispatch_committed":
            r = self.placed.pop(0)
            self.send({"op": "dispatch_committed", "now_ms": t, "request_id": r["id"]})
            r["worker"].waiting.append(r)
            self.admit_waiting(t, r["worker"])

    def admit_waiting(self, t, w):
        while w.waiting:
            r = w.waiting[0]
            evicted, ok = w.admit(r, self.c)
            if not ok:
                return
            w.waiting.pop(0)
            if evicted and self.events_on:
                self.send({"op": "observe", "now_ms": t, "events": [w.removed(evicted)]})
            r["prefill_start"] = max(t, w.prefill_free_at)
            w.prefill_free_at = r["prefill_start"] + r["uncached"] / self.c.prefill_tokens_per_ms
            self.schedule(w.prefill_free_at, "prefill_done", r)

    def arrival(self, t, r):
        r["arrival"] = t
        self.waiting[r["id"]] = r
        cmd = {"op": "place", "now_ms": t, "request_id": r["id"], "input_tokens": r["input"],
               "output_tokens": r["output"]}
        if r["ids"]:
            cmd["block_hashes"] = r["ids"]
        if r["session"]:
            cmd["session_id"] = r["session"]
        cmd.update(r["place"])
        self.send(cmd)

    def prefill_done(self, t, r):
        r["first_token"] = t
        r["worker"].backlog -= r["uncached"]
        ev = r["worker"].store(r)
        if ev is not None and self.events_on:
            self.send({"op": "observe", "now_ms": t, "events": [ev]})
        self.send({"op": "prefill_completed", "now_ms": t, "request_id": r["id"]})
        # Prefill made the first output token; each later one is a decode step.
        self.schedule(t + (max(r["output"], 1) - 1) * self.c.decode_ms_per_token, "decode_done", r)
        self.admit_waiting(t, r["worker"])  # the backlog shrank: waiting requests may fit now

    def decode_done(self, t, r):
        r["done"] = t
        r["worker"].release(r)
        self.send({"op": "request_terminal", "now_ms": t, "request_id": r["id"]})
        self.ended(t, r)
        self.admit_waiting(t, r["worker"])

    def ended(self, t, r):
        if r["next"] is not None:
            self.schedule(t + r["next"]["delay"], "arrival", r["next"])

    def report(self, trace):
        def stats(v):
            """mean, median, std, p90, p99 as numpy gives them (linear
            percentiles, population std), summed in the Go replay's order
            (the mean in trace order, the squares sorted) so that the
            figures agree to the bit."""
            if not v:
                return dict(mean=0.0, median=0.0, std=0.0, p90=0.0, p99=0.0)
            mean = sum(v) / len(v)
            v = sorted(v)
            ss = 0.0
            for x in v:
                ss += (x - mean) * (x - mean)

            def pct(p):
                pos = p / 100 * (len(v) - 1)
                lo = math.floor(pos)
                return v[lo] if lo == pos else v[lo] + (v[lo + 1] - v[lo]) * (pos - lo)
            return dict(mean=mean, median=pct(50), std=math.sqrt(ss / len(v)), p90=pct(90), p99=pct(99))

        counts = [0] * len(self.workers)
        hit = inp = overlap = isl = regret = 0.0
        ttft, wait = [], []
        first, last = math.inf, 0.0
        rep = {"requests": len(trace), "completed": 0, "rejected": 0}
        reasons = {}
        for r in trace:
            first, last = min(first, r["arrival"]), max(last, r["done"])
            if r["rejected"]:
                rep["rejected"] += 1
                reasons[r["rejected"]] = reasons.get(r["rejected"], 0) + 1
                continue
            if r["worker"] is None:
                continue
            rep["completed"] += 1
            counts[r["worker"].id - 1] += 1
            hit += min(r["hit"] * self.c.block_size, r["input"])
            inp += r["input"]
            overlap += r["overlap"]
            isl += r["isl_blocks"]
            regret += r["best"] - r["overlap"]
            ttft.append(r["first_token"] - r["arrival"])
            wait.append(r["prefill_start"] - r["arrival"])
        total = sum(counts)
        mean = total / len(counts)
        ss = 0.0
        for c in counts:
            ss += (c - mean) * (c - mean)
        rep.update(rejected_by_reason=reasons, duration=(last - first) / 1000 if last > first else 0.0,
                   prefix_hit_rate=hit / inp if inp else 0.0, router_overlap_rate=overlap / isl if isl else 0.0,
                   mean_overlap_regret_blocks=regret / rep["completed"] if rep["completed"] else 0.0,
                   worker_requests=counts, worker_share_cv=math.sqrt(ss / len(counts)) / mean if total else 0.0,
                   # The Go replay counts the config command its stream opens with.
                   router_commands=self.router.commands_sent + 1)
        for name, v in (("ttft", ttft), ("queue_wait", wait)):
            for k, x in stats(v).items():
                rep[f"{k}_{name}_ms"] = x
        return rep


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--binary", default="offline-router", help="path of the offline-router binary")
    ap.add_argument("--config", help="router config file (JSON), as for offline-router --config")
    ap.add_argument("--block-size", type=int, default=512)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--worker-kv-blocks", dest="kv_blocks", type=int, default=912)
    ap.add_argument("--worker-max-num-seqs", dest="max_num_seqs", type=int, default=64)
    ap.add_argument("--worker-max-num-batched-tokens", dest="max_num_batched_tokens", type=int, default=8192)
    ap.add_argument("--worker-prefill-tokens-per-ms", dest="prefill_tokens_per_ms", type=float, default=20)
    ap.add_argument("--worker-decode-ms-per-token", dest="decode_ms_per_token", type=float, default=15)
    ap.add_argument("--report", help="write the headline numbers as JSON to this file")
    c = ap.parse_args()
    config = {}
    if c.config:
        with open(c.config) as f:
            config = json.load(f)
    config["block_size"] = c.block_size
    trace = read_trace(c.trace, c.block_size)
    with OfflineRouter(c.binary, config=config) as router:
        host = Host(router, c, trace)
        host.run()
        rep = host.report(trace)
    rows = [("requests", f"{rep['requests']}"), ("rejected", f"{rep['rejected']}"),
            ("prefix hit rate", f"{rep['prefix_hit_rate']:.3f}"),
            ("router overlap rate", f"{rep['router_overlap_rate']:.3f}"),
            ("mean overlap regret (blocks)", f"{rep['mean_overlap_regret_blocks']:.2f}")]
    for name, key in (("TTFT", "ttft"), ("queue wait", "queue_wait")):
        for p in ("mean", "median", "p99"):
            rows.append((f"{p} {name} (ms)", f"{rep[f'{p}_{key}_ms']:.1f}"))
    rows += [("worker share CV", f"{rep['worker_share_cv']:.3f}"),
             ("simulated time (s)", f"{rep['duration']:.1f}"),
             ("router commands", f"{rep['router_commands']}")]
    width = max(len(n) for n, _ in rows)
    print(f"replay of {c.trace}: {rep['requests']} requests on {c.workers} workers (Python host)\n")
    for name, value in rows:
        print(f"{name:>{width}}  {value:>10}")
    if c.report:
        with open(c.report, "w") as f:
            json.dump(rep, f, indent=2)


if __name__ == "__main__":
    main()
