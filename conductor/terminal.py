"""What the user sees in the terminal: live progress, the end-of-run summary, a comparison's verdict.

On a terminal, progress is a live panel (rich); elsewhere (CI logs) it is one
plain line every ``PLAIN_PROGRESS_INTERVAL_S`` seconds.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.comparison import Comparison, LlmChange, LlmComparison, PercentileChange
from tailscope.analysis_model.llm import Llm
from tailscope.analysis_model.percentiles import MaxValue, Percentile, PercentileSet
from tailscope.analysis_model.spikes import CauseFinding
from tailscope.analysis_model.stages import Stages
from tailscope.analysis_model.summary import Summary
from tailscope.analysis_model.verdict import SloRow
from tailscope.reports.formatting import fmt_metric
from tailscope.reports.upgrade import (
    findings_of,
    generator_of,
    llm_of,
    run_of,
    spikes_of,
    stages_of,
    verdict_of,
    warnings_of,
)
from tailscope.support.units import percentile_label

PLAIN_PROGRESS_INTERVAL_S = 5.0
#: Spikes listed one per line in the end-of-run summary (the report lists them all).
MAX_SPIKES_PRINTED = 10


class ProgressDisplay:
    """Receives loadgen ``Progress`` snapshots (about once a second) and shows them."""

    def __init__(self, console: Console, title: str):
        self.console = console
        self.title = title
        self.live: Live | None = None
        self._last_plain = 0.0

    def __enter__(self) -> ProgressDisplay:
        if self.console.is_terminal:
            # No refresh thread: under gevent it is a greenlet that renders on its
            # own timer and can delay a scheduled send; the panel is redrawn only
            # in update(), which the load runner calls between sends.
            self.live = Live(self._table(None), console=self.console, auto_refresh=False,
                             transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def update(self, progress) -> None:
        if self.live is not None:
            self.live.update(self._table(progress), refresh=True)
            return
        now = time.monotonic()
        if now - self._last_plain >= PLAIN_PROGRESS_INTERVAL_S:
            self._last_plain = now
            self.console.print(_plain_line(progress), highlight=False, soft_wrap=True)

    def _table(self, progress) -> Table:
        table = Table(title=self.title, show_header=True, expand=False)
        for column in ("elapsed", "remaining", "achieved", "latency P50", "latency P99", "errors", "in flight",
                       "late >1 ms"):
            table.add_column(column, justify="right")
        if progress is not None:
            table.add_row(*_cells(progress))
        return table


def _cells(p) -> list[str]:
    """Display cells of one progress snapshot, each with its unit; times are whole seconds,
    never negative (a run draining its last requests past its duration shows 0 s remaining).
    The late cell is the share of the requests due in the live window that left more than
    1 ms after their scheduled time (``Progress.late_share``)."""
    return [
        f"{max(0.0, p.elapsed_s):5.0f} s",
        f"{max(0.0, p.remaining_s):5.0f} s",
        f"{p.rps:7.1f} req/s",
        _ms(p.p50_ms),
        _ms(p.p99_ms),
        f"{p.errors}",
        f"{p.in_flight}",
        f"{100 * p.late_share:.1f}%",
    ]


def _plain_line(p) -> str:
    c = _cells(p)
    return (f"[{c[0].strip()} elapsed, {c[1].strip()} left] {c[2].strip()}  latency P50 {c[3]}  "
            f"latency P99 {c[4]}  errors {c[5]}  in flight {c[6]}  late >1 ms {c[7]}")


def _ms(value) -> str:
    return "—" if value is None else f"{value:.1f} ms"


def print_summary(console: Console, analysis: dict, paths: dict) -> None:
    """The end-of-run summary: verdict, headline percentiles, whole-run findings, spikes, where the report is.
    ``analysis`` is the one just computed (analyze_run's dict); its sections are read through their types
    (reports/upgrade.py readers), so a malformed one raises AnalysisShapeError naming the place."""
    summary = decode(Summary, analysis["summary"], "summary")
    verdict, run, stages = verdict_of(analysis), run_of(analysis), stages_of(analysis)
    console.rule("tailscope")
    if run.incomplete:
        console.print(f"[yellow]{run.incomplete_reason or 'incomplete run'}[/]")
    closed = summary.load_model == "closed"
    achieved = summary.achieved_rps or 0
    if closed:
        generator = generator_of(analysis)
        users = generator.load_model.get("users") if generator is not None else None  # the manifest's arrival
        load_text = f"{achieved:.1f} req/s (closed loop" + (f", {users} requests kept in flight)" if users else ")")
    else:
        load_text = f"{achieved:.1f} of {summary.offered_rps or 0:.1f} req/s offered"
    console.print(f"{summary.requests} requests, {summary.errors} errors "
                  f"({100 * summary.error_rate:.2f}%), achieved {load_text}")
    joined = join_line(stages, summary.requests - summary.errors)
    if joined:
        console.print(joined, highlight=False, soft_wrap=True)
    console.print(latency_table(summary.latency_ms, closed))
    section = llm_of(analysis)
    llm = llm_table(section)
    if llm is not None:
        console.print(llm)
        chunks = chunk_line(section)
        if chunks is not None:
            console.print(chunks, highlight=False, soft_wrap=True)
    table = stage_table(stages)
    if table is not None:
        console.print(table)
    for finding in findings_of(analysis):
        color = "red" if finding.severity == "high" else "yellow"
        console.print(f"[bold {color}]finding {escape(finding.kind)}:[/] {escape(finding.summary)}",
                      highlight=False, soft_wrap=True)
    for warning in warnings_of(analysis):
        console.print(f"[yellow]warning:[/] {warning.message}", highlight=False, soft_wrap=True)
    spikes = spikes_of(analysis)
    for spike in spikes[:MAX_SPIKES_PRINTED]:
        top = spike.top_cause or CauseFinding("unexplained", 0.0, {})
        grew = spike.decomposition.dominant_stage
        p99, baseline = spike.judged_p99()  # what the spike was judged on (e2e for answer length in LLM runs)
        judged_on = "e2e for its answer length P99" if spike.answer_length is not None else "latency P99"
        console.print(
            f"spike {_clock(spike.start_ns)}–{_clock(spike.end_ns)}: {judged_on} "
            f"{p99 or 0:.0f} ms vs {baseline or 0:.0f} ms baseline; "
            f"top cause [bold]{escape(top.kind)}[/] ({100 * top.confidence:.0f}%)"
            + (f"; {escape(grew)} grew most" if grew else "")
            + _evidence_hint(top.evidence),
            highlight=False,
        )
    if len(spikes) > MAX_SPIKES_PRINTED:
        console.print(f"… and {len(spikes) - MAX_SPIKES_PRINTED} more spikes (see the report)", highlight=False)
    for slo in verdict.slos:
        console.print(f"  {slo_row_text(slo)}", highlight=False, soft_wrap=True)
    color = _OUTCOME_COLORS[verdict.outcome]
    console.print(f"[bold {color}]{escape(verdict.line())}[/]", highlight=False, soft_wrap=True)
    for name, path in paths.items():
        console.print(f"{name}: {path}", highlight=False, soft_wrap=True)


def print_comparison(console, c: Comparison, paths: dict) -> None:
    """The latency percentiles of all requests, the verdict, how the intervals were resampled,
    the changed stage, the files (a comparison.json on disk: read it with reports/upgrade.py
    ``comparison_of`` first)."""
    console.rule(f"compare: {escape(c.title)}")
    table = Table(show_header=True)
    for column in ("all requests", "baseline", "current", "change", f"change {c.confidence:.0%} CI", ""):
        table.add_column(column, justify="right")
    for row in c.percentiles:
        if row.cls is not None or row.metric != "latency_ms":
            continue
        relative = row.relative_change
        table.add_row(row.figure, f"{row.baseline_ms:.1f} ms", f"{row.current_ms:.1f} ms",
                      f"{row.change_ms:+.1f} ms" + ("" if relative is None else f" ({relative:+.1%})"),
                      f"{row.change_ci_ms[0]:+.1f} … {row.change_ci_ms[1]:+.1f} ms", _judgement(row))
    console.print(table)
    llm = llm_comparison_table(c.llm)
    if llm is not None:
        console.print(llm)
    if c.method is not None and c.method.note:
        console.print(f"intervals: {c.method.name}, {c.method.baseline_runs} baseline run(s) and "
                      f"{c.method.current_runs} new run(s); {escape(c.method.note)}", highlight=False, soft_wrap=True)
    style = "bold yellow" if c.verdict.inconclusive else "bold red" if c.verdict.regressed else "bold green"
    console.print(f"[{style}]{c.verdict.label}[/] " + escape(c.verdict.summary), highlight=False, soft_wrap=True)
    for difference in c.environment.differences if c.environment else ():
        console.print(f"[yellow]warning: {escape(difference.message)}[/]", highlight=False, soft_wrap=True)
    for name, path in paths.items():
        console.print(f"{name}: {path}", highlight=False, soft_wrap=True)


def _judgement(row: PercentileChange | LlmChange) -> str:
    """A compared row's mark: REGRESSED, improved or significant, and whether it could be claimed."""
    mark = ("[red]REGRESSED[/]" if row.regressed else "[green]improved[/]" if row.improved
            else "significant" if row.significant else "")
    return mark if row.claimable else (mark + " " if mark else "") + "(too few samples)"


def llm_comparison_table(section: LlmComparison | None) -> Table | None:
    """An LLM comparison's rows (TTFT/TPOT P50 and P99, output tokens/s, goodput): baseline,
    current, relative change and the judgement; None when the runs had no LLM requests to compare."""
    from tailscope.analyzers.comparison.llm_compare import fmt_value

    if section is None or not section.rows:
        return None
    table = Table(show_header=True)
    for column in ("LLM", "baseline", "current", "change", ""):
        table.add_column(column, justify="right")
    for row in section.rows:
        relative = row.relative_change
        table.add_row(row.figure, fmt_value(row, row.baseline), fmt_value(row, row.current),
                      "—" if relative is None else f"{relative:+.1%}", _judgement(row))
    return table


#: The percentile columns of the end-of-run latency table: (analysis key, name).
LATENCY_COLUMNS = tuple((key, percentile_label(key)) for key in ("p50", "p90", "p95", "p99", "p999", "max"))
#: The LLM table's rows: (key in the analysis's ``llm`` section, metric name).
LLM_ROWS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("chunk_gap_ms", "chunk gap"),
            ("e2e_ms", "e2e"))
UNCLAIMED_NOTE = "* too few samples to claim this percentile (MLPerf early-stopping rule)"


def latency_table(latency: PercentileSet, closed: bool) -> Table:
    """The run's latency percentiles, each named with its metric (``latency P50``) and in ms;
    measured from the scheduled send (a closed loop: from the send, its scheduled time)."""
    # a closed loop sends each request when a user is free: its scheduled time is its send time
    table = Table(title=f"latency ({'from send' if closed else 'from scheduled send'}), all requests",
                  show_header=True)
    for _, name in LATENCY_COLUMNS:  # one row, no label column: fits 80 columns (headers wrap)
        table.add_column(f"latency {name}", justify="right", min_width=10)
    table.add_row(*[_pct_cell(getattr(latency, key)) for key, _ in LATENCY_COLUMNS])
    table.caption = UNCLAIMED_NOTE
    return table


def llm_table(llm: Llm | None) -> Table | None:
    """An LLM run's token-level latencies (a row per metric — TTFT, TPOT, ITL, chunk gap, e2e —
    with its P50 and P99 in ms and its samples), the tokens per content chunk, and tokens/s and goodput
    (the share meeting every per-request SLO) in the caption; None for a run without OpenAI-API
    requests. ITL divides each chunk's arrival gap over its tokens; the chunk gap is that gap
    undivided (analyzers/stats/llm_metrics.py)."""
    if llm is None:
        return None
    table = Table(show_header=True)
    table.add_column(f"LLM ({llm.requests:,} requests)")
    for column in ("P50", "P99", "samples"):
        table.add_column(column, justify="right")
    for key, label in LLM_ROWS:
        entry = getattr(llm, key)
        if entry is None:
            continue  # an analysis written before chunk gaps were measured
        table.add_row(label, _pct_cell(entry.p50), _pct_cell(entry.p99), f"{entry.p50.n:,}")
    share = llm.goodput.share
    rate = llm.output_tokens_per_s.aggregate
    table.caption = (f"output {llm.output_tokens.sum:,} tokens"
                     + (f", {rate:.1f} tokens/s" if rate is not None else "")
                     + (f"; goodput {100 * share:.1f}%" if share is not None else ""))
    return table


def chunk_line(llm: Llm | None) -> str | None:
    """What the LLM table's ITL means, with the tokens per content chunk (mean, P50, P99);
    None without streamed content chunks (or an analysis from before they were counted)."""
    per_chunk = llm.tokens_per_chunk if llm is not None else None
    if per_chunk is None or per_chunk.mean is None:
        return None
    return (f"tokens per content chunk: mean {per_chunk.mean:.2f}, P50 {per_chunk.p50:g}, "
            f"P99 {per_chunk.p99:g} over {per_chunk.chunks:,} chunks; ITL = each chunk gap ÷ its tokens "
            "(its percentiles average a chunk's tokens; the chunk gap is the wait between chunks)")


def join_line(stages: Stages, successful: int) -> str | None:
    """``server spans joined: 2,391 of 2,400 successful requests (99.6%)`` — the first thing to
    check against a new service; None without successful requests."""
    fraction = stages.joined_fraction
    if successful <= 0:
        return None
    joined = stages.joined_requests
    line = f"server spans joined: {joined:,} of {successful:,} successful requests ({100 * fraction:.1f}%)"
    if fraction < 0.9:
        line += ("; the target's spans did not come back for the others: check OTEL_EXPORTER_OTLP_ENDPOINT "
                 "and that the service continues the traceparent (docs/tracing.md)")
    return line


def stage_table(stages: Stages) -> Table | None:
    """Where the joined requests' time went: P50/P99/mean (ms) per stage that occurred
    (a stage no request had is not listed); None without joined requests."""
    occurred = stages.occurred()
    if not occurred:
        return None
    table = Table(show_header=True)
    table.add_column(f"stage ({stages.joined_requests:,} joined requests)")
    for column in ("time in stage P50", "time in stage P99", "time in stage mean", "requests"):
        table.add_column(column, justify="right")
    for name, s in occurred.items():
        table.add_row(escape(str(name)), _pct_cell(s.p50_ms), _pct_cell(s.p99_ms), _pct_cell(s.mean_ms),
                      f"{s.count:,}")
    return table


def _evidence_hint(evidence) -> str:
    """``: summary`` of a cause's evidence when it has one (the detectors write one with
    their numbers), else `` [key value, key value]``: its first two scalar numbers, or ''."""
    if isinstance((evidence or {}).get("summary"), str):
        return ": " + escape(evidence["summary"])
    pairs = [(k, v) for k, v in (evidence or {}).items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)][:2]
    if not pairs:
        return ""
    return escape(" [" + ", ".join(f"{k} {_with_unit(str(k), v)}" for k, v in pairs) + "]")  # not a markup tag


#: Units of evidence numbers by their key's ending (a key without one is a plain ratio or count).
_KEY_UNITS = (("_ms", " ms"), ("_s", " s"), ("_bytes", " bytes"), ("_mb", " MB"), ("_rps", " req/s"),
              ("_per_s", "/s"))


def _with_unit(key: str, value: float) -> str:
    """An evidence number with the unit its key names (``lag_ms`` 3.2 → ``3.2 ms``; a ``share``
    as a percentage)."""
    if key.endswith("share"):
        return f"{100 * value:.3g}%"
    unit = next((unit for suffix, unit in _KEY_UNITS if key.endswith(suffix)), "")
    return f"{value:.4g}{unit}"


def _pct_cell(entry: Percentile | MaxValue | float | None) -> str:
    """A latency in ms with its unit (``12.3 ms``; ``*`` after an unclaimed percentile), or —."""
    if entry is None:
        return "—"
    if isinstance(entry, (Percentile, MaxValue)):
        if entry.value_ms is None:
            return "—"
        return f"{entry.value_ms:.1f} ms" + ("*" if isinstance(entry, Percentile) and not entry.claimed else "")
    return f"{entry:.1f} ms"


#: The colour of each outcome word on the terminal.
_OUTCOME_COLORS = {"passed": "green", "failed": "red", "inconclusive": "yellow", "incomplete": "yellow"}
_ROW_MARKS = {"pass": "[green]PASS[/]", "fail": "[red]FAIL[/]", "unclaimed": "[yellow]UNCLAIMED[/]"}


def slo_row_text(row: SloRow) -> str:
    """One SLO row as rich markup, its observed value with its unit:
    ``PASS e2e p99 < 10s (observed 1,584 ms)``, ``FAIL achieved_rps >= 25 (observed 21.31 req/s)``,
    ``UNCLAIMED p99 < 250ms (observed 12.0 ms: not claimed (52 samples, need 459))``."""
    observed = "n/a" if row.observed is None else fmt_metric(row.metric, row.observed)
    note = f": {row.unclaimed_note()}" if row.status == "unclaimed" else ""
    return f"{_ROW_MARKS[row.status]} {escape(row.slo)}  (observed {escape(observed + note)})"


def _clock(ns) -> str:
    if ns is None:
        return "?"
    return time.strftime("%H:%M:%S", time.gmtime(ns / 1e9))
