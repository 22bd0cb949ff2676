"""``tailscope sweep SCENARIO --rates 50:500:50`` (or ``--concurrency 1,4,16``): steps, the
highest rate (or concurrency) under the SLOs, and for LLM workloads the throughput–latency frontier.

Each step is a full run (its own run directory, report and SLO verdict) of
the scenario with the arrival rate replaced (``--rates``) or its arrival
made concurrency mode with N requests kept in flight (``--concurrency``),
lasting ``--step-duration``. The steps live in one sweep directory with
``sweep.json`` and ``sweep.html`` (docs/sweep.md). Exit 0 when some step met
every SLO (or the scenario has none), 1 when no step did, 2 on usage or setup errors.
"""

from __future__ import annotations

from rich.markup import escape

from tailscope.analysis_model import sweep as sweep_model
from tailscope.analysis_model.sweep import StepPercentile, SweepStep
from tailscope.cli.commands.common import (
    EXIT_CODES_HELP,
    EXIT_INCONCLUSIVE,
    EXIT_OK,
    EXIT_SLO_FAILED,
    EXIT_USAGE,
    add_run_options,
    duration_arg,
    error,
    receiver_problem,
    run_options_from,
    workers_problem,
)
from tailscope.loadgen.sweep_rates import (  # noqa: F401  (early_stop_note: re-exported, the rule's words)
    STOP_AFTER_FAILED_STEPS,
    PeakSearch,
    early_stop_note,
    parse_concurrency,
    parse_rates,
)
from tailscope.scenario_model.sweep_steps import at_concurrency


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="run successive rate (or concurrency) steps; report the curve and the best step under the SLOs",
        description="Run SCENARIO at each offered rate of --rates, or at each concurrency of --concurrency "
                    "(one full run per step), or search for the peak rate (--search), and write sweep.json "
                    "and sweep.html: achieved rate, P50/P99 with confidence intervals and error rate per "
                    "step, the knee of the latency curve and the highest level that met every SLO; for "
                    "OpenAI-API classes the throughput-latency frontier (output tokens/s against TTFT and "
                    "TPOT) and its best point under the SLOs. A list of levels stops after "
                    f"{STOP_AFTER_FAILED_STEPS} steps in a row failed their SLOs, or 2 steps past the knee "
                    "where throughput stopped growing while latency kept rising (the scenario's sweep "
                    "section sets that; --keep-going runs every level). Exit 0 when a step met every SLO, 1 when none "
                    "did and one failed an SLO, 3 when none did and none failed (each inconclusive or "
                    "incomplete), 2 on usage or setup errors.",
        epilog=EXIT_CODES_HELP)
    p.add_argument("scenario", help="scenario file (YAML); --rates needs an open-loop arrival process")
    levels = p.add_mutually_exclusive_group(required=True)
    levels.add_argument("--rates", metavar="RATES",
                        help="START:STOP:STEP (e.g. 50:500:50) or a list (50,100,200) in requests/s; "
                             "with --search, the bounds LOW:HIGH")
    levels.add_argument("--concurrency", metavar="LEVELS",
                        help="concurrency mode: START:STOP:STEP or a list (1,4,16,64) of requests kept in "
                             "flight, each step replacing the scenario's arrival")
    p.add_argument("--step-duration", type=duration_arg, metavar="D",
                   help="length of each step (default --duration, else the scenario's duration)")
    p.add_argument("--search", action="store_true",
                   help="MLPerf-like peak finding: bisect between LOW and HIGH for the highest passing rate")
    p.add_argument("--tolerance", type=float, metavar="RPS",
                   help="search: stop when passing and failing rates are this close (default 5%% of LOW)")
    p.add_argument("--max-steps", type=int, default=8, metavar="N", help="search: at most N steps (default 8)")
    p.add_argument("--keep-going", action="store_true",
                   help=f"run every listed level, also after {STOP_AFTER_FAILED_STEPS} consecutive failing steps "
                        "and past saturation")
    add_run_options(p)
    p.set_defaults(handler=handle)


def handle(args) -> int:
    # Loading a scenario imports the analyzers; sweeping imports Locust (gevent patching):
    # both only here, so that `tailscope --help` stays quick.
    from tailscope.scenario_model.scenario import ScenarioError, load_scenario

    try:
        scenario = load_scenario(args.scenario, target_override=args.target)
    except ScenarioError as exc:
        return error(str(exc))
    variable = "concurrency" if args.concurrency is not None else "rate"
    if variable == "rate" and scenario.arrival.process == "closed":
        return error("--rates varies the offered rate: it needs an open-loop arrival process, not closed "
                     "(--concurrency sweeps a closed loop's concurrency)")
    if variable == "concurrency" and args.search:
        return error("--search looks for a peak rate: use it with --rates LOW:HIGH")
    if variable == "concurrency":
        try:
            levels = parse_concurrency(args.concurrency)
        except ValueError as exc:
            return error(f"--concurrency: {exc}")
        # every step replaces the scenario's arrival: check the split at the smallest level
        problem = (_concurrency_workers_problem(levels, getattr(args, "workers", 0) or 0)
                   or workers_problem(args, at_concurrency(scenario, max(levels)))
                   or receiver_problem(run_options_from(args)))
        if problem:
            return error(problem)
        return _run_sweep(scenario, args, variable, levels)
    problem = workers_problem(args, scenario) or receiver_problem(run_options_from(args))
    if problem:
        return error(problem)
    try:
        if args.search:
            low, high = _bounds(args.rates)
            tolerance = args.tolerance if args.tolerance is not None else max(0.05 * low, 0.5)
            plan = PeakSearch(low, high, tolerance, args.max_steps)
        else:
            plan = parse_rates(args.rates)
    except ValueError as exc:
        return error(f"--rates: {exc}" if "tolerance" not in str(exc) else str(exc))
    return _run_sweep(scenario, args, variable, plan)


def _run_sweep(scenario, args, variable: str, plan) -> int:
    """Run the sweep (tailscope.conductor.sweep) with live progress and one line per step;
    print its summary and return its exit code."""
    from rich.console import Console

    from tailscope.conductor.reporting import ReportWriteError
    from tailscope.conductor.sweep import Sweep, SweepListener
    from tailscope.conductor.terminal import ProgressDisplay

    console = Console()
    listener = SweepListener(progress=lambda title: ProgressDisplay(console, title),
                             on_step=lambda step: console.print(_step_line(step)),
                             on_note=lambda text: console.print(f"[yellow]{escape(text)}[/]"))
    sweep = Sweep(scenario, run_options_from(args), args.step_duration or args.duration or scenario.duration_s,
                  variable, keep_going=args.keep_going, listener=listener)
    try:
        result = sweep.run(plan)
    except ReportWriteError as exc:
        return error(str(exc))
    if result.setup_error is not None:
        error(result.setup_error)
    _print_summary(console, result)
    return exit_code(result.sweep, result.steps, result.interrupted, result.setup_error is not None)


def _concurrency_workers_problem(levels: list[int], workers: int) -> str | None:
    """Why a concurrency sweep's ``levels`` cannot be split over ``workers`` (None when they can):
    each step's requests in flight are shared out, at least one per worker."""
    if workers > 0 and min(levels) < workers:
        return (f"--concurrency: a level of {min(levels)} is split over the workers: every level must be "
                f"at least --workers ({workers})")
    return None


def _bounds(text: str) -> tuple[float, float]:
    parts = text.split(":")
    if len(parts) != 2:
        raise ValueError(f"--search takes LOW:HIGH, got {text!r}")
    low, high = (parse_rates(p)[0] for p in parts)
    return low, high


def exit_code(sweep: sweep_model.Sweep, steps: list[SweepStep], interrupted: bool, setup_failed: bool) -> int:
    """README "Exit codes": 2 when a step could not start; 0 when a step met every SLO (or, without
    SLOs, the sweep ran to its end); 1 when none did and some step failed an SLO; 3 when none
    did and no step failed (each was inconclusive or incomplete), or a sweep without SLOs was
    interrupted."""
    if setup_failed:
        return EXIT_USAGE
    if sweep.passed:
        return EXIT_OK
    if sweep.passed is None:
        return EXIT_INCONCLUSIVE if interrupted else EXIT_OK
    if any(step.outcome == "failed" for step in steps):
        return EXIT_SLO_FAILED
    return EXIT_INCONCLUSIVE


def _print_summary(console, result) -> None:
    sweep = result.sweep
    for warning in sweep.warnings:
        console.print(f"[yellow]warning: {escape(warning.message)}[/]")
    concurrency = sweep.variable == "concurrency"
    knee, front = sweep.knee, sweep.frontier
    console.print(outcome_line(sweep, concurrency))
    if knee is not None:
        console.print(f"knee: {_level_text(knee.level, concurrency)}"
                      f"{'' if concurrency else ' offered'} (latency P99 {knee.p99_ms:.1f} ms)")
    if front is not None and front.best_under_slo is not None:
        b = front.best_under_slo
        console.print(f"[green]best point under SLO: {_level_text(b.level, concurrency)}, "
                      f"{b.output_tokens_per_s:.0f} output tokens/s (TTFT P99 {_ms(b.ttft_p99_ms)}, "
                      f"TPOT P99 {_ms(b.tpot_p99_ms)})[/]")
    console.print(f"sweep: {result.paths['sweep']}")
    console.print(f"html: {result.paths['html']}")


def outcome_line(sweep: sweep_model.Sweep, concurrency: bool) -> str:
    """The sweep's outcome in words (rich markup), for what its steps varied: the highest
    offered rate, or the highest concurrency (requests in flight), whose step met every SLO."""
    best = sweep.max_concurrency_under_slo if concurrency else sweep.max_rate_under_slo
    levels = "concurrency level" if concurrency else "rate"
    if sweep.passed is None:
        return f"no SLOs: no {levels} can pass or fail"
    if best is None and not any(step.outcome == "failed" for step in sweep.steps):
        return (f"[yellow]INCONCLUSIVE: no {levels} met the SLOs at the requested confidence and none failed "
                "them (each step's verdict is in its report; longer steps claim more percentiles)[/]")
    if best is None:
        return f"[red]FAILED: no {levels} met the SLOs[/]"
    if concurrency:
        return f"[green]highest concurrency under the SLOs: {best:g} in flight[/]"
    return f"[green]highest rate under the SLOs: {best:g} req/s[/]"


def _level_text(level: float, concurrency: bool) -> str:
    return f"{level:g} in flight" if concurrency else f"{level:g} req/s"


def _ms(value) -> str:
    return "—" if value is None else f"{value:.1f} ms"


def _step_line(step: SweepStep) -> str:
    """One step in words: its level, what it achieved (req/s; output tokens/s for LLM
    steps), latency percentiles with their units, errors, and its SLO outcome in words
    (``SLOs met``, ``SLOs failed: ...``, or ``no SLOs``)."""
    def ms(entry: StepPercentile) -> str:
        return "not measured" if entry.value_ms is None else f"{entry.value_ms:.1f} ms"

    outcome = {True: "[green]SLOs met[/]",
               False: "[red]SLOs failed[/]" + (f": {escape(', '.join(step.failed_slos))}"
                                                 if step.failed_slos else ""),
               None: "no SLOs"}[step.passed]
    achieved = step.achieved_rps or 0.0
    level = (f"{step.concurrency} in flight" if step.concurrency is not None
             else f"{step.rate:g} req/s offered")
    llm = step.llm
    tokens = "" if llm is None or llm.output_tokens_per_s is None else (
        f", {llm.output_tokens_per_s:.0f} output tokens/s, TTFT P99 {ms(llm.ttft_ms.p99)}, "
        f"TPOT P99 {ms(llm.tpot_ms.p99)}")
    return (f"step {step.index + 1}: {level}: {achieved:.1f} req/s achieved{tokens}, "
            f"latency P50 {ms(step.p50)}, latency P99 {ms(step.p99)}, errors {step.error_rate:.2%}; "
            f"{outcome}")
