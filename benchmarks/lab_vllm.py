"""AC@1 per fault kind and false alarms on controls: the real vLLM CPU build, and the LLM reference
server at chosen request rates.

Each invocation runs a slice of the measurement with the lab itself (``tailscope.lab.suite.run_lab``,
the experiments of ``tailscope.lab.plan.build_suite``) into a folder of its own under ``--root``, so a
slice fits a few minutes on a shared machine; ``table`` then scores every slice found there together:

    python benchmarks/lab_vllm.py run --target vllm --only llm_overload --seeds 1,2,3 --duration 60
    python benchmarks/lab_vllm.py run --target llm --only llm_prompt_storm --rates 1,3,10 --duration 60
    python benchmarks/lab_vllm.py table

``--seeds 1,2,3`` runs those seeds of the suite (the vLLM suite's load levels: 4, 2 and 8 requests/s
for seeds 1, 2, 3); ``--rates`` gives every experiment of the slice that rate instead (seed 1, 2, 3, …
in turn; the LLM suite runs ``--seeds`` at each rate, each run as long as the spike test needs at
that rate — ``--duration`` is then the floor — and its fault sized for it). ``table`` prints, per
target, rate and run length, each kind's scored runs, detection, AC@1, AC@3, BARO's AC@1 and mean
P99 impact, and the control runs' false-alarm rate, plus each miss's top causes;
``table --rescore`` analyses every run again with this checkout's detectors first (the lab scored
each run with the detectors of its time).
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import sys
import time

from tailscope.analyzers.analysis import analyze_run
from tailscope.lab.outputs import control_line, markdown_table
from tailscope.lab.plan import CONTROL, LLM, VLLM, build_suite
from tailscope.lab.scoring import aggregate, score_control_run, score_fault_run
from tailscope.lab.suite import run_lab
from tailscope.lab.vllm_target import find_vllm

DEFAULT_ROOT = "runs/bench-lab-vllm"


def _numbers(text: str | None, kind=int) -> list:
    return [kind(part) for part in text.split(",") if part.strip()] if text else []


def run_slice(args) -> None:
    vllm = find_vllm() if args.target == VLLM else None
    seeds = _numbers(args.seeds) or [1]
    rates = _numbers(args.rates, float)
    only = args.only.split(",")
    full = build_suite(quick=False, seeds=max(seeds), only=only, duration_s=args.duration, target=args.target,
                       tokenizer=vllm.tokenizer if vllm else "")
    suite = [e for e in full if e.seed in seeds]
    if rates and args.target == LLM:
        # the LLM suite sizes each run and its fault for the rate (plan.llm_run_length_s, llm_params_for_rate)
        suite = [dataclasses.replace(e, name=f"{e.kind}-{e.scenario}-r{rate:g}-s{e.seed}")
                 for rate in rates
                 for e in build_suite(quick=False, seeds=max(seeds), only=only, duration_s=args.duration,
                                      target=args.target, rate=rate)
                 if e.seed in seeds]
    elif rates:
        base = [e for e in full if e.seed == 1]
        suite = [dataclasses.replace(e, seed=index + 1, rate=rate, name=f"{e.kind}-{e.scenario}-r{rate:g}")
                 for e in base for index, rate in enumerate(rates)]
    name = f"{args.target}-{'-'.join(only)}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    out = os.path.join(args.root, name)
    started = time.monotonic()
    lab = run_lab(suite, out, f"bench-{args.target}", vllm=vllm,
                  on_result=lambda r: print(f"  {r['name']} ({r['rate']:g}/s): {r['status']} {r['wall_s']:.0f} s "
                                            f"{r.get('error') or (r.get('score') or {}).get('top_causes') or ''}",
                                            flush=True))
    print(markdown_table(lab["scores"]))
    print(f"{len(suite)} experiments of {sum(e.duration_s for e in suite):g} s in all in {time.monotonic() - started:.0f} s → {out}")


def _results(root: str, rescore: bool) -> list[dict]:
    """Every experiment of the slices under ``root``; with ``rescore``, each run analysed again
    with the detectors of this checkout and scored (BARO's scores kept as the lab wrote them)."""
    results = []
    for path in sorted(glob.glob(os.path.join(root, "*", "lab.json"))):
        with open(path, encoding="utf-8") as fh:
            lab = json.load(fh)
        for r in lab["experiments"]:
            r = dict(r, target=r.get("target") or "reference")
            if rescore and r["status"] == "ok" and r.get("run_dir"):
                analysis = analyze_run(r["run_dir"])
                score = score_control_run(analysis) if r["kind"] == CONTROL else score_fault_run(analysis)
                r["score"] = score
            results.append(r)
    return results


def table(args) -> None:
    results = _results(args.root, args.rescore)
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        key = (r["target"], "suite levels" if r["target"] == VLLM else f"{r['rate']:g}/s", r["duration_s"])
        groups.setdefault(key, []).append(r)
    for (target, rate, duration_s), group in sorted(groups.items()):
        print(f"\n### {target}, {rate}, {duration_s:g}-s runs\n")
        print(markdown_table(aggregate(group)).rstrip())
        for r in group:
            score = r.get("score") or {}
            if r["status"] != "ok":
                print(f"- not scored: {r['name']}: {r.get('error')}")
            elif r["kind"] != "control" and not score.get("ac1"):
                print(f"- miss: {r['name']} ({r['rate']:g}/s): detected {score.get('detected')}, top causes "
                      f"{score.get('top_causes')}, impact {score.get('impact')}")
            elif r["kind"] == "control" and score.get("false_alarms"):
                print(f"- false alarm: {r['name']} ({r['rate']:g}/s): {score.get('false_alarm_causes')}")
    if not groups:
        print(f"no lab.json under {args.root}")
    else:
        print("\n" + control_line(aggregate(results)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=DEFAULT_ROOT, help=f"folder of the slices (default {DEFAULT_ROOT})")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one slice")
    run.add_argument("--target", choices=(VLLM, LLM), default=VLLM)
    run.add_argument("--only", required=True, help="comma-separated lab kinds ('control' too)")
    run.add_argument("--seeds", default=None, help="comma-separated seeds of the suite (default 1)")
    run.add_argument("--rates", default=None, help="comma-separated request rates (/s), one experiment each")
    run.add_argument("--duration", type=float, default=60.0, help="seconds per experiment (default 60)")
    scores = sub.add_parser("table", help="score every slice under --root")
    scores.add_argument("--rescore", action="store_true",
                        help="analyse every run again with this checkout's detectors before scoring")
    args = parser.parse_args(argv)
    if args.command == "run":
        run_slice(args)
    else:
        table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
