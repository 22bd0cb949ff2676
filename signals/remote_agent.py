"""The remote agent: the same samplers on the target's host, sent to the harness
as OTLP metrics (``tailscope agent``; docs/signals.md "harness and service on
different machines").

Each tick's rows are buffered and exported every ``export_interval_s`` (1 s)
with the OpenTelemetry SDK's OTLP/HTTP metric exporter into the harness's
receiver (``/v1/metrics`` → ``signals.receiver.arrow``). Every series keeps its
local name and gains the attribute ``host`` (so ``host.cpu.user_s`` arrives as
``host.cpu.user_s{host="gpu-7"}``); units and descriptions travel in the
metric descriptors, counters as cumulative monotonic sums, gauges as gauges;
the receiver records them in ``signals.receiver.json``. Timestamps are the
agent's own clock, exactly as read (a Prometheus scrape's: its answer time).

Clock offset: NTP-style against the receiver's ``GET /v1/time`` echo. Each
estimate takes :data:`CLOCK_PROBES` round trips ``(t0 send, t1 receiver stamp,
t2 receive)`` and keeps the one with the smallest round trip:
``offset = t1 - (t0 + t2) / 2`` (harness clock minus agent clock), error at
most ``rtt / 2``. Estimates are repeated every :data:`CLOCK_INTERVAL_S` and
sent as the gauges ``agent.clock_offset_ns`` and ``agent.clock_rtt_ns``; the
analyzers add the offset to the agent's timestamps to align its series with
the harness's (:mod:`tailscope.analyzers.inputs.signal_series`).

Access: with the harness's receiver token every request (the clock echo and
the exports) carries ``Authorization: Bearer <token>``; an ``https://``
harness URL is verified against ``ca_file`` (a self-signed receiver
certificate) or the system's trust store.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from tailscope.signals.sampler import COUNTER
from tailscope.support.receiver_token import authorization_header

TIME_PATH = "/v1/time"
METRICS_PATH = "/v1/metrics"
CLOCK_PROBES = 8
CLOCK_INTERVAL_S = 30.0
DEFAULT_EXPORT_INTERVAL_S = 1.0
#: Rows kept while the harness is unreachable; older ones are dropped beyond this (≈ 40 MB).
MAX_BUFFERED_ROWS = 500_000
OFFSET_SERIES = "agent.clock_offset_ns"
RTT_SERIES = "agent.clock_rtt_ns"
HOST_ATTRIBUTE = "host"
_LABELS = re.compile(r'([^{}=,\s]+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ClockEstimate:
    """Harness clock minus agent clock (ns) and the round trip it was measured over (ns)."""

    offset_ns: int
    rtt_ns: int


def _connection(harness_url: str, timeout_s: float, ca_file: str | None) -> http.client.HTTPConnection:
    parts = urlsplit(harness_url)
    if parts.scheme == "https":
        context = ssl.create_default_context(cafile=ca_file)
        return http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout_s, context=context)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)


def _session_trusting(ca_file: str | None):
    """A requests session for the exporter in which ``ca_file`` (when given) decides what to trust:
    plain requests lets ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` override a session's own CA file,
    and the harness's self-signed certificate would then be refused. None without a CA file."""
    if ca_file is None:
        return None
    import requests

    class PinnedSession(requests.Session):
        def merge_environment_settings(self, url, proxies, stream, verify, cert):
            settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
            return {**settings, "verify": ca_file}

    return PinnedSession()


def estimate_clock_offset(harness_url: str, probes: int = CLOCK_PROBES, timeout_s: float = 2.0,
                          token: str | None = None, ca_file: str | None = None) -> ClockEstimate:
    """Offset of the receiver's clock from ours, from its ``/v1/time`` echo (see module docstring).

    Raises OSError / http.client.HTTPException / ValueError when the receiver does not answer
    (ValueError naming the status when it refuses, e.g. 401 for a missing or wrong ``token``).
    """
    connection = _connection(harness_url, timeout_s, ca_file)
    headers = authorization_header(token)
    best: ClockEstimate | None = None
    try:
        for _ in range(probes):
            t0 = time.time_ns()
            connection.request("GET", TIME_PATH, headers=headers)
            response = connection.getresponse()
            body = response.read()
            t2 = time.time_ns()
            if response.status == 401:
                raise ValueError(f"{harness_url}{TIME_PATH} answered HTTP 401: the receiver needs its bearer "
                                 "token (--token or TAILSCOPE_RECEIVER_TOKEN), and this one is missing or wrong")
            if response.status != 200:
                raise ValueError(f"{harness_url}{TIME_PATH} answered HTTP {response.status}")
            t1 = int(json.loads(body)["t_ns"])
            estimate = ClockEstimate(offset_ns=t1 - (t0 + t2) // 2, rtt_ns=t2 - t0)
            if best is None or estimate.rtt_ns < best.rtt_ns:
                best = estimate
    finally:
        connection.close()
    return best


def split_series(series: str) -> tuple[str, dict[str, str]]:
    """``name{k="v",...}`` → (name, {k: v}); a name without labels → (name, {})."""
    brace = series.find("{")
    if brace < 0 or not series.endswith("}"):
        return series, {}
    labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABELS.findall(series[brace + 1:-1])}
    return series[:brace], labels


def build_metrics_data(rows: list[tuple[int, str, float]], meta: dict[str, dict], host: str,
                       start_ns: int, resource: Resource, scope: InstrumentationScope) -> MetricsData:
    """One OTLP export of buffered rows ``(t_ns, series, value)``: one Metric per
    metric name, counters as cumulative monotonic sums, the rest as gauges."""
    points: dict[str, list[NumberDataPoint]] = {}
    for t_ns, series, value in rows:
        name, labels = split_series(series)
        points.setdefault(name, []).append(NumberDataPoint(
            attributes={**labels, HOST_ATTRIBUTE: host}, start_time_unix_nano=start_ns,
            time_unix_nano=t_ns, value=value))
    metrics = []
    for name, data_points in points.items():
        info = meta.get(name) or {}
        if info.get("kind") == COUNTER:
            data = Sum(data_points=data_points, aggregation_temporality=AggregationTemporality.CUMULATIVE,
                       is_monotonic=True)
        else:
            data = Gauge(data_points=data_points)
        metrics.append(Metric(name=name, description=info.get("description", ""), unit=info.get("unit", ""),
                              data=data))
    return MetricsData(resource_metrics=[ResourceMetrics(
        resource=resource, scope_metrics=[ScopeMetrics(scope=scope, metrics=metrics, schema_url="")],
        schema_url="")])


@dataclass
class AgentStats:
    """What the agent sent: exports, points accepted by the harness, points lost."""

    exports: int = 0
    failed_exports: int = 0
    points_sent: int = 0
    points_dropped: int = 0
    clock: ClockEstimate | None = None


class OtlpSink:
    """A :class:`~.sampling_loop.SignalSink` that exports rows to the harness as OTLP metrics.

    Export and clock estimation run on their own thread, so a slow or absent
    harness never delays the sampling schedule; rows wait in a bounded buffer.
    """

    def __init__(self, harness_url: str, host: str | None = None,
                 export_interval_s: float = DEFAULT_EXPORT_INTERVAL_S, timeout_s: float = 5.0,
                 token: str | None = None, ca_file: str | None = None):
        self.harness_url = harness_url.rstrip("/")
        self.host = host or socket.gethostname()
        self.export_interval_s = export_interval_s
        self.timeout_s = timeout_s
        self._token = token
        self._ca_file = ca_file
        self.stats = AgentStats()
        self._exporter = OTLPMetricExporter(endpoint=self.harness_url + METRICS_PATH, timeout=timeout_s,
                                            headers=authorization_header(token), certificate_file=ca_file,
                                            session=_session_trusting(ca_file))
        self._resource = Resource.create({"service.name": "tailscope-agent", "host.name": self.host})
        self._scope = InstrumentationScope("tailscope.agent")
        self._meta: dict[str, dict] = {
            OFFSET_SERIES: {"unit": "ns", "kind": "gauge", "description": "harness clock minus agent clock"},
            RTT_SERIES: {"unit": "ns", "kind": "gauge", "description": "round trip of the clock estimate"},
        }
        self._rows: list[tuple[int, str, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._start_ns = time.time_ns()
        self._next_clock = 0.0
        self._thread = threading.Thread(target=self._export_loop, name="tailscope-agent-export", daemon=True)
        self._thread.start()

    # -- SignalSink

    def write(self, t_ns: int, rows: list[tuple[str, float]]) -> None:
        with self._lock:
            self._rows.extend((t_ns, series, value) for series, value in rows)
            overflow = len(self._rows) - MAX_BUFFERED_ROWS
            if overflow > 0:
                del self._rows[:overflow]
                self.stats.points_dropped += overflow

    def describe(self, metadata: dict) -> None:
        series = metadata.get("series", {})
        with self._lock:
            for name, info in series.items():
                self._meta[split_series(name)[0]] = info

    def failure(self) -> BaseException | None:
        return None  # a harness that is away loses points (counted), it never stops sampling

    # -- lifecycle

    def close(self) -> None:
        """Export what is buffered (one last try) and shut the exporter down."""
        self._stop.set()
        self._thread.join(timeout=self.timeout_s * 2 + 1)
        self._export_once()
        self._exporter.shutdown()

    def _export_loop(self) -> None:
        self._measure_clock()
        while not self._stop.wait(self.export_interval_s):
            if time.monotonic() >= self._next_clock:
                self._measure_clock()
            self._export_once()

    def _measure_clock(self) -> None:
        self._next_clock = time.monotonic() + CLOCK_INTERVAL_S
        try:
            estimate = estimate_clock_offset(self.harness_url, timeout_s=self.timeout_s, token=self._token,
                                             ca_file=self._ca_file)
        except (OSError, http.client.HTTPException, ValueError, KeyError):
            return
        self.stats.clock = estimate
        self.write(time.time_ns(), [(OFFSET_SERIES, float(estimate.offset_ns)), (RTT_SERIES, float(estimate.rtt_ns))])

    def _export_once(self) -> None:
        with self._lock:
            rows, self._rows = self._rows, []
            meta = dict(self._meta)
        if not rows:
            return
        data = build_metrics_data(rows, meta, self.host, self._start_ns, self._resource, self._scope)
        result = self._exporter.export(data, timeout_millis=self.timeout_s * 1000)
        self.stats.exports += 1
        if result == MetricExportResult.SUCCESS:
            self.stats.points_sent += len(rows)
        else:
            self.stats.failed_exports += 1
            self.stats.points_dropped += len(rows)


def run_agent(harness_url: str, config, rate_hz: float, stop_event: threading.Event, host: str | None = None,
              export_interval_s: float = DEFAULT_EXPORT_INTERVAL_S, token: str | None = None,
              ca_file: str | None = None):
    """Sample with ``config`` (a :class:`~.config.SamplerConfig`) until ``stop_event``,
    exporting to the harness (with ``token`` and ``ca_file``: see the module docstring);
    returns ``(SamplingSummary, AgentStats)``.

    Raises OSError / ValueError when the harness's receiver does not answer its
    clock echo at start, or refuses the token (nothing would arrive)."""
    from tailscope.signals.sampling_loop import default_samplers, sample_loop

    estimate_clock_offset(harness_url, token=token, ca_file=ca_file)
    sink = OtlpSink(harness_url, host=host, export_interval_s=export_interval_s, token=token, ca_file=ca_file)
    try:
        summary = sample_loop(default_samplers(config.pid, config, rate_hz), rate_hz, stop_event, sink, config.pid)
    finally:
        sink.close()
    return summary, sink.stats
