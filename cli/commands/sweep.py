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

import copy
import dataclasses
import os

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

#: In a rate list, stop after this many consecutive steps failed their SLOs
#: (the target is past its limit; more load only hurts it). --keep-going disables it.
STOP_AFTER_FAILED_STEPS = 2


def early_stop_note(failed_in_a_row: int, rates_left: int, keep_going: bool, what: str = "rate") -> str | None:
    """The line that says the sweep stops early, or None: a sweep stops after
    STOP_AFTER_FAILED_STEPS consecutive failing steps (unless ``keep_going``), and only
    says so when rates were left to run — after its last step there is nothing to stop.
    ``what``: the word for a step's level ("rate", "concurrency level")."""
    if keep_going or failed_in_a_row < STOP_AFTER_FAILED_STEPS or rates_left <= 0:
        return None
    skipped = f"{rates_left} remaining {what}{'s' if rates_left != 1 else ''}"
    return (f"{failed_in_a_row} steps in a row failed their SLOs: stopping the sweep, {skipped} not run "
            f"(--keep-going runs every {what})")
SWEEP_JSON = "sweep.json"
SWEEP_HTML = "sweep.html"


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="run successive rate (or concurrency) steps; report the curve and the best step under the SLOs",
        description="Run SCENARIO at each offered rate of --rates, or at each concurrency of --concurrency "
                    "(one full run per step), or search for the peak rate (--search), and write sweep.json "
                    "and sweep.html: achieved rate, P50/P99 with confidence intervals and error rate per "
                    "step, the knee of the latency curve and the highest level that met every SLO; for "
                    "OpenAI-API classes the throughput-latency frontier (output tokens/s against TTFT and "
                    "TPOT) and its best point under the SLOs. Exit 0 when a step met every SLO, 1 when none "
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
                   help=f"run every listed rate, also after {STOP_AFTER_FAILED_STEPS} consecutive failing steps")
    add_run_options(p)
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from tailscope.loadgen.sweep_rates import PeakSearch, parse_rates
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
        from tailscope.loadgen.sweep_rates import parse_concurrency

        try:
            levels = parse_concurrency(args.concurrency)
        except ValueError as exc:
            return error(f"--concurrency: {exc}")
        # every step replaces the scenario's arrival: check the split at the smallest level
        problem = (_concurrency_workers_problem(levels, getattr(args, "workers", 0) or 0)
                   or workers_problem(args, _at_concurrency(scenario, max(levels)))
                   or receiver_problem(run_options_from(args)))
        if problem:
            return error(problem)
        return _Sweep(scenario, args, variable).run(levels)
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
    return _Sweep(scenario, args).run(plan)


def _concurrency_workers_problem(levels: list[int], workers: int) -> str | None:
    """Why a concurrency sweep's ``levels`` cannot be split over ``workers`` (None when they can):
    each step's requests in flight are shared out, at least one per worker."""
    if workers > 0 and min(levels) < workers:
        return (f"--concurrency: a level of {min(levels)} is split over the workers: every level must be "
                f"at least --workers ({workers})")
    return None


def _bounds(text: str) -> tuple[float, float]:
    from tailscope.loadgen.sweep_rates import parse_rates

    parts = text.split(":")
    if len(parts) != 2:
        raise ValueError(f"--search takes LOW:HIGH, got {text!r}")
    low, high = (parse_rates(p)[0] for p in parts)
    return low, high


class _Sweep:
    """Runs the steps of one sweep and writes its outputs."""

    def __init__(self, scenario, args, variable: str = "rate"):
        from rich.console import Console

        from tailscope.rundir import new_run_dir

        self.scenario = scenario
        self.args = args
        self.variable = variable  # what the steps vary: "rate" or "concurrency"
        self.console = Console()
        os.makedirs(args.out, exist_ok=True)
        self.path = new_run_dir(args.out, "sweep-" + _safe(scenario.name))
        self.step_duration_s = args.step_duration or args.duration or scenario.duration_s
        self.steps: list[dict] = []
        self.interrupted = False

    def run(self, plan) -> int:
        from tailscope.loadgen.sweep_rates import PeakSearch

        if isinstance(plan, PeakSearch):
            while not self.interrupted and (rate := plan.next_rate()) is not None:
                step = self.step(rate)
                if step is None:
                    return self._finish("search", _search_facts(plan), setup_failed=True)
                plan.record(rate, bool(step["passed"]) if step["passed"] is not None else True)
            return self._finish("search", _search_facts(plan))
        failed_in_a_row = 0
        for position, rate in enumerate(plan, 1):
            if self.interrupted:
                break
            step = self.step(rate)
            if step is None:
                return self._finish(self._mode, None, setup_failed=True)
            failed_in_a_row = failed_in_a_row + 1 if step["passed"] is False else 0
            note = early_stop_note(failed_in_a_row, len(plan) - position, self.args.keep_going,
                                   "rate" if self.variable == "rate" else "concurrency level")
            if note:
                self.console.print(f"[yellow]{note}[/]")
                break
        return self._finish(self._mode, None)

    @property
    def _mode(self) -> str:
        """sweep.json's ``mode`` of a list of levels: ``rates`` or ``concurrency``."""
        return "rates" if self.variable == "rate" else "concurrency"

    def step(self, rate: float) -> dict | None:
        """Run one step at ``rate`` (req/s; concurrency sweeps: requests in flight); its record,
        or None when the run could not start."""
        from tailscope.analyzers.analysis import analyze_run
        from tailscope.analyzers.patterns.load_sweep import step_record
        from tailscope.conductor.children import ChildError
        from tailscope.conductor.session import SetupError, execute_run  # imports Locust (gevent) first
        from tailscope.conductor.terminal import ProgressDisplay
        from tailscope.loadgen.runner import LoadError
        from tailscope.reports.writer import write_outputs

        index = len(self.steps)
        concurrency = self.variable == "concurrency"
        scenario = _at_concurrency(self.scenario, int(rate)) if concurrency else _at_rate(self.scenario, rate)
        options = dataclasses.replace(
            run_options_from(self.args), out_dir=self.path, duration_s=self.step_duration_s,
            extra_manifest={"sweep": {"path": self.path, "step": index, self.variable: rate}})
        try:
            with ProgressDisplay(self.console, f"sweep step {index + 1}: {_level_text(rate, concurrency)}") as display:
                outcome = execute_run(scenario, options, on_progress=display.update)
        except (SetupError, ChildError, LoadError) as exc:  # LoadError: the load itself failed (a worker died)
            error(str(exc))
            return None
        self.interrupted = outcome.status == "interrupted"
        analysis = analyze_run(outcome.run_dir)
        write_outputs(outcome.run_dir, analysis)
        step = step_record(index, rate, outcome.run_dir, analysis, self.variable)
        self.steps.append(step)
        self.console.print(_step_line(step))
        return step

    def _finish(self, mode: str, search: dict | None, setup_failed: bool = False) -> int:
        from tailscope.analyzers.patterns.load_sweep import summarize_sweep
        from tailscope.reports.sweep_report import render_sweep_html
        from tailscope.reports.writer import write_text_atomic
        from tailscope.rundir import write_json_atomic

        sweep = summarize_sweep(self.scenario.name, mode, self.scenario.slos, self.steps, search, self.variable)
        sweep["path"] = self.path
        sweep["step_duration_s"] = self.step_duration_s
        sweep["interrupted"] = self.interrupted
        write_json_atomic(os.path.join(self.path, SWEEP_JSON), sweep)
        write_text_atomic(os.path.join(self.path, SWEEP_HTML), render_sweep_html(sweep))
        self._print_summary(sweep)
        return self._exit_code(sweep, setup_failed)

    def _exit_code(self, sweep: dict, setup_failed: bool) -> int:
        """README "Exit codes": 2 when a step could not start; 0 when a step met every SLO (or, without
        SLOs, the sweep ran to its end); 1 when none did and some step failed an SLO; 3 when none
        did and no step failed (each was inconclusive or incomplete), or a sweep without SLOs was
        interrupted."""
        if setup_failed:
            return EXIT_USAGE
        if sweep["passed"]:
            return EXIT_OK
        if sweep["passed"] is None:
            return EXIT_INCONCLUSIVE if self.interrupted else EXIT_OK
        if any(step.get("outcome", "failed") == "failed" for step in self.steps):
            return EXIT_SLO_FAILED
        return EXIT_INCONCLUSIVE

    def _print_summary(self, sweep: dict) -> None:
        for warning in sweep["warnings"]:
            self.console.print(f"[yellow]warning: {warning['message']}[/]")
        concurrency = self.variable == "concurrency"
        knee, front = sweep["knee"], sweep.get("frontier")
        self.console.print(outcome_line(sweep, concurrency))
        if knee is not None:
            self.console.print(f"knee: {_level_text(knee['level'], concurrency)}"
                               f"{'' if concurrency else ' offered'} (latency P99 {knee['p99_ms']:.1f} ms)")
        if front is not None and front["best_under_slo"] is not None:
            b = front["best_under_slo"]
            self.console.print(f"[green]best point under SLO: {_level_text(b['level'], concurrency)}, "
                               f"{b['output_tokens_per_s']:.0f} output tokens/s (TTFT P99 {_ms(b['ttft_p99_ms'])}, "
                               f"TPOT P99 {_ms(b['tpot_p99_ms'])})[/]")
        self.console.print(f"sweep: {os.path.join(self.path, SWEEP_JSON)}")
        self.console.print(f"html: {os.path.join(self.path, SWEEP_HTML)}")


def _at_rate(scenario, rate: float):
    """The scenario with its arrival rate replaced (in the manifest's copy too)."""
    raw = copy.deepcopy(scenario.raw)
    raw.setdefault("arrival", {})["rate"] = rate
    return dataclasses.replace(scenario, arrival=dataclasses.replace(scenario.arrival, rate=rate),
                               name=f"{scenario.name}-{rate:g}rps", raw=raw)


def _at_concurrency(scenario, concurrency: int):
    """The scenario in concurrency mode: ``concurrency`` requests kept in flight (in the manifest's copy too)."""
    from tailscope.loadgen.spec import ArrivalSpec

    raw = copy.deepcopy(scenario.raw)
    raw["arrival"] = {"concurrency": concurrency}
    return dataclasses.replace(scenario, arrival=ArrivalSpec(process="closed", users=concurrency),
                               name=f"{scenario.name}-c{concurrency}", raw=raw)


def outcome_line(sweep: dict, concurrency: bool) -> str:
    """The sweep's outcome in words (rich markup), for what its steps varied: the highest
    offered rate, or the highest concurrency (requests in flight), whose step met every SLO."""
    best = sweep["max_concurrency_under_slo"] if concurrency else sweep["max_rate_under_slo"]
    levels = "concurrency level" if concurrency else "rate"
    if sweep["passed"] is None:
        return f"no SLOs: no {levels} can pass or fail"
    if best is None and not any(step.get("outcome", "failed") == "failed" for step in sweep.get("steps") or []):
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


def _search_facts(search) -> dict:
    passing, failing = search.bracket
    return {"low": search.low, "high": search.high, "tolerance_rps": search.tolerance_rps,
            "steps": len(search.history), "max_steps": search.max_steps,
            "passing_rate": passing, "failing_rate": failing,
            "history": [{"rate": r, "passed": p} for r, p in search.history]}


def _step_line(step: dict) -> str:
    """One step in words: its level, what it achieved (req/s; output tokens/s for LLM
    steps), latency percentiles with their units, errors, and its SLO outcome in words
    (``SLOs met``, ``SLOs failed: ...``, or ``no SLOs``)."""
    from rich.markup import escape

    def ms(entry):
        return "not measured" if entry["value_ms"] is None else f"{entry['value_ms']:.1f} ms"

    outcome = {True: "[green]SLOs met[/]",
               False: "[red]SLOs failed[/]" + (f": {escape(', '.join(step['failed_slos']))}"
                                                 if step.get("failed_slos") else ""),
               None: "no SLOs"}[step["passed"]]
    achieved = step["achieved_rps"] or 0.0
    level = (f"{step['concurrency']} in flight" if step.get("concurrency") is not None
             else f"{step['rate']:g} req/s offered")
    llm = step.get("llm")
    tokens = "" if not llm or llm["output_tokens_per_s"] is None else (
        f", {llm['output_tokens_per_s']:.0f} output tokens/s, TTFT P99 {ms(llm['ttft_ms']['p99'])}, "
        f"TPOT P99 {ms(llm['tpot_ms']['p99'])}")
    return (f"step {step['index'] + 1}: {level}: {achieved:.1f} req/s achieved{tokens}, "
            f"latency P50 {ms(step['p50'])}, latency P99 {ms(step['p99'])}, errors {step['error_rate']:.2%}; "
            f"{outcome}")


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)[:50] or "run"
