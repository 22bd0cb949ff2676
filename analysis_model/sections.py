"""Which parts of the analysis have a type, by their place in analysis.json.

:data:`TYPED` maps a JSON path — a top-level key (``"verdict"``) or a ``$defs`` entry
(``"$defs/percentile"``) of analyzers/analysis.schema.json — to its section type. The schema test
checks each against the schema; a section gains its type by being added here.
"""

from __future__ import annotations

from tailscope.analysis_model.events import Event, Events
from tailscope.analysis_model.evidence import LatencySplit, SignalContrast
from tailscope.analysis_model.findings import Finding
from tailscope.analysis_model.health import Generator, LimitedBand, Outages, Retention, Soak
from tailscope.analysis_model.llm import Llm, LlmGoodput, LlmMetrics, TokenStats
from tailscope.analysis_model.patterns import Patterns, Trend
from tailscope.analysis_model.percentiles import MaxValue, Percentile, PercentileSet
from tailscope.analysis_model.receiver import Receiver
from tailscope.analysis_model.records import Distribution, RollingLine, RollingLines, SlowRequests, TailLine, Window
from tailscope.analysis_model.run import ErrorSamples, Run
from tailscope.analysis_model.server import OtherTraffic, ServerLoad
from tailscope.analysis_model.signals import Signals
from tailscope.analysis_model.spikes import CauseFinding, Decomposition, Spike, SpikeDetection
from tailscope.analysis_model.stages import NameCount, Stages, StageStats
from tailscope.analysis_model.streaming import Streaming, StreamMetrics
from tailscope.analysis_model.summary import Goodput, GoodputShare, RequestSummary, Summary
from tailscope.analysis_model.verdict import Verdict
from tailscope.analysis_model.warning import AnalysisWarning

TYPED: dict[str, type] = {
    "$defs/percentile": Percentile,
    "$defs/percentile_set": PercentileSet,
    "$defs/request_summary": RequestSummary,
    "$defs/summary": Summary,
    "$defs/goodput": Goodput,
    "$defs/goodput_share": GoodputShare,
    "verdict": Verdict,
    "$defs/llm_metrics": LlmMetrics,
    "$defs/token_stats": TokenStats,
    "$defs/llm_goodput": LlmGoodput,
    "llm": Llm | None,  # null in a run without OpenAI-API requests
    "$defs/spike": Spike,
    "$defs/finding": CauseFinding,
    "$defs/decomposition": Decomposition,
    "$defs/signal_contrast": SignalContrast,  # the kit-written parts of a cause's open evidence
    "$defs/latency_split": LatencySplit,
    "spikes": tuple[Spike, ...],
    "spike_detection": SpikeDetection,
    "$defs/stage_stats": StageStats,
    "$defs/name_count": NameCount,
    "$defs/event": Event,
    "stages": Stages,
    "events": Events,
    "server_load": ServerLoad | None,  # null without mapped server series
    "other_traffic": OtherTraffic,
    "receiver": Receiver,
    "signals": Signals,
    "generator": Generator,
    "generator_limited_windows": list[LimitedBand],
    "outages": Outages,
    "retention": Retention,
    "soak": Soak,
    "run": Run,
    "classes": dict[str, RequestSummary],
    "windows": list[Window],
    "slow_requests": SlowRequests,
    "$defs/rolling_line": RollingLine,
    "tail_line": TailLine | None,  # null for a retained run or too few requests
    "rolling_lines": RollingLines | None,  # null for a retained run
    "distribution": Distribution,
    "$defs/stream_metrics": StreamMetrics,
    "streaming": Streaming,
    "error_samples": ErrorSamples,
    "findings": list[Finding],
    "$defs/trend": Trend,
    "patterns": Patterns,
    "warnings": list[AnalysisWarning],
}

__all__ = ["TYPED", "MaxValue", "Percentile", "PercentileSet"]
