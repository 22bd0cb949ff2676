"""Tracing overhead and receiver ingest rate, measured (issue: tracing, item 6).

Part 1 — the instrumentation kit's cost on the reference target. One target
process per mode runs pinned to CPU 0 — ``off`` (``--no-tracing``), ``lean``
(the kit's lean engine, the default) and ``sdk`` (``TAILSCOPE_TRACING_ENGINE=sdk``,
the OpenTelemetry SDK) — every traced mode with every stage span, batch spans,
GC pause reporting and OTLP/HTTP export to a real receiver. A closed-loop load
from a separate process pinned to CPU 1 (``--concurrency`` keep-alive HTTP/1.1
connections on loopback, each sending its next request as soon as the last
answer arrived, every request with a ``traceparent`` from the load generator's
own ``new_traceparent``) drives one target at a time at its maximum
throughput, in ``--seconds`` bursts. Each traced mode runs at every
``--sample-rates`` rate (head sampling: that share of traceparents carries the
sampled flag, the rest ``00``, as ``trace_sample_rate`` in a scenario makes
them), every variant once per round in a rotating order, for ``--rounds`` rounds (this shared VM's speed
drifts by ±15 % within seconds; short interleaved bursts expose every mode to
the same drift). Reported per mode: medians of requests/s, P99 (ms) and the
target process's CPU time per request (its exporter thread included; that no
mode starts a helper process is checked and printed), and per traced mode the
median over rounds of its ratio to ``off`` in the same round. A control
variant, ``off/2`` (a second untraced process, visited like the others), gives
the noise floor: two identical processes differ by a few per cent here, so a
traced mode's difference of that size is not the tracing's. Run at the
target's default model width (128: ~0.5 ms of CPU per request) and at 512
(~2.4 ms). Goal: throughput loss <= 5%.

Part 2 — the receiver's ingest rate on one core. The receiver process is
pinned to CPU 0; sender processes on CPU 1 export pre-built batches of real
SDK spans with the OTel SDK's own OTLP/HTTP protobuf exporter
(``OTLPSpanExporter.export``), as a traced service would. Reported: spans/s
stored, from ``receiver.json``, as a ratio to the goal of 20,000 spans/s.

Usage: ``python benchmarks/tracing_overhead.py [--seconds 3] [--rounds 8]
[--model-dims 128 512] [--modes off lean sdk] [--sample-rates 1 0.1] [--parts 1 2] [--verbose]``.
Loopback only; every child process is stopped by PID at the end, also on error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil

from tailscope.loadgen.tracecontext import new_traceparent
from tailscope.support.python_child import python_module

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


async def _connection(port: int, deadline: float, latencies: list, errors: list, sample_rate: float) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    rng = random.Random(secrets.randbits(64))
    try:
        while time.perf_counter() < deadline:
            traceparent, _ = new_traceparent(rng, sample_rate)
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


async def _closed_loop(port: int, seconds: float, concurrency: int, sample_rate: float) -> dict:
    latencies: list[float] = []
    errors: list[bytes] = []
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    await asyncio.gather(*(_connection(port, deadline, latencies, errors, sample_rate) for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {"completed": len(latencies), "errors": len(errors), "elapsed_s": elapsed,
            "p99_ms": float(np.quantile(latencies, 0.99)) * 1000 if latencies else None}


def run_client(port: int, seconds: float, concurrency: int, cpu: int, sample_rate: float = 1.0) -> dict:
    """The closed-loop load in a separate process (this script with ``--client``); ``sample_rate``
    of its traceparents carry the sampled flag (the load generator's head sampling)."""
    out = subprocess.run(
        [sys.executable, __file__, "--client", str(port), "--seconds", str(seconds),
         "--concurrency", str(concurrency), "--client-cpu", str(cpu), "--sample-rate", repr(sample_rate)],
        capture_output=True, text=True, timeout=seconds + 60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- part 1


#: Part 1 modes: the target's tracing flag and engine.
MODES = {"off": (False, None), "lean": (True, "lean"), "sdk": (True, "sdk")}


def start_target(mode: str, receiver_port: int, model_dim: int, cpu: int) -> tuple[subprocess.Popen, int]:
    """The reference target in ``mode``, pinned to ``cpu``, exporting to the receiver."""
    tracing, engine = MODES[mode]
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TAILSCOPE_TRACING_ENGINE": engine or "lean"}
    argv = python_module("tailscope.targets.reference", "--host", "127.0.0.1", "--port", "0",
                         "--model-dim", str(model_dim), "--tracing" if tracing else "--no-tracing")
    return start_child(argv, cpu, env)


#: Label of the control variant: a second ``off`` process, compared with the first like a traced mode.
CONTROL = "off/2"


def mode_variants(modes: list[str], sample_rates: list[float]) -> dict[str, tuple[str, str, float]]:
    """Part 1's variants, ``label -> (process, mode, sample rate)``: ``off`` once, each traced mode at
    each rate (labelled ``lean`` at rate 1, ``lean@0.1`` at 0.1), and with ``off`` the control
    :data:`CONTROL`, a second untraced process: its ratio to ``off`` is the benchmark's noise floor
    (two identical processes differ by a few per cent on this VM)."""
    variants = {}
    for mode in modes:
        for rate in ([1.0] if mode == "off" else sample_rates):
            variants[mode if rate >= 1.0 else f"{mode}@{rate:g}"] = (mode, mode, rate)
    if "off" in modes:
        variants[CONTROL] = (CONTROL, "off", 1.0)
    return variants


def burst(target: subprocess.Popen, port: int, args, client_cpu: int, sample_rate: float = 1.0) -> dict:
    """One burst of closed-loop load on a running target: req/s, P99 and the target's CPU per request
    (its exporter thread included; neither engine uses a helper process, which is checked)."""
    process = psutil.Process(target.pid)
    cpu_before = sum(process.cpu_times()[:2])
    result = run_client(port, args.seconds, args.concurrency, client_cpu, sample_rate)
    cpu_s = sum(process.cpu_times()[:2]) - cpu_before
    result["rps"] = result["completed"] / result["elapsed_s"]
    result["cpu_ms"] = cpu_s * 1000 / max(result["completed"], 1)
    result["helper_processes"] = len(process.children(recursive=True))
    return result


def _median(results: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in results]))


def part1(args, model_dim: int, cpus, workdir: str) -> dict:
    """Every mode's target runs at once on the target core (only the one under load uses it);
    the load visits them in short bursts, round after round, in a rotating order, so that
    the machine's drift (±15 % over seconds on a shared VM) hits every mode alike. Per
    round, each traced mode is compared with ``off`` of the same round."""
    receiver, receiver_port = start_child(
        python_module("tailscope.tracing.ingest.receiver", "--run-dir", os.path.join(workdir, f"dim{model_dim}"),
                      "--port", "0", "--no-grpc"), cpus[1])
    targets: dict[str, tuple[subprocess.Popen, int]] = {}
    variants = mode_variants(args.modes, args.sample_rates)
    results: dict[str, list[dict]] = {label: [] for label in variants}
    try:
        for process_key, mode, _ in variants.values():
            if process_key not in targets:
                targets[process_key] = start_target(mode, receiver_port, model_dim, cpus[0])
                run_client(targets[process_key][1], args.warmup, args.concurrency, cpus[1])
        labels = list(variants)
        for round_index in range(args.rounds):
            shift = round_index % len(labels)
            for label in labels[shift:] + labels[:shift]:
                process_key, _, sample_rate = variants[label]
                r = burst(*targets[process_key], args, cpus[1], sample_rate)
                results[label].append(r)
                if args.verbose:
                    print(f"  round {round_index + 1} {label:>8}: {r['rps']:8.1f} req/s  P99 {r['p99_ms']:6.2f} ms  "
                          f"CPU {r['cpu_ms']:.3f} ms/request  errors {r['errors']}  "
                          f"helper processes {r['helper_processes']}", flush=True)
    finally:
        for target, _ in targets.values():
            stop_child(target)
        stop_child(receiver)
    with open(os.path.join(workdir, f"dim{model_dim}", "receiver.json"), encoding="utf-8") as fh:
        spans = json.load(fh)["spans_stored"]
    summary = {mode: {"rps": _median(rs, "rps"), "p99_ms": _median(rs, "p99_ms"), "cpu_ms": _median(rs, "cpu_ms"),
                      "errors": sum(r["errors"] for r in rs),
                      "helpers": max(r["helper_processes"] for r in rs)}
               for mode, rs in results.items()}
    paired = {}
    if "off" in results:
        for mode, rs in results.items():
            if mode != "off":
                pairs = list(zip(results["off"], rs))
                ratios = [r["rps"] / o["rps"] for o, r in pairs]
                paired[mode] = {"rps_ratio": float(np.median(ratios)),
                                "rps_ratio_iqr": [float(q) for q in np.percentile(ratios, [25, 75])],
                                "capacity_ratio": float(np.median([o["cpu_ms"] / r["cpu_ms"] for o, r in pairs])),
                                "extra_us": float(np.median([(r["cpu_ms"] - o["cpu_ms"]) * 1000 for o, r in pairs])),
                                "p99_ratio": float(np.median([r["p99_ms"] / o["p99_ms"] for o, r in pairs]))}
    return {"model_dim": model_dim, "modes": summary, "paired": paired, "spans_stored": spans}


def print_part1(one: dict) -> None:
    modes, paired = one["modes"], one["paired"]
    print(f"  model dim {one['model_dim']}: medians over the rounds (spans stored {one['spans_stored']:,})")
    print(f"  {'mode':>9} {'req/s':>9} {'P99 ms':>8} {'CPU ms/req':>11} {'errors':>7} {'helpers':>8} | "
          f"{'req/s ratio':>12} {'P99 ratio':>10} {'CPU capacity ratio':>19} {'+CPU us/req':>12}")
    for mode, m in modes.items():
        pair = paired.get(mode)
        ratios = (f"{pair['rps_ratio']:12.3f} {pair['p99_ratio']:10.3f} {pair['capacity_ratio']:19.3f} "
                  f"{pair['extra_us']:+12.0f}") if pair else f"{'1.000':>12} {'1.000':>10} {'1.000':>19} {'':>12}"
        print(f"  {mode:>9} {m['rps']:9.1f} {m['p99_ms']:8.2f} {m['cpu_ms']:11.3f} {m['errors']:7d} "
              f"{m['helpers']:8d} | {ratios}")
    control = paired.get(CONTROL)
    if control is not None:
        print(f"  noise floor ({CONTROL}, a second untraced process): throughput ratio {control['rps_ratio']:.3f}, "
              f"{control['extra_us']:+.0f} us CPU per request -- differences of that size are not the tracing's")
    for mode, pair in paired.items():
        if mode == CONTROL:
            continue
        verdict = "met" if pair["rps_ratio"] >= 1 - THROUGHPUT_LOSS_GOAL else "missed"
        low, high = pair["rps_ratio_iqr"]
        print(f"  {mode}: throughput loss {1 - pair['rps_ratio']:.1%} (ratio IQR over the rounds "
              f"{low:.3f}-{high:.3f}), one-core capacity loss "
              f"{1 - pair['capacity_ratio']:.1%} ({pair['extra_us']:+.0f} us CPU per request) -- goal <= "
              f"{THROUGHPUT_LOSS_GOAL:.0%} loss: {verdict}")


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


def part2(args, cpus, workdir: str, seconds: float) -> dict:
    run_dir = os.path.join(workdir, "ingest")
    receiver, port = start_child(python_module("tailscope.tracing.ingest.receiver", "--run-dir", run_dir,
                                               "--port", "0", "--no-grpc", "--queue-size", "4096"), cpus[0])
    senders = []
    try:
        senders = [subprocess.Popen([sys.executable, __file__, "--sender", str(port), "--seconds",
                                     str(seconds + 3), "--client-cpu", str(cpus[1])])
                   for _ in range(args.senders)]
        time.sleep(3)  # senders build their spans and connect
        stats_path = os.path.join(run_dir, "receiver.json")
        rx_proc = psutil.Process(receiver.pid)
        with open(stats_path, encoding="utf-8") as fh:
            before, t0, cpu0 = json.load(fh)["spans_received"], time.monotonic(), sum(rx_proc.cpu_times()[:2])
        time.sleep(seconds - 1)
        with open(stats_path, encoding="utf-8") as fh:
            after, t1, cpu1 = json.load(fh)["spans_received"], time.monotonic(), sum(rx_proc.cpu_times()[:2])
        for proc in senders:
            proc.wait(timeout=seconds + 60)
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
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="part 1: length of one burst; part 2: measurement time (s)")
    parser.add_argument("--warmup", type=float, default=3.0, help="warm-up load per target start (s)")
    parser.add_argument("--rounds", type=int, default=8, help="part 1 rounds (every mode once per round)")
    parser.add_argument("--verbose", action="store_true", help="print every burst")
    parser.add_argument("--concurrency", type=int, default=32, help="keep-alive connections of the load")
    parser.add_argument("--senders", type=int, default=3, help="exporter processes feeding the receiver")
    parser.add_argument("--model-dims", nargs="+", type=int, default=[128, 512],
                        help="the target's --model-dim, one part-1 run each (work per request grows ~ dim^2; "
                             "default: 128, the target's default, ~0.5 ms of CPU; and 512, ~2.4 ms)")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=["off", "lean", "sdk"],
                        help="part 1 modes, run in this order each round (default: off lean sdk)")
    parser.add_argument("--sample-rates", nargs="+", type=float, default=[1.0, 0.1],
                        help="part 1: head-sampling rates of the load's traceparents, each traced mode at each "
                             "(default: 1 0.1)")
    parser.add_argument("--parts", nargs="+", type=int, choices=[1, 2], default=[1, 2],
                        help="which parts to run (default: 1 2)")
    parser.add_argument("--client", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sender", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--client-cpu", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--sample-rate", type=float, default=1.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client is not None:
        if args.client_cpu is not None:
            os.sched_setaffinity(0, {args.client_cpu})
        print(json.dumps(asyncio.run(_closed_loop(args.client, args.seconds, args.concurrency, args.sample_rate))))
        return 0
    if args.sender is not None:
        sender(args.sender, args.seconds, args.client_cpu)
        return 0
    cpus = two_cpus()
    with tempfile.TemporaryDirectory(prefix="tailscope-bench-") as workdir:
        if 1 in args.parts:
            print(f"part 1: reference targets on CPU {cpus[0]}, closed-loop load ({args.concurrency} connections) "
                  f"and receiver on CPU {cpus[1]}, modes {' '.join(mode_variants(args.modes, args.sample_rates))}, "
                  f"{args.rounds} rounds of {args.seconds:g} s bursts per mode")
            for model_dim in args.model_dims:
                print_part1(part1(args, model_dim, cpus, workdir))
        if 2 not in args.parts:
            return 0
        print(f"part 2: receiver on CPU {cpus[0]}, {args.senders} OTLP/HTTP exporter processes on CPU {cpus[1]}")
        two = part2(args, cpus, workdir, seconds=max(args.seconds, 10.0))
        print(f"  ingested {two['spans_per_s']:,.0f} spans/s with the receiver {two['receiver_cpu_share']:.0%} busy "
              f"(the senders' encoding is the limit when below 100%)")
        print(f"  receiver capacity {two['spans_per_cpu_s']:,.0f} spans per CPU-second = {two['goal_ratio']:.2f} x "
              f"the goal of {INGEST_GOAL_SPANS_S:,} (received {two['spans_received']:,}, stored "
              f"{two['spans_stored']:,}, dropped {two['spans_dropped']:,})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
