"""Streamed chunks per generator core and their recording lag: tailscope's OpenAI
streaming path vs a bare Locust ``FastHttpUser``, reading the same streams.

    python benchmarks/llm_streaming.py [--streams 50,200,500,1000,2000] [--seconds 4] [--warmup 1]
                                       [--rounds 3] [--tokens-per-s 25] [--json]

A loopback server (benchmarks/sse_stamp_server.py, pinned to one core) streams
vLLM-style chat-completion chunks, one token each, ``--tokens-per-s`` per
stream; each content chunk's text is the epoch ns at which the server wrote
it. For each step (a number of concurrent streams) two generators run in
turn, each in its own process pinned to the other core, for ``--seconds``:

- **tailscope**: ``run_load`` with an ``openai-chat`` class (streamed, usage
  chunk, ``ignore_eos``) in concurrency mode (``ArrivalSpec("closed",
  users=N)``: N streams kept busy, a new request as soon as one ends),
  writing ``requests.arrow`` and ``chunks.arrow`` as a run does. A chunk's
  lag is its ``chunks.arrow`` arrival time minus its send stamp, joined by
  request id (tailscope's ``X-Request-Id`` is the trace id) and chunk index
  with the server's log of the stamps it wrote (``GET /dump``).
- **bare Locust**: N ``FastHttpUser`` users, each posting the same request
  and reading the stream with ``iter_content`` one event at a time (events
  have a fixed length), taking ``time.time_ns()`` per event and parsing the
  stamp out of it: the least a Locust user can do to time every chunk.

Output lengths are uniform in [``--min-tokens``, ``--max-tokens``] and each
stream's first chunk comes after a random fraction of the chunk gap, so the
streams do not tick in step. Figures are taken over a measurement window,
``--warmup`` s after the load starts until ``--seconds``, by a greenlet in
the generator process (start-up — imports, building N users and their
connections — and the drain at the end are left out): chunks that arrived
in the window, per second of wall time and per CPU-second of the generator
process (``getrusage``), the process's run-queue wait (ms per second: time
it was ready to run but another process had the core; the machine is
shared) and the min/P50/P99/max lag of those chunks. tailscope times a read
with the kernel's receive stamp (loadgen/arrival_stamps.py) mapped onto its
run clock (monotonic, anchored to the wall clock once at the start), so its
lag is what the chunk spent between the server's stamp and this host's
kernel; the run clock and the server's wall clock may disagree by a few µs
(the anchor's read, slewing), which can show as a slightly negative minimum.
The modes alternate for
``--rounds`` rounds; the summary gives the medians and the ratio tailscope ÷
bare Locust of chunks per CPU-second (> 1: tailscope reads more chunks per
core). Goal (issue 19): at 2,000 streams × 25 tokens/s (50,000 chunks/s) on
one core, P99 lag ≤ 2 ms, ratio ≥ 1.0.

Multi-turn sessions (issue 29), ``--sessions MIN:MAX``: each step also runs
**tailscope sessions** — the same run with ``arrival.sessions`` (N concurrent
sessions of MIN–MAX turns, uniform, no think time: N streams kept busy, the
same offered token rate as the single-turn chat mode), every turn carrying
the history with the actual streamed answers (the stamps: 19 characters a
token) — and the summary adds the sessions' cost per chunk against the
single-turn chat mode in the same round: chat chunks per CPU-second ÷
sessions chunks per CPU-second (1.0: a chunk costs the same; the issue's
bound is 1.2). ``--no-bare`` leaves the bare Locust mode out. The modes of
a round run in turn, their order rotating from round to round.

Loopback only; every process started here is stopped by PID. The load
average is printed before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request

import numpy as np
from bench_common import GENERATOR_CPU, SERVER_CPU, load_average, run_python

HERE = os.path.dirname(os.path.abspath(__file__))

#: Both generators: the process's CPU time and run-queue wait at the start and the end of
#: the measurement window ([warmup, seconds] after the load starts), taken by a greenlet.
WINDOW = """
import gevent, resource, time

def _snapshot():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/self/schedstat") as fh:
        waited_ns = int(fh.read().split()[1])
    return {"t_ns": time.time_ns(), "cpu_s": usage.ru_utime + usage.ru_stime, "runqueue_ns": waited_ns}

WINDOW = []

def _window():
    gevent.sleep(CONFIG["warmup"])
    WINDOW.append(_snapshot())
    gevent.sleep(CONFIG["seconds"] - CONFIG["warmup"])
    WINDOW.append(_snapshot())
"""

TAILSCOPE = """
from tailscope.loadgen.local_runner import run_load
""" + WINDOW + """
from tailscope.loadgen.spec import ArrivalSpec, LLMSpec, LoadPlan, RequestClass, SessionSpec, SizeSpec
from tailscope.rundir import Appender, schema
llm = LLMSpec(api="openai-chat", model="bench", prompt_tokens=SizeSpec("fixed", value=8),
              output_tokens=SizeSpec("uniform", min=CONFIG["min_tokens"], max=CONFIG["max_tokens"]))
turns = CONFIG.get("session_turns")
sessions = SessionSpec(turns=SizeSpec("uniform", min=turns[0], max=turns[1])) if turns else None
plan = LoadPlan(target=CONFIG["url"], duration_s=CONFIG["seconds"],
                arrival=ArrivalSpec("closed", users=CONFIG["streams"], sessions=sessions),
                classes=(RequestClass("chat", "", llm=llm),), timeout_s=60.0, max_in_flight=CONFIG["streams"])
requests = Appender(CONFIG["dir"] + "/requests.arrow", schema.REQUESTS_SCHEMA)
chunks = Appender(CONFIG["dir"] + "/chunks.arrow", schema.CHUNKS_SCHEMA)
gevent.spawn(_window)
result = run_load(plan, requests, chunks=chunks, flush=(requests, chunks))
requests.close()
chunks.close()
print(json.dumps({"requests": result.completed, "errors": result.errors, "window": WINDOW}))
"""

LOCUST = """
from locust import FastHttpUser, task
from locust.env import Environment
from locust.user.wait_time import constant
import random, uuid
""" + WINDOW + """
EVENT = CONFIG["event_bytes"]
MARK = b'"content":"'
ARRIVALS, LAGS = [], []
rng = random.Random(1)

class Bare(FastHttpUser):
    host = CONFIG["url"]
    wait_time = constant(0)
    network_timeout = 60.0
    connection_timeout = 60.0

    @task
    def stream(self):
        body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "a b c d e f g h"}],
                           "max_tokens": rng.randint(CONFIG["min_tokens"], CONFIG["max_tokens"]),
                           "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
        response = self.client.post("/v1/chat/completions", data=body, stream=True,
                                    headers={"Content-Type": "application/json", "X-Request-Id": uuid.uuid4().hex})
        for data in response.iter_content(EVENT, decode_content=False):
            now = time.time_ns()
            i = data.find(MARK)
            if i >= 0:
                ARRIVALS.append(now)
                LAGS.append(now - int(data[i + 11:i + 30]))

env = Environment(user_classes=[Bare], host=CONFIG["url"])
runner = env.create_local_runner()
gevent.spawn(_window)
runner.start(CONFIG["streams"], spawn_rate=CONFIG["streams"])
gevent.sleep(CONFIG["seconds"] + 0.2)
runner.quit()
np = __import__("numpy")
np.save(CONFIG["dir"] + "/bare.npy", np.array([ARRIVALS, LAGS], dtype=np.int64))
print(json.dumps({"requests": env.stats.total.num_requests, "errors": env.stats.total.num_failures, "window": WINDOW}))
"""

OURS, BARE, SESSIONS = "tailscope", "bare Locust", "tailscope sessions"


@contextlib.contextmanager
def stamp_server(tokens_per_s: float):
    """Start sse_stamp_server.py on SERVER_CPU; yields its URL. Stopped by PID."""
    process = subprocess.Popen([sys.executable, os.path.join(HERE, "sse_stamp_server.py"), "--cpu", str(SERVER_CPU),
                                "--tokens-per-s", str(tokens_per_s)], stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline().split()
        if not line or line[0] != "LISTENING":
            raise RuntimeError(f"the stamp server did not start: {line}")
        yield f"http://127.0.0.1:{line[1]}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def server_stamps(url: str, path: str) -> dict[str, np.ndarray]:
    """The server's send stamps since the last dump, by request id (ns, by chunk index)."""
    with urllib.request.urlopen(f"{url}/dump?path={path}", timeout=30) as reply:
        reply.read()
    data = np.load(path)
    ids, index, stamps = data["request_id"], data["index"], data["stamp_ns"]
    out: dict[str, np.ndarray] = {}
    order = np.lexsort((index, ids))
    ids, stamps = ids[order], stamps[order]
    bounds = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    for part_ids, part in zip(np.split(ids, bounds), np.split(stamps, bounds)):
        if len(part_ids):
            out[str(part_ids[0])] = part
    return out


def recorded_chunks(chunks_path: str, stamps: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, int]:
    """(arrival ns, lag ns) of every recorded chunk (its ``chunks.arrow`` time − its send
    stamp), and the number of recorded chunks that had no stamp (should be 0)."""
    from tailscope.rundir import read_stream, schema

    table = read_stream(chunks_path, schema.CHUNKS_SCHEMA).table
    trace, index, t_ns = (table.column(name).to_numpy(zero_copy_only=False) for name in ("trace_id", "index", "t_ns"))
    lags = np.zeros(len(t_ns), dtype=np.int64)
    matched = np.zeros(len(t_ns), dtype=bool)
    for i, (rid, k, t) in enumerate(zip(trace, index, t_ns)):
        sent = stamps.get(rid)
        if sent is not None and k < len(sent):
            lags[i], matched[i] = t - sent[k], True
    return np.asarray(t_ns, dtype=np.int64)[matched], lags[matched], int((~matched).sum())


def window_figures(r: dict, arrivals: np.ndarray, lags: np.ndarray) -> dict:
    """The run's figures over its measurement window: chunks that arrived in it, per
    wall and CPU second, the process's CPU share and run-queue wait, lag percentiles."""
    start, end = r.pop("window")
    inside = (arrivals >= start["t_ns"]) & (arrivals < end["t_ns"])
    wall_s = (end["t_ns"] - start["t_ns"]) / 1e9
    cpu_s = end["cpu_s"] - start["cpu_s"]
    window_lags = lags[inside]
    return {**r, "chunks": int(inside.sum()), "wall_s": wall_s, "cpu_s": cpu_s,
            "runqueue_ms_per_s": (end["runqueue_ns"] - start["runqueue_ns"]) / 1e6 / wall_s,
            "per_s": int(inside.sum()) / wall_s, "per_core": int(inside.sum()) / max(cpu_s, 1e-9),
            "lag_ms": [float(x) for x in np.percentile(window_lags, [50, 99, 100]) / 1e6] if len(window_lags) else None,
            "min_lag_ms": float(window_lags.min()) / 1e6 if len(window_lags) else None}


def run_ours(config: dict, url: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="llm-streaming-") as tmp:
        r = run_python(TAILSCOPE, {**config, "dir": tmp}, timeout_s=config["seconds"] + 180)
        arrivals, lags, r["unmatched"] = recorded_chunks(os.path.join(tmp, "chunks.arrow"),
                                                         server_stamps(url, tmp + "/stamps.npz"))
    return window_figures(r, arrivals, lags)


def run_bare(config: dict, url: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="llm-streaming-") as tmp:
        r = run_python(LOCUST, {**config, "dir": tmp}, timeout_s=config["seconds"] + 180)
        server_stamps(url, tmp + "/stamps.npz")  # forget this run's stamps
        arrivals, lags = np.load(os.path.join(tmp, "bare.npy"))
    r["unmatched"] = 0
    return window_figures(r, arrivals, lags)


def measure(streams: list[int], seconds: float, rounds: int, tokens_per_s: float, min_tokens: int,
            max_tokens: int, warmup_s: float = 1.0, say=print, session_turns: tuple[int, int] | None = None,
            bare: bool = True) -> dict:
    """Run every step and round; the figures per step, generator and round. ``session_turns``
    (min, max): also the sessions mode; ``bare``: also bare Locust. A round's modes run in turn,
    their order rotated by one each round."""
    from sse_stamp_server import EVENT_BYTES

    modes = [OURS] + ([SESSIONS] if session_turns else []) + ([BARE] if bare else [])
    results: dict[int, dict[str, list[dict]]] = {n: {name: [] for name in modes} for n in streams}
    with stamp_server(tokens_per_s) as url:
        for round_number in range(1, rounds + 1):
            for n in streams:
                config = {"url": url, "streams": n, "seconds": seconds, "min_tokens": min_tokens,
                          "max_tokens": max_tokens, "event_bytes": EVENT_BYTES, "warmup": warmup_s}
                shift = (round_number - 1) % len(modes)
                order = modes[shift:] + modes[:shift]
                for name in order:
                    if name == BARE:
                        r = run_bare(config, url)
                    else:
                        r = run_ours({**config, "session_turns": session_turns if name == SESSIONS else None}, url)
                    results[n][name].append(r)
                    say(f"round {round_number} {n:5d} streams {name:12s} {_line(r)}")
    return results


def _line(r: dict) -> str:
    lag = r["lag_ms"] or [float("nan")] * 3
    return (f"{r['chunks']:8d} chunks ({r['requests']} requests, {r['errors']} errors, {r['unmatched']} unmatched) "
            f"in {r['wall_s']:.1f} s: {r['per_s']:8.0f} chunks/s, {r['per_core']:8.0f} per CPU-s "
            f"(CPU {r['cpu_s'] / r['wall_s']:.0%}, waited {r['runqueue_ms_per_s']:.0f} ms/s for a CPU); "
            f"lag min {_min_lag(r)}, P50 {lag[0]:.2f} ms, P99 {lag[1]:.2f} ms, max {lag[2]:.1f} ms")


def _min_lag(r: dict) -> str:
    return f"{r['min_lag_ms']:.3f} ms" if r.get("min_lag_ms") is not None else "—"


def summarize(results: dict) -> list[dict]:
    """Per step: the medians over rounds of each generator's figures, and the ratios."""
    rows = []
    for n, by_name in results.items():
        row = {"streams": n}
        for name, runs in by_name.items():
            row[name] = {
                "chunks_per_s": statistics.median(r["per_s"] for r in runs),
                "chunks_per_cpu_s": statistics.median(r["per_core"] for r in runs),
                "cpu_share": statistics.median(r["cpu_s"] / r["wall_s"] for r in runs),
                "p99_lag_ms": statistics.median(r["lag_ms"][1] for r in runs if r["lag_ms"]) if any(
                    r["lag_ms"] for r in runs) else None,
                "chunks": statistics.median(r["chunks"] for r in runs),
                "errors": sum(r["errors"] for r in runs),
                "unmatched": sum(r["unmatched"] for r in runs),
                "runqueue_ms_per_s": statistics.median(r["runqueue_ms_per_s"] for r in runs),
            }
        ours, bare = row[OURS], row.get(BARE)
        if bare is not None:
            row["ratio_per_cpu_s"] = ours["chunks_per_cpu_s"] / bare["chunks_per_cpu_s"] if bare["chunks_per_cpu_s"] else None
        if SESSIONS in by_name:  # per round (same machine state), then the median
            costs = [chat["per_core"] / session["per_core"] for chat, session in zip(by_name[OURS], by_name[SESSIONS])
                     if session["per_core"] > 0]
            row["sessions_cost_ratio"] = statistics.median(costs) if costs else None
            row["sessions_cost_ratios"] = costs
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="50,200,500,1000,2000", help="concurrent streams per step, comma-separated")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each generator's run per step")
    parser.add_argument("--warmup", type=float, default=1.0,
                        help="seconds after the start before the measurement window opens")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens-per-s", type=float, default=25.0, help="chunks per second of each stream")
    parser.add_argument("--min-tokens", type=int, default=25)
    parser.add_argument("--max-tokens", type=int, default=75)
    parser.add_argument("--sessions", metavar="MIN:MAX", default=None,
                        help="also run multi-turn sessions of MIN-MAX turns (uniform) and compare their cost per chunk "
                             "with single-turn chat")
    parser.add_argument("--no-bare", action="store_true", help="leave the bare Locust mode out")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line at the end")
    args = parser.parse_args()
    streams = [int(s) for s in args.streams.split(",") if s.strip()]
    session_turns = tuple(int(x) for x in args.sessions.split(":")) if args.sessions else None
    if session_turns is not None and (len(session_turns) != 2 or not 1 <= session_turns[0] <= session_turns[1]):
        parser.error(f"--sessions: expected MIN:MAX turns with 1 <= MIN <= MAX, got {args.sessions!r}")
    print(f"server on CPU {SERVER_CPU}, generators on CPU {GENERATOR_CPU}; {args.tokens_per_s:g} chunks/s per "
          f"stream, {args.min_tokens}-{args.max_tokens} tokens per request; load average {load_average()}", flush=True)
    rows = summarize(measure(streams, args.seconds, args.rounds, args.tokens_per_s, args.min_tokens,
                             args.max_tokens, args.warmup, say=lambda text: print(text, flush=True),
                             session_turns=session_turns, bare=not args.no_bare))
    print(f"load average at the end: {load_average()}")
    if session_turns:
        print(f"{'streams':>7s}  {'chat chunks/s':>13s}  {'per core':>8s}  {'sessions chunks/s':>17s}  {'per core':>8s}  "
              f"{'P99 lag':>8s}  {'CPU wait':>8s}  sessions cost per chunk ÷ chat (per round; median)")
        for row in rows:
            ours, sessions = row[OURS], row[SESSIONS]
            per_round = ", ".join(f"{x:.2f}" for x in row["sessions_cost_ratios"])
            print(f"{row['streams']:7d}  {ours['chunks_per_s']:13.0f}  {ours['chunks_per_cpu_s']:8.0f}  "
                  f"{sessions['chunks_per_s']:17.0f}  {sessions['chunks_per_cpu_s']:8.0f}  {_ms(sessions['p99_lag_ms'])}  "
                  f"{_wait(sessions)}  {per_round}; median {row['sessions_cost_ratio']:.2f}")
        print(f"goal (issue 29): sessions of {session_turns[0]}-{session_turns[1]} turns cost at most 1.2x a single-turn "
              "chat chunk")
    if args.no_bare:
        if args.json:
            print(json.dumps({"streams": streams, "tokens_per_s": args.tokens_per_s, "rows": rows}))
        return
    print(f"{'streams':>7s}  {'offered/s':>9s}  {'tailscope chunks/s':>18s}  {'per core':>8s}  {'P99 lag':>8s}  "
          f"{'CPU wait':>8s}  {'Locust chunks/s':>15s}  {'per core':>8s}  {'P99 lag':>8s}  {'CPU wait':>8s}  "
          "ratio (per core)")
    for row in rows:
        ours, bare = row[OURS], row[BARE]
        print(f"{row['streams']:7d}  {row['streams'] * args.tokens_per_s:9.0f}  {ours['chunks_per_s']:18.0f}  "
              f"{ours['chunks_per_cpu_s']:8.0f}  {_ms(ours['p99_lag_ms'])}  {_wait(ours)}  {bare['chunks_per_s']:15.0f}  "
              f"{bare['chunks_per_cpu_s']:8.0f}  {_ms(bare['p99_lag_ms'])}  {_wait(bare)}  {row['ratio_per_cpu_s']:.2f}")
    print("medians over the rounds; CPU wait: ms per second the generator was ready to run but had no CPU "
          "(other processes on its core: lag and per-core figures are then not the generator's own)")
    print("goal: >= 50,000 chunks/s on one core with P99 lag <= 2 ms; ratio >= 1.0")
    if args.json:
        print(json.dumps({"streams": streams, "tokens_per_s": args.tokens_per_s, "rows": rows}))


def _wait(figures: dict) -> str:
    return f"{figures['runqueue_ms_per_s']:5.0f}ms/s"


def _ms(value) -> str:
    return f"{value:6.2f}ms" if value is not None else "      —"


if __name__ == "__main__":
    main()
