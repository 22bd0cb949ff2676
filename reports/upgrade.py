"""Read analyses written by older tailscope versions: rename what changed name.

An analysis carries its ``format_version`` (analysis.schema.json). The report
builders read the current names only; :func:`upgrade_analysis` maps an older
analysis onto them so that any analysis.json, however old, still renders.

Format 1.1 renamed the stage ``client_network`` (service time − server span: the
network, the server's accept queue and HTTP layer, a blocked event loop) to
``outside_server``, with the causes' ``client_network_growth_ms`` to
``outside_server_growth_ms``.

Verdicts written before outcome words existed (no ``outcome``; SLO rows without ``status``) read as
they did then: the outcome is passed or failed from ``passed``, each row pass or fail from its
``passed``, the detail lists what failed, with no policy of their own (the default) and nothing
incomplete or unclaimed (:func:`upgrade_verdict`).
"""

from __future__ import annotations

import dataclasses
import re

from tailscope.analysis_model.codec import AnalysisShapeError, decode
from tailscope.analysis_model.comparison import Comparison
from tailscope.analysis_model.evidence import LatencySplit, SignalContrast
from tailscope.analysis_model.findings import Finding
from tailscope.analysis_model.health import Generator, LimitedBand, Outages, Retention, Soak, TrendVerdict
from tailscope.analysis_model.llm import Llm, TokenSpike
from tailscope.analysis_model.records import Distribution, RollingLines, SlowRequests, TailLine, Window
from tailscope.analysis_model.run import ErrorSamples, Run
from tailscope.analysis_model.server import OtherTraffic, ServerLoad
from tailscope.analysis_model.spikes import CauseFinding, Spike, SpikeDetection
from tailscope.analysis_model.stages import Stages
from tailscope.analysis_model.streaming import Streaming
from tailscope.analysis_model.sweep import AnalysisSweep, Sweep
from tailscope.analysis_model.verdict import DEFAULT_UNCLAIMED, Verdict
from tailscope.analysis_model.warning import AnalysisWarning

#: Old stage name -> current name, by the format version that renamed it.
RENAMED_STAGES = {"client_network": "outside_server"}
RENAMED_IN = (1, 1)
_OLD_WORD = re.compile(r"\b(" + "|".join(RENAMED_STAGES) + r")(?=\b|_)")


def _version(text) -> tuple[int, int]:
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except (TypeError, ValueError):
        return (1, 0)


def _new_words(text: str) -> str:
    return _OLD_WORD.sub(lambda m: RENAMED_STAGES[m.group(1)], text)


def _rename(value):
    if isinstance(value, dict):
        return {_new_words(key) if isinstance(key, str) else key: _rename(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rename(item) for item in value]
    if isinstance(value, str):
        return _new_words(value)
    return value


def upgrade_verdict(verdict: dict | None) -> dict:
    """A ``verdict`` section in the current shape: the same dict when it has an ``outcome``, else a
    completed copy (see the module docstring); None (an analysis without a verdict) reads as a
    passed run without SLOs."""
    if verdict is not None and "outcome" in verdict:
        return verdict
    verdict = verdict if verdict is not None else {"passed": True, "slos": [], "failed": []}
    failed = list(verdict.get("failed") or [])
    outcome = "passed" if verdict.get("passed", True) else "failed"
    rows = [{**row, "status": row.get("status") or ("pass" if row["passed"] else "fail")}
            for row in verdict.get("slos") or []]
    return {**verdict, "passed": outcome == "passed", "slos": rows, "failed": failed, "outcome": outcome, "label": outcome.upper(),
            "detail": "failed: " + ", ".join(failed) if failed else "", "incomplete": None, "needs": [],
            "policy": {"unclaimed": DEFAULT_UNCLAIMED}}


def verdict_of(analysis: dict) -> Verdict:
    """The analysis's verdict as its type, however old the analysis (:func:`upgrade_verdict`); the
    one door the report, the terminal and the exit code read it through."""
    return decode(Verdict, upgrade_verdict(analysis.get("verdict")), "verdict")


def comparison_of(comparison: dict) -> Comparison:
    """A ``comparison.json`` (tailscope compare) as its type, whatever its ``format_version``: the
    fields later formats added read as their defaults (analysis_model/comparison.py), and a
    comparison from before titles (format 1.0) is titled by its sides' names (``new vs base``).
    Raises AnalysisShapeError naming the place when the document does not have a comparison's shape."""
    typed = decode(Comparison, comparison, "comparison")
    if typed.title is None:
        typed = dataclasses.replace(typed, title=f"{typed.current.name} vs {typed.baseline.name}")
    return typed


def upgrade_analysis(analysis: dict) -> dict:
    """``analysis`` with the current field and stage names: the same dict when it is already
    current (format 1.1 or later, with an outcome word), else an upgraded copy (the input is not
    changed): the word ``client_network`` (also as a key's prefix, ``client_network_growth_ms``)
    becomes ``outside_server`` in every key and string (stage keys, a finding's stage, the spike
    summaries that quote the stage); a verdict without an outcome is completed
    (:func:`upgrade_verdict`)."""
    if _version(analysis.get("format_version")) < RENAMED_IN:
        analysis = _rename(analysis)
    verdict = analysis.get("verdict")
    if verdict is not None and "outcome" not in verdict:
        analysis = {**analysis, "verdict": upgrade_verdict(verdict)}
    return analysis


#: Spike fields an analysis from before the tail-share test lacks that no constant default can
#: stand for (the constant ones are the defaults of analysis_model.spikes.Spike).
DERIVED_SPIKE_FIELDS = ("records_kept", "slow_requests", "slow_share")


def upgrade_spike(spike: dict) -> dict:
    """A spike (``$defs/spike``) completed where an older analysis lacks :data:`DERIVED_SPIKE_FIELDS`:
    ``slow_requests`` are then its decomposition's slow requests (as the report read them),
    ``slow_share`` their share of its ``requests``, and ``records_kept`` its ``requests`` (every
    record was kept before retention); the same dict when nothing is missing."""
    if all(key in spike for key in DERIVED_SPIKE_FIELDS):
        return spike
    requests = spike.get("requests") or 0
    slow = spike.get("slow_requests", (spike.get("decomposition") or {}).get("slow_requests") or 0)
    return {"records_kept": requests, "slow_requests": slow, "slow_share": slow / requests if requests else 0.0,
            **spike}


def spikes_of(analysis: dict) -> list[Spike]:
    """The analysis's latency spikes as their type, however old the analysis (:func:`upgrade_spike`;
    none in an analysis without ``spikes``): the one door the report reads them through."""
    return decode(list[Spike], [upgrade_spike(spike) for spike in analysis.get("spikes") or []], "spikes")


def findings_of(analysis: dict) -> list[Finding]:
    """The analysis's whole-run findings as their type, most severe first as written; none in an
    analysis written before findings existed: the one door the report and the terminal read them through."""
    return decode(list[Finding], analysis.get("findings") or [], "findings")


def warnings_of(analysis: dict) -> list[AnalysisWarning]:
    """The analysis's warnings as their type, in the order written (none where the key is absent,
    as in an analysis cut short)."""
    return decode(list[AnalysisWarning], analysis.get("warnings") or [], "warnings")


def spike_detection_of(analysis: dict) -> SpikeDetection | None:
    """The ``spike_detection`` section as its type; None in an analysis written before it existed."""
    detection = analysis.get("spike_detection")
    return None if detection is None else decode(SpikeDetection, detection, "spike_detection")


def run_of(analysis: dict) -> Run:
    """The ``run`` section as its type (an older analysis: no environment, nothing damaged, no abort)."""
    return decode(Run, analysis["run"], "run")


def windows_of(analysis: dict) -> list[Window]:
    """The display windows as their type, in time order (none in a run without a load period)."""
    return decode(list[Window], analysis.get("windows") or [], "windows")


def slow_requests_of(analysis: dict) -> SlowRequests | None:
    """The slow-request points as their type; None in an analysis written before them."""
    slow = analysis.get("slow_requests")
    return None if slow is None else decode(SlowRequests, slow, "slow_requests")


def tail_line_of(analysis: dict) -> TailLine | None:
    """The rolling P99 line; None for a retained run, too few requests or an analysis before it."""
    line = analysis.get("tail_line")
    return None if line is None else decode(TailLine, line, "tail_line")


def rolling_lines_of(analysis: dict) -> RollingLines:
    """The rolling P50 and P90 lines (each None where there is none: a retained run, too few
    requests, an analysis before them)."""
    lines = analysis.get("rolling_lines")
    return RollingLines(None, None) if lines is None else decode(RollingLines, lines, "rolling_lines")


def distribution_of(analysis: dict) -> Distribution | None:
    """The latency histogram; None in an analysis written before it."""
    distribution = analysis.get("distribution")
    return None if distribution is None else decode(Distribution, distribution, "distribution")


def streaming_of(analysis: dict) -> Streaming | None:
    """The streamed-response metrics; None in an analysis written before them."""
    streaming = analysis.get("streaming")
    return None if streaming is None else decode(Streaming, streaming, "streaming")


def error_samples_of(analysis: dict) -> ErrorSamples:
    """The error samples per class; not ``available`` (no classes) in an analysis written before them."""
    samples = analysis.get("error_samples")
    return (ErrorSamples(available=False, classes={}) if samples is None
            else decode(ErrorSamples, samples, "error_samples"))


def sweep_of(sweep: dict) -> Sweep:
    """A ``sweep.json`` (tailscope sweep) as its type, whatever its ``format_version``: the fields
    later formats added read as their defaults (analysis_model/sweep.py), and a format-1.0 knee,
    written before the knee's ``level``, takes its ``rate`` as the level (1.0 swept rates only).
    Raises AnalysisShapeError naming the place when the file does not have a sweep's shape."""
    knee = sweep.get("knee") if isinstance(sweep, dict) else None
    if isinstance(knee, dict) and "level" not in knee:
        sweep = {**sweep, "knee": {**knee, "level": knee.get("rate")}}
    return decode(Sweep, sweep, "sweep")


def analysis_sweep_of(analysis: dict) -> AnalysisSweep | None:
    """The ``sweep`` key an analyzer of one's own may add to the analysis (docs/report.md "Keys read
    when present"); None where there is none (tailscope's analyzers do not write it)."""
    section = analysis.get("sweep")
    return None if section is None else decode(AnalysisSweep, section, "sweep")


def generator_of(analysis: dict) -> Generator | None:
    """The load generator's section as its type; None in an analysis written before it."""
    generator = analysis.get("generator")
    return decode(Generator, generator, "generator") if generator else None


def limited_bands_of(analysis: dict) -> list[LimitedBand]:
    """The generator-limited intervals drawn on the latency chart (``generator_limited_windows``; an
    entry from before the lateness rule reads as material); none in an analysis without them."""
    return decode(list[LimitedBand], analysis.get("generator_limited_windows") or [], "generator_limited_windows")


def outages_of(analysis: dict) -> Outages | None:
    """The outages section as its type; None in an analysis without one."""
    outages = analysis.get("outages")
    return decode(Outages, outages, "outages") if outages else None


def soak_of(analysis: dict) -> Soak | None:
    """The soak view's section as its type; None in an analysis written before it."""
    soak = analysis.get("soak")
    return decode(Soak, soak, "soak") if soak else None


def retention_of(analysis: dict) -> Retention | None:
    """How records were kept, as its type; None in an analysis written before retention."""
    retention = analysis.get("retention")
    return decode(Retention, retention, "retention") if retention else None


def llm_of(analysis: dict) -> Llm | None:
    """The analysis's ``llm`` section as :class:`Llm` (None: a run without OpenAI-API requests, or an
    analysis from before the section existed); a shape that differs from the type raises
    ``AnalysisShapeError`` naming the place."""
    return decode(Llm | None, analysis.get("llm"), "llm")


def token_spikes_of(analysis: dict) -> dict[str, list[TokenSpike]]:
    """The TTFT and TPOT spikes (``llm.spikes``, keyed ``"ttft"``, ``"tpot"``), decoded alone (the
    cards read nothing else of the section); none without an ``llm`` section."""
    llm = analysis.get("llm")
    return {} if llm is None else decode(dict[str, list[TokenSpike]], llm["spikes"], "llm.spikes")


def stages_of(analysis: dict) -> Stages:
    """The ``stages`` section as its type (older analyses: the type's defaults for what they lack)."""
    return decode(Stages, analysis["stages"], "stages")


def server_load_of(analysis: dict) -> ServerLoad | None:
    """The server's load series on one grid (``server_load``); None where it is null (no preset, no
    metrics) or, in an analysis written before the section existed, absent."""
    load = analysis.get("server_load")
    return None if load is None else decode(ServerLoad, load, "server_load")


def other_traffic_of(analysis: dict) -> OtherTraffic | None:
    """The requests the server answered besides ours (``other_traffic``); None where it is null or
    (an analysis written before the section existed) absent."""
    other = analysis.get("other_traffic")
    return None if other is None else decode(OtherTraffic, other, "other_traffic")


def trend_verdict_of(verdict: dict | None, where: str) -> TrendVerdict | None:
    """A soak ``drift`` or ``leak`` verdict's word and summary (:class:`TrendVerdict`), read alike
    from either of its two current shapes (the diagnosis patterns' or the soak module's own test:
    analysis_model/health.Soak); None where the soak view has none. ``where`` names the place in an
    :class:`AnalysisShapeError`."""
    return None if verdict is None else decode(TrendVerdict, verdict, where)


# -- The kit-written parts of a cause's evidence (analysis_model/evidence.py) ----------------------
# A cause's evidence is open: a plug-in detector may write these keys in a shape of its own. Each
# reader below decodes what has the kit's shape and leaves out, entry by entry, what does not, so a
# card shows the rest of the evidence rather than failing.


def _tolerant(cls, data, where: str):
    try:
        return decode(cls, data, where)
    except AnalysisShapeError:
        return None


def contrasts_of(evidence: dict) -> list[SignalContrast]:
    """A cause's signal contrasts as written: its ``signals[]``, then the generator's
    ``generator_runqueue_wait``; an entry in another shape (missing a field, a field of another
    JSON type) is left out."""
    signals = evidence.get("signals")
    listed = [*(signals if isinstance(signals, list) else ()), evidence.get("generator_runqueue_wait")]
    found = (_tolerant(SignalContrast, entry, "evidence.signals") for entry in listed if entry is not None)
    return [contrast for contrast in found if contrast is not None]


def latency_split_of(evidence: dict) -> LatencySplit | None:
    """A cause's ``latency_split``; None where it is absent or in another shape."""
    split = evidence.get("latency_split")
    return None if split is None else _tolerant(LatencySplit, split, "evidence.latency_split")


def factors_of(evidence: dict) -> dict[str, float]:
    """A cause's confidence ``factors`` (name -> value in [0, 1]) in the order written; a value that
    is not a number is left out, as is the whole where ``factors`` is not an object."""
    factors = evidence.get("factors")
    if not isinstance(factors, dict):
        return {}
    return {str(name): float(value) for name, value in factors.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


def places_of(evidence: dict) -> dict[str, str]:
    """A cause's ``places``: evidence key -> where that figure was measured (only figures measured
    outside the spike's own window); a place that is not a string is left out."""
    places = evidence.get("places")
    if not isinstance(places, dict):
        return {}
    return {str(key): place for key, place in places.items() if isinstance(place, str)}


def weak_findings_of(evidence: dict) -> list[CauseFinding]:
    """The findings below the threshold an ``unexplained`` cause lists (``weak_findings``), in the
    order written; an entry in another shape is left out."""
    weak = evidence.get("weak_findings")
    found = (_tolerant(CauseFinding, entry, "evidence.weak_findings") for entry in (weak if isinstance(weak, list) else ()))
    return [finding for finding in found if finding is not None]
