"""What a policy callback costs the simulator: median and p99 microseconds
of place, dispatch_committed and request_terminal through
OfflineRouterPolicy, beside the same commands on the bare driver
(offline_router.OfflineRouter). Needs OFFLINE_ROUTER_BIN or offline-router
on PATH.

    python3 scripts/bench_policy.py [--requests 3000]
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from offline_router import OfflineRouter  # noqa: E402
from offline_router_policy import OfflineRouterPolicy, _binary  # noqa: E402

WORKERS = {"api_version": 1, "dp_size": 1, "block_size": 16, "total_kv_blocks": 100000,
           "max_num_batched_tokens": 8192, "host_offload": False, "g3_offload": False,
           "capture_decisions": False, "workers": [{"worker_id": i} for i in range(1, 17)]}


def blocks(i):
    return [1000 + i % 50, 2000 + i % 7, 3000 + i]


def timed(samples, name, f):
    t = time.perf_counter_ns()
    f()
    samples.setdefault(name, []).append((time.perf_counter_ns() - t) / 1000)


def run_policy(n):
    s = {}
    with OfflineRouterPolicy("aggregated", json.dumps({"policy": "kv_router"}), json.dumps(WORKERS)) as p:
        for i in range(n):
            now = float(i)
            local = blocks(i)
            payload = json.dumps({"request_id": f"r{i}", "input_tokens": 48, "output_tokens": 10,
                                  "local_block_hashes": local, "sequence_hashes": [h + 7 for h in local],
                                  "prompt_token_source": "materialized"})
            timed(s, "place", lambda: p.place(payload, now))
            timed(s, "dispatch_committed", lambda: p.dispatch_committed(f"r{i}", now))
            timed(s, "request_terminal", lambda: p.request_terminal(f"r{i}", now))
    return s


def run_driver(n):
    s = {}
    with OfflineRouter(_binary(), config={"block_size": 16, "evidence": "none"}) as r:
        for w in WORKERS["workers"]:
            r.worker_ready(w["worker_id"], max_num_batched_tokens=8192, total_kv_blocks=100000)
        for i in range(n):
            local = blocks(i)
            timed(s, "place", lambda: r.place(f"r{i}", now_ms=float(i), input_tokens=48, output_tokens=10,
                                              block_hashes=local, sequence_hashes=[h + 7 for h in local]))
            timed(s, "dispatch_committed", lambda: r.dispatch_committed(f"r{i}", now_ms=float(i)))
            timed(s, "request_terminal", lambda: r.request_terminal(f"r{i}", now_ms=float(i)))
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=3000)
    n = ap.parse_args().requests
    print(f"{'callback':<20} {'adapter p50':>12} {'p99':>8} {'driver p50':>12} {'p99':>8}  (microseconds, {n} requests)")
    pol, drv = run_policy(n), run_driver(n)
    for name in pol:
        a, d = pol[name], drv[name]
        q = lambda xs: (statistics.median(xs), statistics.quantiles(xs, n=100)[98])
        (a50, a99), (d50, d99) = q(a), q(d)
        print(f"{name:<20} {a50:>12.1f} {a99:>8.1f} {d50:>12.1f} {d99:>8.1f}")


if __name__ == "__main__":
    main()
