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

Scraping is off the sampling loop's critical path: each endpoint is scraped by
its own daemon thread at the loop's rate (absolute deadlines; a scrape that
overruns the next deadline skips to the one ahead, so one endpoint has one
scrape at a time), and ``read()`` only hands over the scrapes completed since
the last read, as :class:`~.sampler.Batch` items, never waiting on the
network. A busy server that answers late delays only its own next scrape; the
host, process, cgroup and PSI samplers keep their cadence. Each scrape's rows
are stamped with its **answer time** (epoch ns when the page's last byte
arrived): a gauge describes the server when it rendered the page, and a busy
server renders it late, just before it sends it; the request's start would
date a page answered 2 s late 2 s too early. A failed scrape's ``prom.up`` 0
is stamped when it failed (for a timeout, at its deadline).

The timeout is a deadline on the whole fetch (connect, request, answer, body),
not on each socket operation: a scrape still running when it passes is a
failed scrape (``prom.up`` 0, its page dropped). Its default,
:data:`DEFAULT_SCRAPE_TIMEOUT_S` = 2 s, is long because a late answer is still
a true reading and waiting for it stalls nothing else.
"""

from __future__ import annotations

import collections
import http.client
import math
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from tailscope.signals.sampler import COUNTER, DEFAULT_RATE_HZ, GAUGE, Batch, SeriesMeta

#: Longest a scrape (connect, request, the whole answer) may take, in seconds, before it counts as failed.
DEFAULT_SCRAPE_TIMEOUT_S = 2.0
#: Completed scrapes kept per sampler until the loop reads them (older ones are dropped; ≈ 100 s at 10 Hz).
MAX_PENDING_SCRAPES = 1000
_READ_CHUNK = 65536
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
    """One /metrics URL with a kept-alive HTTP connection, used by one thread at a time."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url
        self.instance = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
        self._path = (parts.path or "/metrics") + (f"?{parts.query}" if parts.query else "")
        self._connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self._host, self._port = parts.hostname, parts.port
        self._connection: http.client.HTTPConnection | None = None
        self._interrupted = False

    def fetch(self, deadline: float) -> str:
        """The page's text, all of it received before ``deadline`` (``time.monotonic()`` s).

        Before each step (connect, request, status and headers, each body read)
        the socket's timeout is set to the time left, and a page whose last
        byte came after the deadline is refused: TimeoutError. Raises OSError /
        http.client.HTTPException / ValueError on failure; a kept-alive
        connection the server closed is retried once on a new one, within the
        same deadline.
        """
        for attempt in (0, 1):
            reused = self._connection is not None
            if self._connection is None:
                self._connection = self._connection_class(self._host, self._port, timeout=_time_left(deadline))
            connection = self._connection
            try:
                connection.timeout = _time_left(deadline)  # connect() reads it
                if connection.sock is not None:
                    connection.sock.settimeout(_time_left(deadline))
                connection.request("GET", self._path, headers={"Accept": _ACCEPT})
                connection.sock.settimeout(_time_left(deadline))
                response = connection.getresponse()
                body = _read_body(response, connection, deadline)
                _time_left(deadline)  # headers trickled past the deadline: still a failed scrape
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt or not reused or self._interrupted or time.monotonic() >= deadline:
                    raise
                continue
            if response.status != 200:
                raise ValueError(f"{self.url} answered HTTP {response.status}")
            return body.decode("utf-8", "replace")
        raise AssertionError("unreachable")

    def interrupt(self) -> None:
        """Wake a fetch blocked on this endpoint's socket (from another thread): it fails at once."""
        self._interrupted = True
        connection = self._connection
        sock = connection.sock if connection is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _time_left(deadline: float) -> float:
    """Seconds until ``deadline`` (monotonic); TimeoutError once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("scrape deadline passed")
    return left


def _read_body(response: http.client.HTTPResponse, connection: http.client.HTTPConnection, deadline: float) -> bytes:
    """The whole body, one socket read at a time, each given only the time left before ``deadline``."""
    chunks = []
    while True:
        if connection.sock is not None:
            connection.sock.settimeout(_time_left(deadline))
        chunk = response.read1(_READ_CHUNK)
        if not chunk:
            break
        chunks.append(chunk)
    chunks.append(response.read())  # b"" at the end; marks the response done so the connection is reused
    return b"".join(chunks)


class PrometheusSampler:
    """Scrapes each configured ``/metrics`` URL on its own thread at ``rate_hz`` (see module docstring).

    ``probe()`` scrapes every endpoint once, synchronously (its readings are the
    first ones ``read()`` returns); the first ``read()`` starts the scraping
    threads and ``close()`` stops and joins them, waking a scrape blocked on a
    hung server. ``timeout_s`` is the whole-scrape deadline in seconds.
    """

    name = "prometheus"

    def __init__(self, urls: Iterable[str], timeout_s: float = DEFAULT_SCRAPE_TIMEOUT_S,
                 rate_hz: float = DEFAULT_RATE_HZ):
        if timeout_s <= 0 or rate_hz <= 0:
            raise ValueError(f"timeout_s and rate_hz must be positive, got {timeout_s}, {rate_hz}")
        self.urls = list(urls)
        self.timeout_s = timeout_s
        self.rate_hz = rate_hz
        self.series_version = 0
        self._endpoints: list[_Endpoint] = []
        self._series: dict[str, SeriesMeta] = {}
        self._lock = threading.Lock()  # guards _series, series_version and _completed
        self._completed: collections.deque[Batch] = collections.deque(maxlen=MAX_PENDING_SCRAPES)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def probe(self) -> str | None:
        if not self.urls:
            return "no Prometheus endpoint configured (scenario signals.prometheus)"
        try:
            self._endpoints = [_Endpoint(url) for url in self.urls]
        except ValueError as exc:
            return str(exc)
        errors = []
        for endpoint in self._endpoints:
            batch, error = self._scrape(endpoint)
            with self._lock:
                self._completed.append(batch)
            if error is not None:
                errors.append(f"{endpoint.url}: {error}")
        if len(errors) == len(self._endpoints):
            return "no Prometheus endpoint answered (" + "; ".join(errors) + ")"
        return None

    def series(self) -> dict[str, SeriesMeta]:
        out = {}
        for endpoint in self._endpoints:
            suffix = self._suffix(endpoint)
            out[f"prom.up{suffix}"] = SeriesMeta("bool", GAUGE, f"1 when the last scrape of {endpoint.url} succeeded")
            out[f"prom.scrape_duration_s{suffix}"] = SeriesMeta("s", GAUGE, f"time to fetch and parse {endpoint.url}")
        with self._lock:
            out.update(self._series)
        return out

    def read(self, now_ns: int) -> list[Batch]:
        """The scrapes completed since the last read, oldest first, each at its own time; never blocks
        on the network (the first call starts the scraping threads)."""
        if not self._threads and not self._stop.is_set():
            self._threads = [threading.Thread(target=self._scrape_forever, args=(endpoint,), daemon=True,
                                              name=f"tailscope-scrape-{endpoint.instance}")
                             for endpoint in self._endpoints]
            for thread in self._threads:
                thread.start()
        with self._lock:
            batches = list(self._completed)
            self._completed.clear()
        return batches

    def scrape_all(self) -> list[Batch]:
        """Scrape every endpoint once now, on the calling thread (after ``probe()``, while no
        scraping thread runs: a one-shot reading); one batch per endpoint."""
        if self._threads:
            raise RuntimeError("the scraping threads own the endpoints; read() their scrapes instead")
        return [self._scrape(endpoint)[0] for endpoint in self._endpoints]

    def close(self) -> None:
        """Stop the scraping threads and join them (a blocked scrape is woken); close the connections."""
        self._stop.set()
        for endpoint in self._endpoints:
            endpoint.interrupt()
        for thread in self._threads:
            thread.join(timeout=self.timeout_s + 1.0)
        if not any(thread.is_alive() for thread in self._threads):
            for endpoint in self._endpoints:
                endpoint.close()

    def _scrape_forever(self, endpoint: _Endpoint) -> None:
        """Scrape ``endpoint`` at absolute deadlines ``start + k / rate_hz`` (the probe's scrape was the
        first) until closed; a scrape that overruns the next deadline skips to the one ahead."""
        period_ns = int(1e9 / self.rate_hz)
        start = time.monotonic_ns()
        k = 1
        while not self._stop.wait(max(0.0, (start + k * period_ns - time.monotonic_ns()) / 1e9)):
            batch, _ = self._scrape(endpoint)
            if self._stop.is_set():
                return  # a scrape cut short by close() says nothing about the server
            with self._lock:
                self._completed.append(batch)
            k = max(k + 1, (time.monotonic_ns() - start) // period_ns + 1)

    def _scrape(self, endpoint: _Endpoint) -> tuple[Batch, str | None]:
        """One scrape of ``endpoint``: its rows stamped with the answer time, or ``prom.up`` 0 stamped
        when it failed, and the error (None on success)."""
        suffix = self._suffix(endpoint)
        started = time.perf_counter()
        try:
            text = endpoint.fetch(time.monotonic() + self.timeout_s)
            answered_ns = time.time_ns()
            samples = parse_exposition(text)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            return Batch(time.time_ns(), [(f"prom.up{suffix}", 0.0)]), str(exc) or type(exc).__name__
        rows = self._store(endpoint, samples)
        rows.append((f"prom.up{suffix}", 1.0))
        rows.append((f"prom.scrape_duration_s{suffix}", time.perf_counter() - started))
        return Batch(answered_ns, rows), None

    def _suffix(self, endpoint: _Endpoint) -> str:
        return f'{{instance="{endpoint.instance}"}}' if self._instance_label(endpoint) else ""

    def _instance_label(self, endpoint: _Endpoint) -> str | None:
        return endpoint.instance if len(self._endpoints) > 1 else None

    def _store(self, endpoint: _Endpoint, samples: list[PromSample]) -> list[tuple[str, float]]:
        """Rows of one scrape; series seen for the first time are described (series_version += 1)."""
        instance = self._instance_label(endpoint)
        rows = [(series_name(sample, instance), sample.value) for sample in samples]
        new = [(name, sample) for (name, _), sample in zip(rows, samples) if name not in self._series]
        if new:
            with self._lock:
                for name, sample in new:
                    description = sample.help or f"{sample.name} from {endpoint.url}"
                    self._series.setdefault(name, SeriesMeta(sample.unit, sample.kind, description))
                self.series_version += 1
        return rows
