"""Scraping a target's Prometheus ``/metrics`` endpoints at the sampling rate.

Inference servers publish their queue and batch state there (Triton's
``nv_inference_pending_request_count``, vLLM's ``vllm:num_requests_waiting``).
Each scrape parses the text exposition format (version 0.0.4, and the
OpenMetrics text that the same parser accepts: ``# UNIT``, ``# EOF``,
``_created`` samples) and stores:

* gauges, untyped metrics and summary quantiles as **gauges**, as read;
* counters (``x`` or ``x_total``), histogram and summary ``_sum``/``_count``
  as **counters**, cumulative, so rates are derived at analysis time;
* histogram ``_bucket`` samples and every ``*_created`` sample (creation
  timestamps) are not stored (one series per bucket would dwarf everything
  else; ``_sum``/``_count`` give the mean).

Series are ``prom.<metric>{label="value",...}`` (labels sorted; an
``instance="host:port"`` label is added when several endpoints are scraped),
plus ``prom.up`` (1 when the last scrape succeeded) and
``prom.scrape_duration_s`` per endpoint. Units come from ``# UNIT`` or the
metric's suffix (``_seconds`` → s, ``_bytes`` → bytes, ...), else ``count``.
A runtime's GC metrics scraped this way (``jvm_gc_duration_seconds``, ``python_gc_collections_total``,
``go_gc_duration_seconds``, …: the list in docs/receiver.md) are read by the GC detector from these
``_sum``/``_count``/``_total`` series (``analyzers/inputs/runtime_gc.py``).
A scrape costs one HTTP GET over a kept-alive connection plus a parse that is
linear in the page size (~2 µs per sample line).
"""

from __future__ import annotations

import http.client
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from tailscope.signals.sampler import COUNTER, GAUGE, SeriesMeta

#: Longest a scrape may take, in seconds, before it counts as failed.
DEFAULT_SCRAPE_TIMEOUT_S = 0.5
_ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
#: Sample-name suffixes never stored (histogram buckets, creation timestamps).
_NEVER_STORED = ("_bucket", "_created")
_UNIT_SUFFIXES = (
    ("_seconds", "s"), ("_milliseconds", "ms"), ("_microseconds", "us"), ("_us", "us"), ("_ms", "ms"),
    ("_bytes", "bytes"), ("_ratio", "ratio"), ("_percent", "%"), ("_perc", "ratio"), ("_celsius", "degC"),
    ("_watts", "W"), ("_joules", "J"),
)


@dataclass(frozen=True)
class PromSample:
    """One sample line: metric name as written, labels, value, and the kind it is stored as."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    kind: str  # "gauge" or "counter"
    unit: str
    help: str


def _unescape(value: str) -> str:
    return value.replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\x00", "\\")


def _parse_labels(text: str, start: int) -> tuple[tuple[tuple[str, str], ...], int]:
    """Labels from ``text[start]`` == "{" to the matching "}"; returns (labels, index after "}")."""
    labels = []
    i = start + 1
    while True:
        while i < len(text) and text[i] in " ,":
            i += 1
        if text[i] == "}":
            return tuple(sorted(labels)), i + 1
        eq = text.index("=", i)
        key = text[i:eq].strip()
        quote = text.index('"', eq)
        j = quote + 1
        while text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        labels.append((key, _unescape(text[quote + 1:j])))
        i = j + 1


def _parse_value(text: str) -> float:
    lowered = text.lower()
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    return float(text)


def _unit_from_name(name: str) -> str:
    base = name
    for suffix in ("_total", "_sum", "_count"):
        if base.endswith(suffix):
            if suffix == "_count":
                return "count"
            base = base[: -len(suffix)]
            break
    for suffix, unit in _UNIT_SUFFIXES:
        if base.endswith(suffix):
            return unit
    return "count"


def _family_of(name: str, types: dict[str, str]) -> tuple[str, str]:
    """(family name, family type) of a sample name (``x_sum`` belongs to histogram ``x``)."""
    if name in types:
        return name, types[name]
    for suffix in ("_total", "_created", "_sum", "_count", "_bucket", "_gsum", "_gcount"):
        if name.endswith(suffix) and name[: -len(suffix)] in types:
            return name[: -len(suffix)], types[name[: -len(suffix)]]
    return name, "untyped"


def _stored_kind(name: str, family: str, family_type: str) -> str | None:
    """How a sample is stored: "gauge", "counter", or None (not stored)."""
    suffix = name[len(family):]
    if suffix in ("_created", "_bucket", "_gsum", "_gcount") or name.endswith("_created"):
        return None  # prometheus_client's 0.0.4 output also exposes x_created as its own gauge family
    if family_type == "counter":
        return COUNTER
    if family_type in ("histogram", "summary"):
        return COUNTER if suffix in ("_sum", "_count") else GAUGE
    return GAUGE


def parse_exposition(text: str) -> list[PromSample]:
    """Parse a Prometheus text exposition page into stored samples (see module docstring).

    Malformed sample lines are skipped (one bad line must not hide the rest);
    samples with a non-finite value are skipped.
    """
    types: dict[str, str] = {}
    units: dict[str, str] = {}
    helps: dict[str, str] = {}
    samples = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] in ("TYPE", "UNIT", "HELP"):
                {"TYPE": types, "UNIT": units, "HELP": helps}[parts[1]][parts[2]] = parts[3].strip()
            continue
        brace = line.find("{")
        space = line.find(" ")
        end_of_name = brace if brace != -1 and (space == -1 or brace < space) else space
        if line[:end_of_name].endswith(_NEVER_STORED):  # cheap skip before parsing labels
            continue
        try:
            if brace != -1 and (space == -1 or brace < space):
                name = line[:brace]
                labels, end = _parse_labels(line, brace)
                rest = line[end:].split()
            else:
                name, *rest = line.split()
                labels = ()
            value = _parse_value(rest[0])
        except (ValueError, IndexError):
            continue
        if not math.isfinite(value):
            continue
        family, family_type = _family_of(name, types)
        kind = _stored_kind(name, family, family_type)
        if kind is None:
            continue
        unit = "count" if name.endswith("_count") else units.get(family) or _unit_from_name(name)
        samples.append(PromSample(name, labels, value, kind, unit, helps.get(family, "")))
    return samples


def series_name(sample: PromSample, instance: str | None) -> str:
    """``prom.<name>{labels}`` with ``instance`` added when given."""
    labels = dict(sample.labels)
    if instance is not None:
        labels["instance"] = instance
    if not labels:
        return f"prom.{sample.name}"
    inner = ",".join(f'{k}="{labels[k]}"' for k in sorted(labels))
    return f"prom.{sample.name}{{{inner}}}"


class _Endpoint:
    """One /metrics URL with a kept-alive HTTP connection."""

    def __init__(self, url: str, timeout_s: float):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url
        self.instance = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
        self._path = (parts.path or "/metrics") + (f"?{parts.query}" if parts.query else "")
        self._connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self._host, self._port = parts.hostname, parts.port
        self._timeout_s = timeout_s
        self._connection: http.client.HTTPConnection | None = None

    def fetch(self) -> str:
        """The page's text; raises OSError / http.client.HTTPException / ValueError on failure."""
        for attempt in (0, 1):  # a kept-alive connection the server closed is retried once
            if self._connection is None:
                self._connection = self._connection_class(self._host, self._port, timeout=self._timeout_s)
            try:
                self._connection.request("GET", self._path, headers={"Accept": _ACCEPT})
                response = self._connection.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt:
                    raise
                continue
            if response.status != 200:
                raise ValueError(f"{self.url} answered HTTP {response.status}")
            return body.decode("utf-8", "replace")
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class PrometheusSampler:
    """Scrapes each configured ``/metrics`` URL once per tick (see module docstring)."""

    name = "prometheus"

    def __init__(self, urls: Iterable[str], timeout_s: float = DEFAULT_SCRAPE_TIMEOUT_S):
        self.urls = list(urls)
        self.timeout_s = timeout_s
        self.series_version = 0
        self._endpoints: list[_Endpoint] = []
        self._series: dict[str, SeriesMeta] = {}

    def probe(self) -> str | None:
        if not self.urls:
            return "no Prometheus endpoint configured (scenario signals.prometheus)"
        try:
            self._endpoints = [_Endpoint(url, self.timeout_s) for url in self.urls]
        except ValueError as exc:
            return str(exc)
        errors = []
        for endpoint in self._endpoints:
            try:
                self._store(endpoint, parse_exposition(endpoint.fetch()))
            except (OSError, http.client.HTTPException, ValueError) as exc:
                errors.append(f"{endpoint.url}: {exc}")
        if len(errors) == len(self._endpoints):
            return "no Prometheus endpoint answered (" + "; ".join(errors) + ")"
        return None

    def series(self) -> dict[str, SeriesMeta]:
        out = {}
        for endpoint in self._endpoints:
            instance = self._instance_label(endpoint)
            suffix = f'{{instance="{endpoint.instance}"}}' if instance else ""
            out[f"prom.up{suffix}"] = SeriesMeta("bool", GAUGE, f"1 when the last scrape of {endpoint.url} succeeded")
            out[f"prom.scrape_duration_s{suffix}"] = SeriesMeta("s", GAUGE, f"time to fetch and parse {endpoint.url}")
        out.update(self._series)
        return out

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        out = []
        for endpoint in self._endpoints:
            suffix = f'{{instance="{endpoint.instance}"}}' if self._instance_label(endpoint) else ""
            started = time.perf_counter()
            try:
                samples = parse_exposition(endpoint.fetch())
            except (OSError, http.client.HTTPException, ValueError):
                out.append((f"prom.up{suffix}", 0.0))
                continue
            out.extend(self._store(endpoint, samples))
            out.append((f"prom.up{suffix}", 1.0))
            out.append((f"prom.scrape_duration_s{suffix}", time.perf_counter() - started))
        return out

    def _instance_label(self, endpoint: _Endpoint) -> str | None:
        return endpoint.instance if len(self._endpoints) > 1 else None

    def _store(self, endpoint: _Endpoint, samples: list[PromSample]) -> list[tuple[str, float]]:
        """Rows of one scrape; series seen for the first time are described (series_version += 1)."""
        instance = self._instance_label(endpoint)
        rows = []
        grew = False
        for sample in samples:
            name = series_name(sample, instance)
            if name not in self._series:
                description = sample.help or f"{sample.name} from {endpoint.url}"
                self._series[name] = SeriesMeta(sample.unit, sample.kind, description)
                grew = True
            rows.append((name, sample.value))
        if grew:
            self.series_version += 1
        return rows
