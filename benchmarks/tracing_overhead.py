"""Tracing overhead and receiver ingest rate, measured (issue: tracing, item 6).

Part 1 — the instrumentation kit's cost on the reference target. The target
runs pinned to CPU 0, once with the kit on (every stage span, batch spans, GC
pause reporting, export to a real receiver) and once with ``--no-tracing``, in
alternating rounds within one run of this script. A closed-loop load from a
separate process pinned to CPU 1 (``--concurrency`` keep-alive HTTP/1.1
connections on loopback, each sending its next request as soon as the last
answer arrived, every request with a sampled ``traceparent``) drives the
target at its maximum throughput. Reported: requests/s and P99 (ms) per mode,
and on/off ratios. Goal: throughput loss <= 5%.

Part 2 — the receiver's ingest rate on one core. The receiver process is
pinned to CPU 0; sender processes on CPU 1 export pre-built batches of real
SDK spans with the OTel SDK's own OTLP/HTTP protobuf exporter
(``OTLPSpanExporter.export``), as a traced service would. Reported: spans/s
stored, from ``receiver.json``, as a ratio to the goal of 20,000 spans/s.

Usage: ``python benchmarks/tracing_overhead.py [--seconds 10] [--rounds 2]``.
Loopback only; every child process is stopped by PID at the end, also on error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil

TEXT_BODY = json.dumps({"text": "the quick brown fox jumps over the lazy dog " * 6}).encode()
SPANS_PER_BATCH = 512
THROUGHPUT_LOSS_GOAL = 0.05
INGEST_GOAL_SPANS_S = 20_000


# --------------------------------------------------------------------------- helpers


def start_child(argv: list[str], cpu: int | None, env: dict | None = None) -> tuple[subprocess.Popen, int | None]:
    """Start a child (pinned to ``cpu``); return it and the port of its ``LISTENING <port>`` line."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, **(env or {})))
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    line = proc.stdout.readline()
    if not line.startswith("LISTENING "):
        stop_child(proc)
        raise RuntimeError(f"{argv[:4]} did not start: {line!r}")
    return proc, int(line.split()[1])


def stop_child(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def two_cpus() -> tuple[int, int]:
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else (cpus[0], cpus[0])


# --------------------------------------------------------------------------- closed-loop client


async def _connection(port: int, deadline: float, latencies: list, errors: list) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < deadline:
            traceparent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
            head = (f"POST /v1/infer/text HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    f"traceparent: {traceparent}\r\nContent-Length: {len(TEXT_BODY)}\r\n\r\n").encode()
            started = time.perf_counter()
            writer.write(head + TEXT_BODY)
            status_line = await reader.readline()
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            if not status_line.startswith(b"HTTP/1.1 200"):
                errors.append(status_line)
            latencies.append(time.perf_counter() - started)
    finally:
        writer.close()


async def _closed_loop(port: int, seconds: float, concurrency: int) -> dict:
    latencies: list[float] = []
    errors: list[bytes] = []
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    await asyncio.gather(*(_connection(port, deadline, latencies, errors) for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {"completed": len(latencies), "errors": len(errors), "elapsed_s": elapsed,
            "p99_ms": float(np.quantile(latencies, 0.99)) * 1000 if latencies else None}


def run_client(port: int, seconds: float, concurrency: int, cpu: int) -> dict:
    """The closed-loop load in a separate process (this script with ``--client``)."""
    out = subprocess.run(
        [sys.executable, __file__, "--client", str(port), "--seconds", str(seconds),
         "--concurrency", str(concurrency), "--client-cpu", str(cpu)],
        capture_output=True, text=True, timeout=seconds + 60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- part 1


def measure_target(tracing: bool, receiver_port: int, args, cpus) -> dict:
    target_cpu, client_cpu = cpus
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "tailscope.target", "--host", "127.0.0.1", "--port", "0",
            "--model-dim", str(args.model_dim), "--tracing" if tracing else "--no-tracing"]
    target, port = start_child(argv, target_cpu, env)
    try:
        run_client(port, args.warmup, args.concurrency, client_cpu)  # warm up: imports, caches, batcher
        process = psutil.Process(target.pid)
        cpu_before = sum(process.cpu_times()[:2])
        result = run_client(port, args.seconds, args.concurrency, client_cpu)
        cpu_s = sum(process.cpu_times()[:2]) - cpu_before
    finally:
        stop_child(target)
    result["rps"] = result["completed"] / result["elapsed_s"]
    # CPU time per request: robust to other load on the machine; 1000 / cpu_ms is the
    # throughput one dedicated core would give.
    result["cpu_ms"] = cpu_s * 1000 / max(result["completed"], 1)
    return result


def part1(args, cpus, workdir: str) -> dict:
    receiver, receiver_port = start_child(
        [sys.executable, "-m", "tailscope.tracing.receiver", "--run-dir", os.path.join(workdir, "overhead"),
         "--port", "0", "--no-grpc"], cpus[1])
    results = {True: [], False: []}
    try:
        for _ in range(args.rounds):
            for tracing in (True, False):
                r = measure_target(tracing, receiver_port, args, cpus)
                results[tracing].append(r)
                print(f"  tracing {'on ' if tracing else 'off'}: {r['rps']:8.1f} req/s  "
                      f"P99 {r['p99_ms']:6.2f} ms  CPU {r['cpu_ms']:.3f} ms/request  errors {r['errors']}", flush=True)
    finally:
        stop_child(receiver)
    with open(os.path.join(workdir, "overhead", "receiver.json"), encoding="utf-8") as fh:
        spans = json.load(fh)["spans_stored"]
    on_rps = float(np.median([r["rps"] for r in results[True]]))
    off_rps = float(np.median([r["rps"] for r in results[False]]))
    on_p99 = float(np.median([r["p99_ms"] for r in results[True]]))
    off_p99 = float(np.median([r["p99_ms"] for r in results[False]]))
    on_cpu = float(np.median([r["cpu_ms"] for r in results[True]]))
    off_cpu = float(np.median([r["cpu_ms"] for r in results[False]]))
    return {"on_rps": on_rps, "off_rps": off_rps, "on_p99_ms": on_p99, "off_p99_ms": off_p99,
            "on_cpu_ms": on_cpu, "off_cpu_ms": off_cpu, "cpu_capacity_ratio": off_cpu / on_cpu,
            "throughput_ratio": on_rps / off_rps, "p99_ratio": on_p99 / off_p99, "spans_stored": spans}


# --------------------------------------------------------------------------- part 2


def sender(port: int, seconds: float, cpu: int) -> None:
    """Export pre-built batches of SDK spans with the real OTLP/HTTP exporter until ``seconds`` pass."""
    os.sched_setaffinity(0, {cpu})
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench", "process.pid": os.getpid()}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    while len(memory.get_finished_spans()) < SPANS_PER_BATCH:
        with tracer.start_as_current_span("POST /v1/infer/text", kind=trace.SpanKind.SERVER,
                                          attributes={"http.request.method": "POST", "url.path": "/v1/infer/text"}):
            for stage in ("preprocess", "queue_wait", "inference", "postprocess"):
                with tracer.start_as_current_span(stage, attributes={"batch.size": 8, "queue.depth": 3}):
                    pass
    batch = memory.get_finished_spans()[:SPANS_PER_BATCH]
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=30)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        exporter.export(batch)
    exporter.shutdown()


def part2(args, cpus, workdir: str) -> dict:
    run_dir = os.path.join(workdir, "ingest")
    receiver, port = start_child([sys.executable, "-m", "tailscope.tracing.receiver", "--run-dir", run_dir,
                                  "--port", "0", "--no-grpc", "--queue-size", "4096"], cpus[0])
    senders = []
    try:
        senders = [subprocess.Popen([sys.executable, __file__, "--sender", str(port), "--seconds",
                                     str(args.seconds + 3), "--client-cpu", str(cpus[1])])
                   for _ in range(args.senders)]
        time.sleep(3)  # senders build their spans and connect
        stats_path = os.path.join(run_dir, "receiver.json")
        rx_proc = psutil.Process(receiver.pid)
        with open(stats_path, encoding="utf-8") as fh:
            before, t0, cpu0 = json.load(fh)["spans_received"], time.monotonic(), sum(rx_proc.cpu_times()[:2])
        time.sleep(args.seconds - 1)
        with open(stats_path, encoding="utf-8") as fh:
            after, t1, cpu1 = json.load(fh)["spans_received"], time.monotonic(), sum(rx_proc.cpu_times()[:2])
        for proc in senders:
            proc.wait(timeout=args.seconds + 60)
    finally:
        for proc in senders:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stop_child(receiver)
    with open(os.path.join(run_dir, "receiver.json"), encoding="utf-8") as fh:
        final = json.load(fh)
    rate = (after - before) / (t1 - t0)
    cpu_share = (cpu1 - cpu0) / (t1 - t0)
    per_core = (after - before) / max(cpu1 - cpu0, 1e-9)
    return {"spans_per_s": rate, "receiver_cpu_share": cpu_share, "spans_per_cpu_s": per_core,
            "goal_ratio": per_core / INGEST_GOAL_SPANS_S, "spans_stored": final["spans_stored"],
            "spans_received": final["spans_received"], "spans_dropped": final["spans_dropped"]}


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measurement time per step (s)")
    parser.add_argument("--warmup", type=float, default=3.0, help="warm-up load per target start (s)")
    parser.add_argument("--rounds", type=int, default=2, help="on/off rounds (alternating)")
    parser.add_argument("--concurrency", type=int, default=32, help="keep-alive connections of the load")
    parser.add_argument("--senders", type=int, default=3, help="exporter processes feeding the receiver")
    parser.add_argument("--model-dim", type=int, default=128,
                        help="the target's --model-dim (work per request grows ~ dim^2; default 128)")
    parser.add_argument("--client", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sender", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--client-cpu", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client is not None:
        if args.client_cpu is not None:
            os.sched_setaffinity(0, {args.client_cpu})
        print(json.dumps(asyncio.run(_closed_loop(args.client, args.seconds, args.concurrency))))
        return 0
    if args.sender is not None:
        sender(args.sender, args.seconds, args.client_cpu)
        return 0
    cpus = two_cpus()
    with tempfile.TemporaryDirectory(prefix="tailscope-bench-") as workdir:
        print(f"part 1: reference target (model dim {args.model_dim}) on CPU {cpus[0]}, closed-loop load "
              f"({args.concurrency} connections) "
              f"and receiver on CPU {cpus[1]}, {args.rounds} rounds x {args.seconds:g} s")
        one = part1(args, cpus, workdir)
        print(f"  median: on {one['on_rps']:.1f} req/s, off {one['off_rps']:.1f} req/s; "
              f"P99 on {one['on_p99_ms']:.2f} ms, off {one['off_p99_ms']:.2f} ms; spans stored {one['spans_stored']:,}")
        print(f"  throughput on/off = {one['throughput_ratio']:.3f}  (loss {1 - one['throughput_ratio']:.1%}; "
              f"goal <= {THROUGHPUT_LOSS_GOAL:.0%})")
        print(f"  P99 on/off        = {one['p99_ratio']:.3f}")
        print(f"  CPU per request: on {one['on_cpu_ms']:.3f} ms, off {one['off_cpu_ms']:.3f} ms -> one-core capacity "
              f"on/off = {one['cpu_capacity_ratio']:.3f} (loss {1 - one['cpu_capacity_ratio']:.1%}; independent of "
              f"other load on the machine)")
        print(f"part 2: receiver on CPU {cpus[0]}, {args.senders} OTLP/HTTP exporter processes on CPU {cpus[1]}")
        two = part2(args, cpus, workdir)
        print(f"  ingested {two['spans_per_s']:,.0f} spans/s with the receiver {two['receiver_cpu_share']:.0%} busy "
              f"(the senders' encoding is the limit when below 100%)")
        print(f"  receiver capacity {two['spans_per_cpu_s']:,.0f} spans per CPU-second = {two['goal_ratio']:.2f} x "
              f"the goal of {INGEST_GOAL_SPANS_S:,} (received {two['spans_received']:,}, stored "
              f"{two['spans_stored']:,}, dropped {two['spans_dropped']:,})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
