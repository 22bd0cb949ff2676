"""SenderPool: persistent sender greenlets (reuse, prompt start, join, kill, errors).

Runs in a fresh interpreter (gevent's hub stays out of the pytest process, as
for every loadgen test); the script prints one JSON line of observations.
"""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import json, time
import gevent
from tailscope.loadgen.senders import SenderPool

out = {}
log = []

def send(tag, delay):
    log.append(("start", tag, time.perf_counter()))
    try:
        gevent.sleep(delay)
    except gevent.GreenletExit:
        log.append(("abandoned", tag))
        raise
    if tag == "boom":
        raise ValueError("a bug in send")
    log.append(("end", tag))

def scenario():
    pool = SenderPool(send)
    # 1. prompt start: start() returns only after send ran up to its first wait
    pool.start("a", 0.05)
    out["started_before_return"] = log[-1][:2] == ("start", "a")
    # 2. reuse: 200 sequential short requests, at most 5 in flight at once
    for i in range(200):
        while pool.busy >= 5:
            gevent.sleep(0.001)
        pool.start(f"r{i}", 0.002)
    out["joined"] = pool.join(timeout=5)
    out["created"] = pool.created
    out["ended"] = sum(1 for e in log if e[0] == "end")
    # 3. an exception in send is reported and the pool serves on
    pool.start("boom", 0)
    pool.join(timeout=5)
    pool.start("after-boom", 0)
    out["joined_after_boom"] = pool.join(timeout=5)
    out["after_boom_ended"] = ("end", "after-boom") in [tuple(e) for e in log]
    # 4. kill abandons busy senders and ends idle ones
    pool.start("slow1", 30)
    pool.start("slow2", 30)
    out["busy_before_kill"] = pool.busy
    t = time.perf_counter()
    out["killed"] = pool.kill(timeout=5)
    out["kill_s"] = time.perf_counter() - t
    out["abandoned"] = sorted(e[1] for e in log if e[0] == "abandoned")
    out["busy_after_kill"] = pool.busy
    try:
        pool.start("late", 0)
        out["start_after_kill"] = "accepted"
    except RuntimeError:
        out["start_after_kill"] = "refused"

gevent.spawn(scenario).join()
print(json.dumps(out))
"""


def test_sender_pool_reuses_senders_starts_promptly_and_kills_cleanly() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["started_before_return"]
    assert out["joined"] and out["ended"] == 201  # "a" and the 200 short ones
    assert out["created"] <= 6, "senders are reused, not one per request"
    assert "ValueError: a bug in send" in proc.stderr  # reported through the hub's error handler
    assert out["joined_after_boom"] and out["after_boom_ended"]
    assert out["busy_before_kill"] == 2
    assert out["killed"] and out["kill_s"] < 2
    assert out["abandoned"] == ["slow1", "slow2"]
    assert out["busy_after_kill"] == 0
    assert out["start_after_kill"] == "refused"
