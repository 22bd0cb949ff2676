"""How often tailscope names the GC stalls of a plain FastAPI + OpenTelemetry service right, by rate.

Each run: ``tailscope run`` against tests/stalling_otel_service.py (OpenTelemetry's FastAPI
instrumentation, nothing of tailscope, no GC events) whose thread runs a full collection
(``gc.collect()`` over ``--heap`` objects, holding the GIL) every ``--every-s`` seconds. With
``--gc-metrics`` the service also exports ``cpython.gc.collections`` (OpenTelemetry runtime metric,
OTLP every second). A spike is a *stall spike* when a collection started inside it or up to 2 s
before it; its top cause should be ``process_stall`` (or ``gc`` from the runtime metrics), never
``generator``. Prints one row per run and the total:

    rate | pauses | spikes | stall spikes | process_stall/gc | generator | other

    python3 benchmarks/stall_naming.py --rates 10,30,60 --duration 40 [--gc-metrics] [--out DIR]
    python3 benchmarks/stall_naming.py --reanalyse DIR   # the kept runs, analysed again

About (duration + 20 s) per rate of wall time. Load goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from cli_helpers import free_port, load_analysis, only_run_dir, run_tailscope  # noqa: E402
from reliability_helpers import OwnedProcess, write_scenario  # noqa: E402

from tailscope.analyzers.analysis import analyze_run  # noqa: E402

#: A spike is over a collection when the collection started inside it or this long before it (ns).
LEAD_NS = 2_000_000_000
#: Each run's collections (epoch ns, ms) and rate, beside its run folder.
PAUSES_FILE = "pauses.json"
#: Top causes that name a stall right.
RIGHT = ("process_stall", "gc")


def one_run(out: str, rate: float, args) -> dict:
    """Run the service under ``tailscope run`` at ``rate`` req/s; count its stall spikes by top cause."""
    os.makedirs(out, exist_ok=True)
    receiver_port = free_port()
    count = max(int((args.duration - args.start_s) // args.every_s), 1)
    command = [sys.executable, os.path.join(ROOT, "tests", "stalling_otel_service.py"), "--heap", str(args.heap),
               "--start-s", str(args.start_s), "--every-s", str(args.every_s), "--count", str(count)]
    if args.gc_metrics:
        command += ["--gc-metrics", "--metrics-interval-ms", "1000"]
    service = OwnedProcess(command, stdout=subprocess.PIPE,
                           env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}",
                                "OTEL_BSP_SCHEDULE_DELAY": "500"})
    try:
        line = service.proc.stdout.readline().decode()
        if not line.startswith("LISTENING "):
            raise SystemExit("the service did not start: " + "".join(service.stderr_lines)[-2000:])
        scenario = write_scenario(os.path.join(out, "stalls.yaml"), f"http://127.0.0.1:{line.split()[1]}",
                                  duration=f"{args.duration}s", rate=rate, request_path="/predict")
        result = run_tailscope("run", scenario, "--out", os.path.join(out, "runs"), "--receiver-port",
                               str(receiver_port), "--receiver-grpc-port", "-1", timeout=args.duration + 300)
    finally:
        service.stop()
    pauses = [(int(text.split()[1]), float(text.split()[2])) for text in service.proc.stdout.read().decode().splitlines()
              if text.startswith("PAUSE ")]
    if result.returncode not in (0, 1, 3):
        raise SystemExit(result.stderr[-3000:])
    with open(os.path.join(out, PAUSES_FILE), "w", encoding="utf-8") as fh:
        json.dump({"rate": rate, "pauses": pauses}, fh)
    return count_spikes(out)


def count_spikes(out: str, reanalyse: bool = False) -> dict:
    """The row of the run in ``out`` (its pauses.json and run folder); ``reanalyse``: analyse the
    recorded run again with this tailscope instead of reading its analysis.json."""
    with open(os.path.join(out, PAUSES_FILE), encoding="utf-8") as fh:
        saved = json.load(fh)
    rate, pauses = saved["rate"], [tuple(p) for p in saved["pauses"]]
    run_dir = only_run_dir(os.path.join(out, "runs"))
    analysis = analyze_run(run_dir) if reanalyse else load_analysis(run_dir)
    spikes = analysis["spikes"]
    over = [s for s in spikes if any(s["start_ns"] - LEAD_NS <= at < s["end_ns"] for at, _ in pauses)]
    tops = collections.Counter(s["causes"][0]["kind"] for s in over)
    lengths = sorted(ms for _, ms in pauses)
    return {"rate": rate, "run_dir": run_dir, "pauses": len(pauses), "spikes": len(spikes), "stall_spikes": len(over),
            "right": sum(tops[k] for k in RIGHT), "by_kind": dict(tops),
            "generator": sum(1 for s in over if "generator" in [c["kind"] for c in s["causes"]]),
            "other": {k: n for k, n in tops.items() if k not in RIGHT},
            "pause_ms": (lengths[0], lengths[len(lengths) // 2], lengths[-1]) if lengths else None,
            "p99_ms": analysis["summary"]["latency_ms"]["p99"]["value_ms"],
            "gc_events": analysis["events"]["gc_pauses"]["count"]}


def table(rows: list[dict]) -> str:
    head = ("| rate (req/s) | collections: min / median / max | latency P99 | spikes | stall spikes "
            "| named process_stall / gc | generator named | other top cause |")
    lines = [head, "| " + " | ".join("---" for _ in range(8)) + " |"]
    for row in rows:
        pause = "/".join(f"{v:.0f}" for v in row["pause_ms"]) + " ms" if row["pause_ms"] else "—"
        named = " + ".join(f"{row['by_kind'].get(k, 0)} {k}" for k in RIGHT if row["by_kind"].get(k))
        share = f" ({row['right'] / row['stall_spikes']:.0%})" if row["stall_spikes"] else ""
        other = ", ".join(f"{k} {n}" for k, n in sorted(row["other"].items())) or "—"
        lines.append(f"| {row['rate']:g} | {row['pauses']}: {pause} | {row['p99_ms']:.0f} ms | {row['spikes']} | "
                     f"{row['stall_spikes']} | {named or '0'}{share} | {row['generator']} | {other} |")
    stall = sum(r["stall_spikes"] for r in rows)
    right = sum(r["right"] for r in rows)
    lines.append(f"| all | {sum(r['pauses'] for r in rows)} | | {sum(r['spikes'] for r in rows)} | {stall} | "
                 f"{right}{f' ({right / stall:.0%})' if stall else ''} | {sum(r['generator'] for r in rows)} | "
                 f"{sum(sum(r['other'].values()) for r in rows)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="10,30,60", help="comma-separated requests per second (Poisson)")
    parser.add_argument("--duration", type=int, default=40, help="seconds of load per run (at most 60)")
    parser.add_argument("--start-s", type=float, default=6.0)
    parser.add_argument("--every-s", type=float, default=6.0)
    parser.add_argument("--heap", type=int, default=1_000_000, help="objects each full collection walks")
    parser.add_argument("--gc-metrics", action="store_true", help="the service exports cpython.gc.collections")
    parser.add_argument("--out", default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--reanalyse", default=None, metavar="OUT",
                        help="no new runs: analyse the runs an earlier --out kept again and print their table")
    args = parser.parse_args(argv)
    if args.reanalyse:
        outs = sorted(glob.glob(os.path.join(args.reanalyse, "rate-*")), key=lambda p: float(p.rsplit("-", 1)[1]))
        print(f"runs under {args.reanalyse}, analysed again")
        print(table([count_spikes(o, reanalyse=True) for o in outs]))
        return 0
    if not 10 <= args.duration <= 60:
        parser.error("--duration must be 10-60 s")
    out = args.out or tempfile.mkdtemp(prefix="stall-naming-")
    rows = [one_run(os.path.join(out, f"rate-{rate}"), float(rate), args) for rate in args.rates.split(",")]
    print(f"runs under {out}; {args.duration} s each, a full collection of {args.heap:,} objects every "
          f"{args.every_s:g} s from {args.start_s:g} s; GC events: none; runtime GC metrics: "
          f"{'cpython.gc.collections over OTLP' if args.gc_metrics else 'none'}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
