"""The whole analysis of one run directory, as one JSON-ready dict.

``analyze_run`` reads the run (never writes it) and assembles every analyzer's
output; the dict validates against ``analysis.schema.json`` and is documented
field by field in docs/analysis-schema.md. Times are epoch ns (int),
durations ms (float), rates per second. An empty run (0 requests) analyses to
zero counts and null percentiles, never an exception.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial

import numpy as np
import pyarrow.compute as pc

from tailscope.analysis_model.codec import encode
from tailscope.analysis_model.events import Event, Events, GcPauses
from tailscope.analysis_model.health import Retention
from tailscope.analysis_model.llm import Llm
from tailscope.analysis_model.records import SlowRequests, Window
from tailscope.analysis_model.run import DamagedFile, Environment
from tailscope.analysis_model.run import Run as RunFacts
from tailscope.analysis_model.server import OtherTraffic
from tailscope.analysis_model.spikes import TooShort
from tailscope.analysis_model.stages import SlowSplit, Stages
from tailscope.analysis_model.summary import Summary
from tailscope.analyzers.causes.protocol import DetectorRegistry
from tailscope.analyzers.findings.protocol import FindingInputs
from tailscope.analyzers.findings.registry import whole_run_findings
from tailscope.analyzers.health.generator_health import generator_section
from tailscope.analyzers.health.lateness_rule import judged, limited_bands
from tailscope.analyzers.health.load_checks import abort_verdict, load_warnings
from tailscope.analyzers.health.outages import find_outages
from tailscope.analyzers.health.outcome import outcome_verdict, scenario_policy
from tailscope.analyzers.health.run_health import run_health_warnings, trace_sample_rate
from tailscope.analyzers.inputs.derived_series import signals_section
from tailscope.analyzers.inputs.environment import environment_facts
from tailscope.analyzers.inputs.error_samples import error_samples_section
from tailscope.analyzers.inputs.other_traffic import foreign_spans, other_traffic
from tailscope.analyzers.inputs.queues import queue_points
from tailscope.analyzers.inputs.records import NS_PER_MS, NS_PER_S, RequestArrays, int_column, request_arrays
from tailscope.analyzers.inputs.retained import retained_view
from tailscope.analyzers.inputs.signal_index import SignalIndex
from tailscope.analyzers.patterns.soak import record_period_counts, soak_section
from tailscope.analyzers.patterns.trends import analyze_patterns, pattern_warnings
from tailscope.analyzers.spikes.detection import (
    SpikeRules,
    detect,
    detection_facts,
    find_spikes,
    length_adjusted_ms,
    longer_answers,
    output_tokens_of,
    short_sentence,
    shortness,
)
from tailscope.analyzers.spikes.series import series_spikes
from tailscope.analyzers.spikes.token_causes import token_spike_causes
from tailscope.analyzers.stages.clock_alignment import align_clocks, clock_warnings
from tailscope.analyzers.stages.consistency import consistency_warnings
from tailscope.analyzers.stages.decomposition import (
    join_spans,
    missing_spans,
    stage_matrix,
    stage_name_map,
    summarize_stages,
    traced_requests,
)
from tailscope.analyzers.stages.rules import rules_for_scenario
from tailscope.analyzers.stages.server_metrics import run_server_series, server_load_section
from tailscope.analyzers.stages.slow_split import slow_split
from tailscope.analyzers.stats.distribution import latency_distribution
from tailscope.analyzers.stats.goodput import goodput_summary
from tailscope.analyzers.stats.llm import (
    LlmArrays,
    add_window_columns,
    llm_arrays,
    llm_section,
    series,
    series_detections,
    token_spikes,
    window_columns,
    with_causes_and_cache,
)
from tailscope.analyzers.stats.llm_prefix_cache import prefix_cache_section
from tailscope.analyzers.stats.percentiles import min_samples_for_claim
from tailscope.analyzers.stats.slo import SloSources, evaluate, parse_slo
from tailscope.analyzers.stats.slow_points import slow_request_points
from tailscope.analyzers.stats.streaming import read_chunks, stream_times, streaming_section
from tailscope.analyzers.stats.summary import load_period_ns, summarize, summarize_classes, summary_section
from tailscope.analyzers.stats.tail_line import rolling_lines, tail_line
from tailscope.analyzers.stats.windows import window_table, windows_as_records
from tailscope.rundir import Run, load_run, release_pages

#: Version of the analysis dict (analysis.schema.json); bumped when a field changes meaning.
#: 1.1: the stage client_network is outside_server (reports/upgrade.py reads 1.0).
ANALYSIS_FORMAT_VERSION = "1.1"
#: Bounds on the event lists carried in the analysis.
MAX_FAULTS = 200
MAX_GC_PAUSES = 50
#: Below this joined fraction the stage decomposition is flagged as partial.
MIN_JOINED_FRACTION = 0.9
SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "analysis.schema.json")


def analyze_run(run_or_path: Run | str | os.PathLike, *, window_s: float = 1.0,
                stage_map: Mapping[str, str] | None = None,
                registry: DetectorRegistry | None = None,
                spike_rules: SpikeRules = SpikeRules(), method: str = "detectors") -> dict:
    """Analyse a run directory (or a loaded :class:`Run`) into the analysis dict.

    ``stage_map`` (span name → stage) overrides the scenario's ``stages:``
    rules (default: the reference preset); ``registry`` holds the cause detectors
    (default: :func:`~.detectors.default_registry`, every detector); ``method`` chooses how
    spikes get their causes: ``"detectors"`` (the registry) or ``"baro"`` (the BARO-style
    baseline ranker the lab compares with, :mod:`.baro`).

    The sections that read only the request records (:func:`record_sections`, and the
    window table) run on a second thread while this one joins the spans and finds the
    spikes; the analyzers are pure functions of read-only arrays, and numpy and Arrow
    release the GIL in their heavy loops, so the two overlap on a second core.
    """
    run = run_or_path if isinstance(run_or_path, Run) else load_run(run_or_path)
    scenario = run.manifest.get("scenario") or {}
    req = request_arrays(run.requests)
    period = load_period_ns(req)
    duration_s = (period[1] - period[0]) / NS_PER_S if period else 0.0
    summary = summarize(req, duration_s)
    retained = retained_view(run, req, window_s)  # records kept selectively: numbers from histograms
    if retained is not None:
        period, duration_s, summary = retained.period, retained.duration_s, retained.summary
    p99_ms = summary.latency_ms.p99.value_ms
    slos, slo_warnings = parse_scenario_slos(scenario)
    resolved = rules_for_scenario(scenario, stage_map)  # the scenario's `stages:` rules (stage_rules.py)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tailscope-records") as pool:
        windows_later = (pool.submit(window_table, req, period[0], period[1], window_s, p99_ms)
                         if period and retained is None else None)
        records_later = pool.submit(record_sections, req, run, period, duration_s, window_s, slos, retained, p99_ms)
        join = join_spans(req, run.spans, resolved.rules)  # one span↔request join, shared
        alignment = align_clocks(req, run.spans, resolved.rules, join=join)
        run = alignment.apply(run)  # server-clock times moved onto the generator's clock (a copy)
        release_pages(run)  # the join's columns (trace ids) are read: hand their pages back
        matrix = stage_matrix(req, run.spans, resolved.rules, join=join)
        traced = traced_requests(req, join, trace_sample_rate(run.manifest))
        missing = missing_spans(req, matrix, join, trace_sample_rate(run.manifest), run.manifest.get("late_spans"))
        stage_map = {**{name: name for name in matrix.span_stages}, **stage_name_map(run.spans, resolved.rules)}
        release_pages(run)
        # read once (aligned times) for the queue chart and the detectors; each chunk's pages handed back
        queue = queue_points(run.spans, after_chunk=partial(release_pages, run))
        windows = retained.windows if retained is not None else windows_later.result() if windows_later else None
        # an LLM run whose answers differ in length is judged for answer length (a long answer is no incident)
        output_tokens = output_tokens_of(run.requests) if retained is None else None
        per_length = length_adjusted_ms(req, output_tokens)
        detection = detect(req, windows, spike_rules, retained, per_length) if windows else None
        plain = detect(req, windows, spike_rules) if windows and per_length is not None else None
        short = shortness(req, windows, spike_rules, retained) if detection is None else None  # why no test
        spikes = (find_spikes(req, windows, matrix, run, registry, spike_rules, stage_map,
                              detection=detection, method=method, span_request=join.span_request, queue=queue,
                              retained=retained, per_length=per_length, output_tokens=output_tokens,
                              e2e_tau=plain.threshold_ms if plain is not None else None)
                  if windows else [])
        longer = (longer_answers(req, windows, per_length, output_tokens, spikes, spike_rules, plain)
                  if windows and per_length is not None else [])
        release_pages(run)
        signals = signals_section(run, req, period, window_s, queue=queue)
        release_pages(run)
        signal_index = SignalIndex(run.signals, run.signals_meta)
        patterns = analyze_patterns(req, spikes, signal_index, period)
        servers = run_server_series(run, signal_index)
        records = records_later.result()
    judged_generator = judged(records["generator"], summary, req)  # the lateness rule needs the summary
    run_summary = summary_section(summary, judged_generator.load_model["loop"], judged_generator.dropped,
                                  records["goodput"])
    stages = summarize_stages(matrix, traced, missing=missing, rules=resolved.rules.describe(),
                              clock=alignment.section(), servers=servers.describe(),
                              split=stage_slow_split(req, matrix, records))
    facts = run_facts(run, period)
    streaming = streaming_section(req, records["stream_times"], duration_s)
    outages = find_outages(req, run.events)
    retention = retained.retention if retained is not None else Retention(sampled=False)
    llm = llm_analysis(req, records["llm"], records["stream_times"], slos, duration_s, windows, spike_rules,
                       run.manifest)
    if llm is not None:  # TTFT and TPOT spikes get causes as latency spikes do
        llm = with_causes_and_cache(llm, token_spike_causes(
            encode(llm.spikes), series(req, records["llm"], records["stream_times"]), req, matrix, run,
            windows, registry, method, join.span_request, queue), prefix_cache_section(servers, signal_index, period))
    soak = soak_section(windows, run.signals, period,
                        retained.period_counts if retained is not None else partial(record_period_counts, req),
                        patterns, retained=retained is not None)
    policy, policy_warnings = scenario_policy(scenario)
    judgement = evaluate(slos, SloSources(summary=run_summary, classes=records["classes"], streaming=streaming, llm=llm))
    verdict = outcome_verdict(abort_verdict(judgement, run.manifest), facts.duration_s, run.manifest, policy)
    findings = whole_run_findings(FindingInputs(
        summary=run_summary, spikes=spikes, generator=judged_generator, load_start_ns=period[0] if period else None,
        req=req, matrix=matrix, run=run, span_request=join.span_request))
    warnings = (slo_warnings + policy_warnings + resolved.warnings + clock_warnings(alignment)
                + run_warnings(run, facts, run_summary, stages, windows, spike_rules, detection, short)
                + encode(pattern_warnings(patterns))
                + consistency_warnings(stages.consistency)
                + run_health_warnings(run.manifest, outages, run.receiver, stages, run_summary, retention)
                + load_warnings(judged_generator, run.manifest)
                + llm_warnings(llm, retention))
    return jsonable({  # every section encoded once, in the order analysis.json has always had
        "format_version": ANALYSIS_FORMAT_VERSION,
        "run": encode(facts),
        "summary": encode(run_summary),
        "classes": encode(records["classes"]),
        "stages": encode(stages),
        "window_s": window_s,
        "windows": encode(window_records(req, windows, records, window_s)),
        "slow_requests": encode(records["slow_requests"]),
        "tail_line": encode(records["tail_line"]),
        "rolling_lines": encode(records["rolling_lines"]),
        "distribution": encode(records["distribution"]),
        "spike_detection": encode(detection_facts(
            detection, spike_rules, method, period[0] if period else None, short,
            "e2e_for_answer_length" if per_length is not None else "latency", longer)),
        "spikes": encode(spikes),
        "patterns": encode(patterns),
        "signals": encode(signals),
        "events": encode(event_digest(run)),
        "receiver": run.receiver,
        "outages": encode(outages),
        "retention": encode(retention) if retention.sampled else {"sampled": False},  # all kept: just that
        "generator": encode(judged_generator),
        "generator_limited_windows": encode(limited_bands(judged_generator)),
        "server_load": encode(server_load_section(servers, signal_index, period)),
        "other_traffic": encode(other_traffic_section(run, req, matrix, join.span_request, period, window_s)),
        "streaming": encode(streaming),
        "llm": encode(llm),
        "error_samples": encode(error_samples_section(run.path)),
        "soak": encode(soak),
        "verdict": encode(verdict),
        "findings": encode(findings),
        "warnings": warnings,
    })


def record_sections(req: RequestArrays, run: Run, period: tuple[int, int] | None, duration_s: float,
                    window_s: float, slos: list, retained, p99_ms: float | None) -> dict:
    """The sections that read only the request records (and the generator's own signals and
    events, which no clock alignment moves): ``generator``, ``classes`` and ``distribution`` (from the
    histograms for a retained run),
    ``slow_requests``, ``tail_line`` (the rolling P99; None for a retained run, whose records are a
    sample), ``rolling_lines`` (the rolling P50 and P90 the latency chart draws at low rates; None
    likewise), ``stream_times`` (streamed chunks), ``goodput`` and ``llm`` (the OpenAI-API columns, None
    without such requests)."""
    times = stream_times(req, run.requests, *read_chunks(run.path))
    return {
        "llm": llm_arrays(run.requests),
        "generator": generator_section(req, run, period, window_s),
        "classes": retained.classes if retained is not None else summarize_classes(req, duration_s),
        "distribution": retained.distribution if retained is not None else latency_distribution(req),
        "slow_requests": retained_slow_points(req, p99_ms, period, retained),
        "tail_line": tail_line(req, period, window_s) if retained is None else None,
        "rolling_lines": rolling_lines(req, period, window_s) if retained is None else None,
        "stream_times": times,
        "goodput": (retained.goodput(slos, goodput_summary(req, slos, times, duration_s)) if retained is not None
                    else goodput_summary(req, slos, times, duration_s)),
    }


def retained_slow_points(req: RequestArrays, p99_ms: float | None, period, retained) -> SlowRequests:
    """``slow_requests`` (:func:`~.stats.slow_points.slow_request_points`); in a retained run the
    points are kept records but ``above_threshold`` counts every request, from the histograms."""
    points = slow_request_points(req, p99_ms, period)
    if retained is None or p99_ms is None:
        return points
    return dataclasses.replace(points, above_threshold=retained.count_above(p99_ms))


def window_records(req: RequestArrays, windows: dict | None, records: dict, window_s: float) -> list[Window]:
    """The ``windows`` list: the window table's records, with the LLM columns in a run with
    OpenAI-API requests (:func:`~.stats.llm.window_columns`)."""
    if not windows:
        return []
    llm = records["llm"]
    columns = window_columns(req, llm, records["stream_times"], windows) if llm is not None else None
    return add_window_columns(windows_as_records(windows), columns, window_s)


def stage_slow_split(req: RequestArrays, matrix, records: dict) -> SlowSplit | None:
    """``stages.slow_split`` (:mod:`.stages.slow_split`): slow requests by TTFT/TPOT in a run with
    streamed OpenAI-API requests, else by latency, against the normal ones, stage by stage."""
    llm = records["llm"]
    measures = {} if llm is None else {k: v for k, v in series(req, llm, records["stream_times"]).items()
                                        if not np.isnan(v).all()}
    if not measures:  # no OpenAI-API request, or none streamed (no TTFT to judge by)
        measures = {"latency": np.where(req.in_latency, req.latency_ms, np.nan)}
    tokens = None if llm is None else {"prompt": llm.prompt_tokens, "output": llm.output_tokens}
    return slow_split(matrix, measures, tokens)


def other_traffic_section(run: Run, req: RequestArrays, matrix, span_request, period: tuple[int, int] | None,
                          window_s: float) -> OtherTraffic:
    """The ``other_traffic`` section (:mod:`.inputs.other_traffic`): requests the server answered that
    the harness did not send, per window of the load period."""
    tokens = matrix.server_tokens.attributes if matrix.server_tokens is not None else None
    traffic = other_traffic(run.spans, foreign_spans(run.spans, span_request, req.trace_ids.combine_chunks()), tokens)
    start, end = period if period else (0, 0)
    return traffic.section(start, end, window_s)


def llm_analysis(req: RequestArrays, llm: LlmArrays | None, times, slos: list, duration_s: float,
                 windows: dict | None, rules: SpikeRules, manifest: dict) -> Llm | None:
    """The ``llm`` section (:mod:`.stats.llm`) with its TTFT and TPOT spike tests
    (:mod:`.spikes.series`), their spikes without causes yet; None when the run has no OpenAI-API request."""
    if llm is None:
        return None
    detection, spikes = {}, {}
    for metric, values in series(req, llm, times).items():
        detection[metric], spikes[metric] = series_spikes(req.scheduled_ns, values, windows, rules)
    return llm_section(req, llm, times, slos, duration_s, manifest, series_detections(detection), token_spikes(spikes))


def llm_warnings(llm: Llm | None, retention: Retention) -> list[dict]:
    """``llm_sampled_records``: the ``llm`` section of a run whose records a retention policy
    thinned is computed from the kept records (every error, a sample, the spikes' surroundings),
    not from every request as ``summary`` is."""
    if llm is not None and retention.sampled:
        return [{"code": "llm_sampled_records", "message": (
            "the LLM metrics (TTFT, TPOT, tokens, goodput) come from the records a retention policy kept "
            "(every error, a sample, the spikes' surroundings), not from every request")}]
    return []


def parse_scenario_slos(scenario: dict) -> tuple[list, list[dict]]:
    """(parsed SLOs, warnings for lines that do not parse) from ``scenario["slo"]``."""
    lines = scenario.get("slo") or []
    if isinstance(lines, str):
        lines = [lines]
    slos, warnings = [], []
    for line in lines:
        try:
            slos.append(parse_slo(line))
        except ValueError as exc:
            warnings.append({"code": "invalid_slo", "message": str(exc)})
    return slos, warnings


def iso_utc(epoch_ns: int) -> str:
    """Epoch ns as an ISO 8601 UTC time with ms, e.g. ``2026-01-01T00:00:59.123Z``."""
    moment = datetime.fromtimestamp(epoch_ns / NS_PER_S, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def last_data_ns(run: Run) -> int | None:
    """Latest timestamp found in any table (epoch ns); None for an empty run."""
    candidates = []
    for table, columns in ((run.requests, ("scheduled_ns", "end_ns")), (run.spans, ("end_ns",)),
                           (run.signals, ("t_ns",)), (run.events, ("end_ns",))):
        for column in columns:
            if len(table):
                value = pc.max(table.column(column)).as_py()
                if value is not None:
                    candidates.append(value)
    return max(candidates) if candidates else None


def run_facts(run: Run, period: tuple[int, int] | None) -> RunFacts:
    """The ``run`` section (:class:`~tailscope.analysis_model.run.Run`): manifest facts plus status,
    completeness and the load period (epoch ns; ``duration_s`` in s)."""
    manifest = run.manifest
    status = manifest.get("status", "unknown")
    incomplete = status == "running"
    stopped_ns = last_data_ns(run) if incomplete else None
    stopped_at = iso_utc(stopped_ns if stopped_ns is not None else manifest.get("start_ns") or 0)
    scenario = manifest.get("scenario") or {}
    return RunFacts(
        path=run.path,
        name=manifest.get("name") or scenario.get("name") or os.path.basename(run.path.rstrip("/")),
        status=status,
        incomplete=incomplete,
        incomplete_reason=f"incomplete: harness stopped at {stopped_at}" if incomplete else None,
        format_version=manifest.get("format_version"),
        tailscope_version=manifest.get("tailscope_version"),
        start_ns=manifest.get("start_ns"),
        end_ns=manifest.get("end_ns") if not incomplete else stopped_ns,
        load_start_ns=period[0] if period else None,
        load_end_ns=period[1] if period else None,
        duration_s=(period[1] - period[0]) / NS_PER_S if period else 0.0,
        target=manifest.get("target"),
        scenario=scenario,
        host=manifest.get("host") or {},
        environment=Environment(**environment_facts(manifest)),
        truncated_files=tuple(sorted(name for name, cut in run.truncated.items() if cut)),
        damaged_files=tuple(DamagedFile(file=name, batch=damage.batch, reason=damage.reason,
                                        message=damage.describe(name))
                            for name, damage in sorted(run.damaged.items())),
        abort_reasons=tuple(manifest.get("abort_reasons") or []),
    )


def _event_record(kind, start, end, source, attributes) -> Event:
    try:
        parsed = json.loads(attributes) if attributes else {}
    except (TypeError, ValueError):
        parsed = {"raw": str(attributes)}
    return Event(str(kind), int(start), int(end), (int(end) - int(start)) / NS_PER_MS, source,
                 parsed if isinstance(parsed, dict) else {"value": parsed})


def event_digest(run: Run) -> Events:
    """Faults (first MAX_FAULTS by start), GC pause totals and the longest MAX_GC_PAUSES, other counts."""
    events = run.events
    kinds = events.column("kind").to_numpy(zero_copy_only=False)
    start, _ = int_column(events, "start_ns")
    end, _ = int_column(events, "end_ns")
    sources = events.column("source").to_numpy(zero_copy_only=False)
    attributes = events.column("attributes").to_numpy(zero_copy_only=False)

    def records(index):
        return [_event_record(kinds[i], start[i], end[i], sources[i], attributes[i]) for i in index]

    fault_index = np.flatnonzero(kinds == "fault")
    fault_index = fault_index[np.argsort(start[fault_index], kind="stable")][:MAX_FAULTS]
    gc_index = np.flatnonzero(kinds == "gc_pause")
    gc_ms = (end[gc_index] - start[gc_index]) / NS_PER_MS
    longest = gc_index[np.argsort(-gc_ms, kind="stable")][:MAX_GC_PAUSES]
    longest = longest[np.argsort(start[longest], kind="stable")]
    others = {}
    for kind in kinds:
        if kind not in ("fault", "gc_pause"):
            others[str(kind)] = others.get(str(kind), 0) + 1
    return Events(
        faults=records(fault_index),
        faults_total=int(np.sum(kinds == "fault")),
        gc_pauses=GcPauses(int(len(gc_index)), float(gc_ms.sum()), float(gc_ms.max()) if len(gc_ms) else None,
                           records(longest)),
        other_counts=dict(sorted(others.items())),
    )


def run_warnings(run: Run, facts: RunFacts, summary: Summary, stages: Stages, windows, rules: SpikeRules,
                 detection=None, short: TooShort | None = None) -> list[dict]:
    """Everything the reader of the numbers must know first, as ``{"code", "message"}``, from the run,
    its ``run``, ``summary`` and ``stages`` sections (``short``: why spike detection did not run, when
    it did not)."""
    warnings = []
    if facts.incomplete:
        warnings.append({"code": "incomplete", "message": facts.incomplete_reason})
    for damaged in facts.damaged_files:
        warnings.append({"code": "damaged", "message": damaged.message})
    refused = ((run.receiver or {}).get("rejected") or {}).get("unauthenticated") or 0
    if refused:
        warnings.append({"code": "receiver_unauthenticated", "message": (
            f"the receiver refused {refused:,} export request{'s' if refused != 1 else ''} without the run's "
            "bearer token (HTTP 401 / gRPC UNAUTHENTICATED): a stranger's, or a target or agent of yours "
            "missing OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token> or --token; what they sent is "
            "not in this run")})
    for name in facts.truncated_files:
        warnings.append({"code": "truncated", "message": f"{name}: a file ended inside a batch "
                         "(writer killed); its last partial batch is lost"})
    if summary.requests == 0:
        warnings.append({"code": "no_requests", "message": "the run recorded no requests"})
        return warnings
    # generator-limited: a whole-run finding (analyzers/findings/generator_limited.py), not a warning
    p99 = summary.latency_ms.p99
    if not p99.claimed:
        warnings.append({"code": "too_few_samples", "message": (
            f"P99 from {p99.n} successful requests is not claimed: early stopping needs at least "
            f"{min_samples_for_claim(0.99, 0)} at 99% confidence")})
    sample_rate = trace_sample_rate(run.manifest)
    if len(run.spans) == 0:
        warnings.append({"code": "no_spans", "message": "no spans were recorded: no stage decomposition"})
    elif stages.joined_fraction < MIN_JOINED_FRACTION * stages.traced_fraction:
        warnings.append({"code": "partial_join", "message": (
            f"only {stages.joined_fraction:.1%} of successful requests joined a server span"
            + (f" ({stages.traced_fraction:.1%} were sent for tracing)" if sample_rate < 1.0 else "")
            + "; stage statistics cover the joined ones")})
    if windows is not None and detection is None:
        warnings.append({"code": "no_spike_detection", "message": (
            short_sentence(short) if short is not None else
            f"spike detection needs at least {rules.samples_to_tell()} latency samples")})
    return warnings


def jsonable(value):
    """Plain JSON types only: numpy scalars unwrapped, NaN/inf → None."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
