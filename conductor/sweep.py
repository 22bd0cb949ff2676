"""``tailscope sweep``'s loop: one full run per level, each analysed and reported, then
``sweep.json`` and ``sweep.html`` (docs/sweep.md).

Each step runs the scenario with its arrival rate replaced (a rate sweep) or with its
arrival made concurrency mode (N requests kept in flight), is analysed and reported through
:func:`tailscope.conductor.reporting.analyse_and_write` (a stale disk reserve released first,
a damaged run's report written beside an earlier good one), and becomes one step record
(analyzers/patterns/load_sweep.py). A list of levels stops early when
``STOP_AFTER_FAILED_STEPS`` steps in a row failed their SLOs or the service saturated
(the scenario's ``sweep`` section); a peak search bisects (loadgen/sweep_rates.py).

This module prints nothing and decides no exit code: it reports through the callbacks of
:class:`SweepListener` and returns a :class:`SweepResult`; the CLI prints and picks the code.
Raises ``ReportWriteError`` when a step's report cannot be written.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from tailscope.analysis_model import sweep as sweep_model
from tailscope.analysis_model.codec import encode
from tailscope.analysis_model.sweep import SaturationStop, Search, SearchTry, Stopped, SweepStep
from tailscope.analyzers.patterns.load_sweep import saturation_stop, step_record, summarize_sweep
from tailscope.conductor.children import ChildError
from tailscope.conductor.reporting import analyse_and_write
from tailscope.conductor.run_setup import safe_name
from tailscope.conductor.session import RunOptions, SetupError, execute_run
from tailscope.loadgen.local_runner import LoadError
from tailscope.loadgen.sweep_rates import PeakSearch, SweepPolicy, early_stop_note
from tailscope.reports.sweep_report import render_sweep_html
from tailscope.reports.writer import write_text_atomic
from tailscope.rundir import new_run_dir, write_json_atomic
from tailscope.scenario_model.sweep_steps import at_concurrency, at_rate

SWEEP_JSON = "sweep.json"
SWEEP_HTML = "sweep.html"


@dataclasses.dataclass
class SweepListener:
    """What a sweep tells its caller as it goes (every callback optional).

    ``progress(title)``: a context manager for one step's run whose ``update`` receives the
    load's progress snapshots; ``on_step(step)``: a step's record (SweepStep) once it is reported;
    ``on_note(text)``: a sentence on why the sweep stops early or a step's damaged data."""

    progress: Callable[[str], AbstractContextManager] | None = None
    on_step: Callable[[SweepStep], None] | None = None
    on_note: Callable[[str], None] | None = None

    def note(self, text: str) -> None:
        if self.on_note is not None:
            self.on_note(text)


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """A finished sweep: ``sweep.json`` as its type, its folder and files, and why it ended early.

    ``setup_error``: the message of the step that could not start (the sweep stopped there),
    None when every step started."""

    sweep: sweep_model.Sweep
    path: str
    paths: dict
    steps: list[SweepStep]
    interrupted: bool
    setup_error: str | None = None


def level_text(level: float, concurrency: bool) -> str:
    """A step's level in words: ``16 in flight`` or ``50 req/s``."""
    return f"{level:g} in flight" if concurrency else f"{level:g} req/s"


def search_facts(search: PeakSearch) -> Search:
    """``sweep.json``'s ``search`` section of a peak search."""
    passing, failing = search.bracket
    return Search(low=search.low, high=search.high, tolerance_rps=search.tolerance_rps,
                  steps=len(search.history), max_steps=search.max_steps,
                  passing_rate=passing, failing_rate=failing,
                  history=[SearchTry(rate=r, passed=p) for r, p in search.history])


def saturation_note(found: SaturationStop, levels_left: int, concurrency: bool) -> str:
    """The sentence that says a sweep stops at saturation (``found``: load_sweep.saturation_stop)."""
    knee, after = found.knee, found.after
    what = "concurrency level" if concurrency else "rate"
    gains = ", ".join(f"{a.throughput_gain:+.0%} at {level_text(a.level, concurrency)}" for a in after)
    return (f"saturated at {level_text(knee.level, concurrency)} ({knee.throughput:.1f} {found.unit}): "
            f"throughput stopped growing ({gains} over the knee) while latency kept rising "
            f"({knee.latency_ms:.1f} → {after[-1].latency_ms:.1f} ms): stopping the sweep, "
            f"{levels_left} remaining {what}{'s' if levels_left != 1 else ''} not run "
            f"(--keep-going, or the scenario's sweep.stop_at_saturation: false, runs every {what})")


class Sweep:
    """One sweep of ``scenario`` (a loaded Scenario): each level a full run into one sweep folder
    under ``options.out_dir`` (a RunOptions; its duration replaced by ``step_duration_s``, s).

    ``variable``: ``rate`` (req/s) or ``concurrency`` (requests in flight); ``keep_going`` runs
    every listed level (no early stop); ``policy``: the scenario's ``sweep`` section."""

    def __init__(self, scenario, options: RunOptions, step_duration_s: float, variable: str = "rate",
                 keep_going: bool = False, policy: SweepPolicy | None = None,
                 listener: SweepListener | None = None):
        self.scenario = scenario
        self.options = options
        self.variable = variable
        self.step_duration_s = step_duration_s
        self.keep_going = keep_going
        self.policy = policy or scenario.sections.get("sweep") or SweepPolicy()
        self.listener = listener or SweepListener()
        os.makedirs(options.out_dir, exist_ok=True)
        self.path = new_run_dir(options.out_dir, "sweep-" + safe_name(scenario.name))
        self.steps: list[SweepStep] = []
        self.interrupted = False

    @property
    def concurrency(self) -> bool:
        return self.variable == "concurrency"

    def run(self, plan) -> SweepResult:
        """Run a list of levels (req/s or requests in flight, in order) or a PeakSearch; write
        ``sweep.json`` and ``sweep.html``. Ctrl-C ends the current step and the sweep."""
        if isinstance(plan, PeakSearch):
            while not self.interrupted and (rate := plan.next_rate()) is not None:
                step, problem = self.step(rate)
                if step is None:
                    return self._finish("search", search_facts(plan), setup_error=problem)
                plan.record(rate, bool(step.passed) if step.passed is not None else True)
            return self._finish("search", search_facts(plan))
        mode = "concurrency" if self.concurrency else "rates"
        failed_in_a_row, stopped = 0, None
        for position, level in enumerate(plan, 1):
            if self.interrupted:
                break
            step, problem = self.step(level)
            if step is None:
                return self._finish(mode, None, setup_error=problem)
            failed_in_a_row = failed_in_a_row + 1 if step.passed is False else 0
            stopped = self._stop(failed_in_a_row, list(plan)[position:])
            if stopped is not None:
                self.listener.note(stopped.message)
                break
        return self._finish(mode, None, stopped=stopped)

    def _stop(self, failed_in_a_row: int, levels_left: list) -> Stopped | None:
        """Why the list stops after this step (``sweep.json``'s ``stopped``), or None."""
        if self.keep_going or not levels_left:
            return None
        what = "concurrency level" if self.concurrency else "rate"
        note = early_stop_note(failed_in_a_row, len(levels_left), self.keep_going, what)
        if note:
            return Stopped(reason="slo_failures", message=note, levels_not_run=list(levels_left), saturation=None)
        if not self.policy.stop_at_saturation:
            return None
        found = saturation_stop(self.steps, self.policy.steps_past_knee)
        if found is None:
            return None
        return Stopped(reason="saturation", message=saturation_note(found, len(levels_left), self.concurrency),
                       levels_not_run=list(levels_left), saturation=found)

    def step(self, level: float) -> tuple[SweepStep | None, str | None]:
        """Run, analyse and report one step at ``level``; (its record, None), or (None, why) when
        its run could not start."""
        index = len(self.steps)
        scenario = at_concurrency(self.scenario, int(level)) if self.concurrency else at_rate(self.scenario, level)
        options = dataclasses.replace(
            self.options, out_dir=self.path, duration_s=self.step_duration_s,
            extra_manifest={"sweep": {"path": self.path, "step": index, self.variable: level}})
        title = f"sweep step {index + 1}: {level_text(level, self.concurrency)}"
        progress = self.listener.progress(title) if self.listener.progress else nullcontext(None)
        try:
            with progress as display:
                outcome = execute_run(scenario, options, on_progress=getattr(display, "update", None))
        except (SetupError, ChildError, LoadError) as exc:  # LoadError: the load itself failed (a worker died)
            return None, str(exc)
        self.interrupted = outcome.status == "interrupted"
        report = analyse_and_write(outcome.run_dir)
        if report.damaged:
            self.listener.note(f"step {index + 1}: damaged data: {report.damaged[0].message}")
        step = step_record(index, level, outcome.run_dir, report.analysis, self.variable)
        self.steps.append(step)
        if self.listener.on_step is not None:
            self.listener.on_step(step)
        return step, None

    def _finish(self, mode: str, search: Search | None, stopped: Stopped | None = None,
                setup_error: str | None = None) -> SweepResult:
        sweep = summarize_sweep(self.scenario.name, mode, self.scenario.slos, self.steps, search, self.variable,
                                stopped=stopped, path=self.path, step_duration_s=self.step_duration_s,
                                interrupted=self.interrupted)
        paths = {"sweep": os.path.join(self.path, SWEEP_JSON), "html": os.path.join(self.path, SWEEP_HTML)}
        write_json_atomic(paths["sweep"], encode(sweep))
        write_text_atomic(paths["html"], render_sweep_html(sweep))
        return SweepResult(sweep=sweep, path=self.path, paths=paths, steps=list(self.steps),
                           interrupted=self.interrupted, setup_error=setup_error)

