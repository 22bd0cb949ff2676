"""Timed replay of the Mooncake sample against the LLM reference server: how closely the
generator keeps the trace's times, and whether the prompts it sent reuse blocks exactly as the
trace reuses hash ids.

    python benchmarks/trace_replay.py [--speed 20] [--to 600] [--server llm|stamp] [--json]

Replays ``scenarios/traces/mooncake-sample.jsonl`` (10 minutes, 816 requests, bursts of rows
on one millisecond) from 0 to ``--to`` s of trace time, ``--speed`` times as fast, with
``tailscope run`` against the LLM reference server (started here on a free port, stopped by
PID), or with ``--server stamp`` against benchmarks/sse_stamp_server.py (streams of
timestamps, 200 tokens/s, almost no CPU: the generator's own timing without the reference
server's prefill competing for the cores; no prefix-cache figures then). Printed:

- **scheduled vs trace**: each request's ``scheduled_ns`` minus the run origin against the
  trace's offset / speed (max and P99 of the absolute error, ns: the schedule itself);
- **sent vs trace**: ``sent_ns`` (when the request left the generator) against the same
  trace time: P50 / P99 / max and the share within 1 ms — the generator's timing accuracy,
  which a busy machine degrades (the load average is printed beside it);
- **block reuse**: the trace's hash-id reuse (block references that repeat an earlier id)
  and the sent prompts' (512-word blocks whose content repeats an earlier block's), rebuilt
  with the class's request maker (prompts depend only on the class name and the row, so
  they are the bytes the run sent);
- **server prefix cache**: the reference server (``--enable-prefix-caching``) counts the
  prompt tokens it found cached (``vllm:prefix_cache_hits_total`` / ``queries_total``, read
  before and after the run), against the most a prefix cache could find: each row's leading
  hash-id blocks already seen (Mooncake ids are chained, so a seen id is a seen prefix) × 512.
  Fewer are found when a row sharing a prefix is admitted while the first is still in prefill.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import urllib.request

import numpy as np

from tailscope.loadgen.mix import RequestMix
from tailscope.loadgen.trace_files import hash_id_reuse
from tailscope.loadgen.trace_prompts import block_reuse
from tailscope.rundir import read_stream, schema
from tailscope.scenario_model.scenario import load_scenario
from tailscope.support.python_child import python_module

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import load_average, stop_process  # noqa: E402

SAMPLE = os.path.join(HERE, os.pardir, "scenarios", "traces", "mooncake-sample.jsonl")
SERVER_ARGS = ("--no-tracing", "--enable-prefix-caching", "--max-model-len", "4096", "--max-num-batched-tokens", "4096",
               "--num-kv-blocks", "8192", "--max-num-seqs", "64", "--tokens-per-chunk", "4")


def start_llm_server() -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(python_module("tailscope.targets.llm", "--host", "127.0.0.1", "--port", "0", *SERVER_ARGS),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith("LISTENING"):
        stop_process(proc)
        raise RuntimeError(f"the LLM reference server did not start: {line!r}")
    return proc, int(line.split()[1])


def start_stamp_server() -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "sse_stamp_server.py"), "--tokens-per-s", "200"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=HERE)
    line = proc.stdout.readline()
    if not line.startswith("LISTENING"):
        stop_process(proc)
        raise RuntimeError(f"the stamp server did not start: {line!r}")
    return proc, int(line.split()[1])


def prefix_counters(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
            if line.startswith(name):
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--speed", type=float, default=20.0)
    parser.add_argument("--to", type=float, default=600.0, help="trace seconds replayed (from 0)")
    parser.add_argument("--server", choices=("llm", "stamp"), default="llm")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    wall_s = args.to / args.speed
    with tempfile.TemporaryDirectory() as tmp:
        scenario_path = os.path.join(tmp, "replay.yaml")
        with open(scenario_path, "w") as fh:
            fh.write(textwrap.dedent(f"""\
                name: trace-replay-bench
                duration: {wall_s + 1:.3f}s
                timeout: 120s
                arrival: {{process: replay, file: {os.path.abspath(SAMPLE)}, format: mooncake, speed: {args.speed},
                           slice: {{from: 0s, to: {args.to}s}}}}
                classes: [{{name: chat, api: openai-chat, model: tailscope-llm}}]
                """))
        server, port = start_llm_server() if args.server == "llm" else start_stamp_server()
        try:
            before = prefix_counters(port) if args.server == "llm" else {}
            load_before = load_average()
            proc = subprocess.run([sys.executable, "-m", "tailscope.cli.main", "run", scenario_path, "--target",
                                   f"http://127.0.0.1:{port}", "--out", os.path.join(tmp, "runs"),
                                   "--receiver-port", "0"], capture_output=True, text=True, timeout=wall_s + 300)
            load_after = load_average()
            after = prefix_counters(port) if args.server == "llm" else {}
        finally:
            stop_process(server)
        if proc.returncode not in (0, 1, 3):
            raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
        runs = os.path.join(tmp, "runs")
        run_dir = os.path.join(runs, sorted(os.listdir(runs))[0])
        table = read_stream(os.path.join(run_dir, schema.REQUESTS), schema.REQUESTS_SCHEMA).table
        scenario = load_scenario(scenario_path, target_override="http://127.0.0.1:1")
    result = measure(table, scenario, args)
    result.update(server=args.server, load_average_before=load_before, load_average_after=load_after)
    if after:
        queries = after.get("vllm:prefix_cache_queries_total", 0) - before.get("vllm:prefix_cache_queries_total", 0)
        hits = after.get("vllm:prefix_cache_hits_total", 0) - before.get("vllm:prefix_cache_hits_total", 0)
        result["server_prefix_cache_hit_rate"] = round(hits / queries, 4) if queries else None
        result["server_cached_tokens"] = f"{int(hits)} of {int(queries)} prompt tokens"
        result["trace_cacheable_tokens"] = f"{reusable_prefix_tokens(scenario)} of {int(scenario.classes[0].llm.trace.input_tokens.sum())}"
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:34s} {value}")


def reusable_prefix_tokens(scenario) -> int:
    """The prompt tokens an unbounded prefix cache finds over the rows in order: each row's leading
    full hash-id blocks already seen, × the block size."""
    rows = scenario.classes[0].llm.trace
    seen, cached = set(), 0
    for length, ids in zip(rows.input_tokens.tolist(), rows.hash_ids):
        full = ids[: length // rows.block_tokens]
        cached += next((i for i, h in enumerate(full) if h not in seen), len(full)) * rows.block_tokens
        seen.update(full)
    return cached


def measure(table, scenario, args) -> dict:
    """The figures of one replay (see the module docstring)."""
    classes = scenario.classes
    rows = classes[0].llm.trace
    offsets = scenario.arrival.log.offsets_ns
    expected = np.rint(offsets / args.speed).astype(np.int64)
    scheduled = table.column("scheduled_ns").to_numpy()
    sent = table.column("sent_ns").to_numpy(zero_copy_only=False)
    origin = int(scheduled.min())  # the first row is at offset 0
    order = np.argsort(scheduled, kind="stable")
    scheduled_error = np.abs(scheduled[order] - origin - expected)
    sent_error_ms = np.abs(sent[order] - origin - expected) / 1e6
    mix = RequestMix(classes, 1)
    words = [json.loads(mix.prepare(0).body)["messages"][0]["content"].split() for _ in range(len(rows))]
    trace_reused, trace_blocks = hash_id_reuse(rows.hash_ids)
    sent_reused, sent_blocks = block_reuse(words, rows.block_tokens)
    return {
        "requests": int(table.num_rows), "trace_rows": len(rows), "speed": args.speed,
        "trace_seconds": args.to,
        "scheduled_error_max_ns": int(scheduled_error.max()),
        "scheduled_error_p99_ns": float(np.percentile(scheduled_error, 99)),
        "sent_error_p50_ms": round(float(np.percentile(sent_error_ms, 50)), 3),
        "sent_error_p99_ms": round(float(np.percentile(sent_error_ms, 99)), 3),
        "sent_error_max_ms": round(float(sent_error_ms.max()), 3),
        "sent_within_1ms": round(float(np.mean(sent_error_ms <= 1.0)), 4),
        "trace_hash_id_reuse": f"{trace_reused}/{trace_blocks} = {trace_reused / trace_blocks:.4f}",
        "sent_block_reuse": f"{sent_reused}/{sent_blocks} = {sent_reused / sent_blocks:.4f}",
        "block_reuse_equal": (trace_reused, trace_blocks) == (sent_reused, sent_blocks),
    }


if __name__ == "__main__":
    main()
