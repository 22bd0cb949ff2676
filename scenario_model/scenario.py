"""Scenario files: YAML → a validated :class:`Scenario` (docs/scenario-format.md).

Every problem is reported before any load is sent, as one
:class:`ScenarioError` whose message names the file, the line and the field::

    scenarios/bad.yaml:14: classes[1].weight: must be > 0, got -2
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from tailscope.loadgen.llm_fields import LLM_CLASS_FIELDS, openai_class_fields
from tailscope.loadgen.spec import (
    ArrivalSpec,
    LoadPlan,
    PayloadSpec,
    RequestClass,
    SizeSpec,
    SpecError,
)
from tailscope.scenario_model.sections import SECTION_PARSERS
from tailscope.scenario_model.yamlpos import Path, YamlSyntaxError, format_path, line_of, load_located
from tailscope.support.units import parse_duration_s


class ScenarioError(ValueError):
    """A scenario that cannot run. ``str()`` is ``file:line: field: message``."""

    def __init__(self, file: str, line: int, field_path: str, message: str):
        super().__init__(f"{file}:{line}: {field_path}: {message}")
        self.file = file
        self.line = line
        self.field = field_path
        self.message = message


TOP_LEVEL_FIELDS = {
    "name", "description", "target", "duration", "max_requests", "seed", "timeout",
    "max_in_flight", "arrival", "classes", "slo", "signals",
    "in_flight_policy", "trace_sample_rate", "tracing",
}
ARRIVAL_FIELDS = {"process", "rate", "burstiness", "users", "think_time", "profile", "concurrency", "max_concurrency",
                  "file", "format", "unit", "speed", "loop", "sessions"}
CLASS_FIELDS = {"name", "weight", "method", "path", "headers", "payload", "stream"} | LLM_CLASS_FIELDS
PAYLOAD_FIELDS = {"kind", "body", "size", "field", "file", "order"}
SIZE_FIELDS = {"dist", "value", "min", "max", "median", "sigma", "file"}
SIGNALS_FIELDS = {"rate", "prometheus", "process_tree"}
TRACING_FIELDS = {"late_span_wait", "export_interval"}
#: A replayed LLM trace's arrival fields (trace_fields.TRACE_FIELDS; only with ``process: replay``).
REPLAY_ONLY_FIELDS = frozenset({"slice", "max_rate", "block_tokens"})
ARRIVAL_FIELDS |= REPLAY_ONLY_FIELDS

@dataclass
class Scenario:
    """A validated scenario. ``raw`` is the parsed YAML, stored in the manifest."""

    path: str
    name: str
    target: str | None
    duration_s: float
    max_requests: int
    seed: int
    timeout_s: float
    max_in_flight: int
    arrival: ArrivalSpec
    classes: tuple[RequestClass, ...]
    slos: list[str]
    signal_rate_hz: float
    raw: dict = field(default_factory=dict)
    #: signals.prometheus: /metrics URLs to scrape; a path ("/metrics") is relative to the target.
    signal_prometheus: tuple[str, ...] = ()
    #: signals.process_tree: sum the target's descendants into its process signals.
    signal_process_tree: bool = True
    #: Optional sections parsed by the parts that own them (see scenario_sections).
    sections: dict[str, Any] = field(default_factory=dict)
    #: When max_in_flight is reached: "wait" (the wait counts in latency) or "drop".
    in_flight_policy: str = "wait"
    #: Head sampling: share of requests sent with the traceparent's sampled flag.
    trace_sample_rate: float = 1.0
    #: tracing.late_span_wait / tracing.export_interval in s (absent: the SDK defaults,
    #: tailscope.conductor.late_spans): ``{"late_span_wait_s", "export_interval_s"}``.
    tracing: dict = field(default_factory=dict)

    def load_plan(self, target: str | None = None, duration_s: float | None = None) -> LoadPlan:
        """The load plan, with the command line's ``--target``/``--duration`` applied."""
        return LoadPlan(
            target=(target or self.target or "").rstrip("/"),
            duration_s=duration_s or self.duration_s,
            arrival=self.arrival,
            classes=self.classes,
            max_requests=self.max_requests,
            seed=self.seed,
            timeout_s=self.timeout_s,
            max_in_flight=self.max_in_flight,
            in_flight_policy=self.in_flight_policy,
            trace_sample_rate=self.trace_sample_rate,
        )


def load_scenario(path: str | os.PathLike, *, target_override: str | None = None,
                  require_target: bool = True) -> Scenario:
    """Read and validate a scenario file. Raises :class:`ScenarioError`."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ScenarioError(path, 0, "(file)", f"cannot read scenario: {exc.strerror}") from exc
    return parse_scenario(text, path, target_override=target_override, require_target=require_target)


def parse_scenario(text: str, file: str = "<scenario>", *, target_override: str | None = None,
                   require_target: bool = True) -> Scenario:
    """Validate scenario YAML ``text``; ``file`` is used in error messages.

    ``require_target=False`` accepts a scenario without a target (the demo and
    the lab start the target themselves)."""
    try:
        data, lines = load_located(text)
    except YamlSyntaxError as exc:
        raise ScenarioError(file, exc.line, "(syntax)", exc.message) from exc
    return FieldReader(file, lines, require_target).scenario(data, target_override)


class FieldReader:
    """Walks the parsed YAML, converting values and raising located errors.

    Section parsers (tailscope.scenario_model.sections) receive one and use its
    ``mapping``/``number``/``string``/``duration``/``build``/``fail`` so that
    their errors name the file, line and field like every other."""

    def __init__(self, file: str, lines: dict[Path, int], require_target: bool = True):
        self.file = file
        self.lines = lines
        self.require_target = require_target

    def fail(self, path: Path, message: str) -> ScenarioError:
        return ScenarioError(self.file, line_of(self.lines, path), format_path(path), message)

    # -- typed field access ---------------------------------------------------
    def mapping(self, value: Any, path: Path, allowed: set[str]) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping, got {_type_name(value)}")
        for key in value:
            if key not in allowed:
                raise self.fail(path + (key,), f"unknown field {key!r}; expected one of "
                                f"{', '.join(sorted(allowed))}")
        return value

    def number(self, data: dict, path: Path, key: str, default=None, *, integer=False):
        if key not in data:
            return default
        value = data[key]
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            kind = "an integer" if integer else "a number"
            raise self.fail(path + (key,), f"expected {kind}, got {_type_name(value)} {value!r}")
        return value

    def string(self, data: dict, path: Path, key: str, default=None) -> str | None:
        if key not in data:
            return default
        value = data[key]
        if not isinstance(value, str):
            raise self.fail(path + (key,), f"expected a string, got {_type_name(value)} {value!r}")
        return value

    def duration(self, data: dict, path: Path, key: str, default: float | None) -> float | None:
        if key not in data:
            return default
        try:
            seconds = parse_duration_s(data[key])
        except ValueError as exc:
            raise self.fail(path + (key,), str(exc)) from None
        if seconds <= 0 and key == "duration":
            raise self.fail(path + (key,), f"must be > 0, got {data[key]!r}")
        return seconds

    def build(self, at: Path, factory: Callable, /, **kwargs):
        """Call a spec constructor; map its SpecError to the field's line."""
        try:
            return factory(**kwargs)
        except SpecError as exc:
            key = exc.field.split(".")[0]
            yaml_key = {"think_time_s": "think_time"}.get(key, key)
            raise self.fail(at + (yaml_key,), exc.message) from None

    # -- sections ---------------------------------------------------------------
    def scenario(self, data: Any, target_override: str | None) -> Scenario:
        if data is None:
            raise self.fail((), "the scenario file is empty")
        top = self.mapping(data, (), TOP_LEVEL_FIELDS | set(SECTION_PARSERS))
        target = self.target(top, target_override)
        duration_s = self.duration(top, (), "duration", None)
        if duration_s is None:
            raise self.fail((), "duration: missing (e.g. duration: 60s); every run is bounded")
        max_requests = self.number(top, (), "max_requests", 1_000_000, integer=True)
        if max_requests < 1:
            raise self.fail(("max_requests",), f"must be >= 1, got {max_requests}")
        timeout_s = self.duration(top, (), "timeout", 10.0)
        arrival = self.arrival(top.get("arrival"), ("arrival",), duration_s)
        classes = self.classes(top.get("classes"), ("classes",))
        if arrival.log is not None and arrival.log.requests is not None:
            from tailscope.scenario_model.trace_fields import trace_classes
            classes = trace_classes(self, arrival, classes, top.get("classes"))
        if arrival.sessions is not None:
            self.session_classes(arrival, classes)
        slos = self.slos(top.get("slo", []), ("slo",))
        signals = self.mapping(top.get("signals", {}) or {}, ("signals",), SIGNALS_FIELDS)
        signal_rate = self.number(signals, ("signals",), "rate", 10.0)
        if not 0.1 <= signal_rate <= 1000:
            raise self.fail(("signals", "rate"), f"must be between 0.1 and 1000 Hz, got {signal_rate}")
        max_in_flight = self.number(top, (), "max_in_flight", 1000, integer=True)
        if max_in_flight < 1:
            raise self.fail(("max_in_flight",), f"must be >= 1, got {max_in_flight}")
        in_flight_policy = self.string(top, (), "in_flight_policy", "wait")
        if in_flight_policy not in ("wait", "drop"):
            raise self.fail(("in_flight_policy",), f"expected wait or drop, got {in_flight_policy!r}")
        trace_sample_rate = self.number(top, (), "trace_sample_rate", 1.0)
        if not 0.0 <= trace_sample_rate <= 1.0:
            raise self.fail(("trace_sample_rate",), f"must be between 0 and 1, got {trace_sample_rate}")
        tracing = self.tracing(top.get("tracing", {}) or {}, ("tracing",))
        name = self.string(top, (), "name", None) or os.path.splitext(os.path.basename(self.file))[0]
        sections = {key: SECTION_PARSERS[key](top[key], (key,), self)
                    for key in top if key in SECTION_PARSERS}
        return Scenario(
            path=self.file,
            name=name,
            target=target,
            duration_s=duration_s,
            max_requests=max_requests,
            seed=self.number(top, (), "seed", 1, integer=True),
            timeout_s=timeout_s,
            max_in_flight=max_in_flight,
            arrival=arrival,
            classes=classes,
            slos=slos,
            signal_rate_hz=float(signal_rate),
            signal_prometheus=self.prometheus_urls(signals.get("prometheus"), ("signals", "prometheus")),
            signal_process_tree=self.boolean(signals, ("signals",), "process_tree", True),
            raw=data,
            sections=sections,
            in_flight_policy=in_flight_policy,
            trace_sample_rate=float(trace_sample_rate),
            tracing=tracing,
        )

    def tracing(self, value: Any, path: Path) -> dict:
        """The ``tracing`` section: how long to wait for late spans and the target's export interval."""
        data = self.mapping(value, path, TRACING_FIELDS)
        out = {}
        for key, name in (("late_span_wait", "late_span_wait_s"), ("export_interval", "export_interval_s")):
            seconds = self.duration(data, path, key, None)
            if seconds is not None and not 0 <= seconds <= 600:
                raise self.fail(path + (key,), f"must be between 0s and 10m, got {data[key]!r}")
            if seconds is not None:
                out[name] = seconds
        return out

    def prometheus_urls(self, value: Any, path: Path) -> tuple[str, ...]:
        """signals.prometheus: true (= "/metrics" of the target), a URL or path, or a list of them."""
        if value is None or value is False:
            return ()
        if value is True:
            return ("/metrics",)
        items = value if isinstance(value, list) else [value]
        urls = []
        for index, item in enumerate(items):
            at = path + ((index,) if isinstance(value, list) else ())
            if not isinstance(item, str) or not item.startswith(("http://", "https://", "/")):
                raise self.fail(at, f"expected an http(s) URL or a path such as /metrics, got {item!r}")
            urls.append(item)
        return tuple(urls)

    def boolean(self, data: dict, path: Path, key: str, default: bool) -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(path + (key,), f"expected true or false, got {_type_name(value)}")
        return value

    def target(self, top: dict, override: str | None) -> str | None:
        value = override if override else self.string(top, (), "target", None)
        if not value and not self.require_target:
            return None
        if not value:
            raise self.fail((), "target: missing; give `target: http://127.0.0.1:PORT` "
                            "in the scenario or --target on the command line")
        path = () if override else ("target",)
        parsed = urlparse(value)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise self.fail(path, f"expected an http(s) URL such as http://127.0.0.1:8000, got {value!r}")
        return value.rstrip("/")

    def arrival(self, value: Any, path: Path, duration_s: float | None = None) -> ArrivalSpec:
        from tailscope.scenario_model.load_fields import REPLAY_FIELDS, parse_arrival_log, parse_profile, parse_sessions

        if value is None:
            raise self.fail((), "arrival: missing (e.g. arrival: {process: poisson, rate: 50})")
        data = self.mapping(value, path, ARRIVAL_FIELDS)
        process = self.string(data, path, "process", "poisson")
        sessions = None
        if data.get("sessions") is not None:
            concurrency, rate, sessions = parse_sessions(self, data["sessions"], path + ("sessions",), data)
            process = "closed" if concurrency is not None else process
        else:
            concurrency = self.concurrency_mode(data, path, process)
            rate = self.number(data, path, "rate", None)
        if concurrency is not None:
            process = "closed"
        profile = (parse_profile(self, data["profile"], path + ("profile",), rate, duration_s)
                   if data.get("profile") is not None else None)
        if profile is not None and rate is None:
            rate = profile.peak_rate
        if rate is None and process not in ("closed", "replay"):
            raise self.fail(path, "rate: missing (requests per second)")
        if process != "replay":
            for key in sorted(REPLAY_FIELDS & set(data)):
                raise self.fail(path + (key,), "only for `process: replay`")
        for key in sorted(REPLAY_ONLY_FIELDS & set(data) if process != "replay" else ()):
            raise self.fail(path + (key,), "only for `process: replay`")
        speed = self.number(data, path, "speed", 1.0)
        loop = data.get("loop", False)
        if not isinstance(loop, bool):
            raise self.fail(path + ("loop",), f"expected true or false, got {loop!r}")
        return self.build(
            path,
            ArrivalSpec,
            process=process,
            rate=float(rate if rate is not None else 1.0),
            burstiness=float(self.number(data, path, "burstiness", 1.0)),
            users=concurrency if concurrency is not None else self.number(data, path, "users", 1, integer=True),
            think_time_s=self.duration(data, path, "think_time", 0.0),
            profile=profile,
            log=parse_arrival_log(self, data, path) if process == "replay" else None,
            speed=float(speed),
            loop=loop,
            max_concurrency=self.number(data, path, "max_concurrency", None, integer=True),
            max_rate=self.number(data, path, "max_rate", None),
            sessions=sessions,
        )

    def concurrency_mode(self, data: dict, path: Path, process: str) -> int | None:
        """``arrival.concurrency: N``: concurrency mode, N requests kept in flight (a closed
        loop of N users with no think time); None when the field is absent."""
        concurrency = self.number(data, path, "concurrency", None, integer=True)
        if concurrency is None:
            return None
        at = path + ("concurrency",)
        if "process" in data and process != "closed":
            raise self.fail(at, f"concurrency mode is a closed loop, not {process!r}; "
                            "to cap an open-loop schedule use max_concurrency")
        for key in ("users", "think_time", "rate", "profile", "max_concurrency"):
            if key in data:
                raise self.fail(path + (key,), f"not with concurrency: concurrency mode keeps {concurrency} "
                                "requests in flight, each sent as soon as one ends")
        if concurrency < 1:
            raise self.fail(at, f"must be >= 1, got {concurrency}")
        return concurrency

    def session_classes(self, arrival: ArrivalSpec, classes: tuple[RequestClass, ...]) -> None:
        """Multi-turn sessions need chat classes (the history is messages) and a turn count
        for every class without a dataset (a dataset conversation brings its own)."""
        for index, cls in enumerate(classes):
            if cls.api != "openai-chat":
                raise self.fail(("classes", index, "api" if cls.llm is not None else "name"),
                                "arrival.sessions needs openai-chat classes (a session's history is chat messages)")
        synthetic = [i for i, cls in enumerate(classes) if cls.llm.dataset is None]
        if synthetic and arrival.sessions.turns is None:
            raise self.fail(("arrival", "sessions"), f"turns: missing (class {classes[synthetic[0]].name!r} "
                            "has no dataset to take its turns from), e.g. turns: {dist: uniform, min: 2, max: 6}")
        if not synthetic and arrival.sessions.turns is not None:
            raise self.fail(("arrival", "sessions", "turns"), "not used: every class replays dataset "
                            "conversations, each session one conversation with its own user turns")

    def classes(self, value: Any, path: Path) -> tuple[RequestClass, ...]:
        if value is None:
            raise self.fail((), "classes: missing (at least one request class)")
        if not isinstance(value, list) or not value:
            raise self.fail(path, "expected a non-empty list of request classes")
        classes = tuple(self.request_class(item, path + (i,)) for i, item in enumerate(value))
        names = [c.name for c in classes]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise self.fail(path + (i, "name"), f"duplicate class name {name!r}")
        return classes

    def request_class(self, value: Any, path: Path) -> RequestClass:
        data = self.mapping(value, path, CLASS_FIELDS)
        name = self.string(data, path, "name", None)
        if not name:
            raise self.fail(path, "name: missing")
        headers = data.get("headers", {}) or {}
        if not isinstance(headers, dict) or not all(isinstance(v, (str, int, float)) for v in headers.values()):
            raise self.fail(path + ("headers",), "expected a mapping of header names to strings")
        stream = data.get("stream", False)
        if not isinstance(stream, bool):
            raise self.fail(path + ("stream",), f"expected true or false, got {stream!r}")
        kwargs = dict(
            name=name,
            path=self.string(data, path, "path", None) or "",
            weight=float(self.number(data, path, "weight", 1.0)),
            method=(self.string(data, path, "method", "POST") or "").upper(),
            headers={str(k): str(v) for k, v in headers.items()},
            payload=self.payload(data.get("payload"), path + ("payload",)),
            stream=stream,
        )
        # an OpenAI-API class (`api:`): its fields, files read relative to the scenario's folder
        base = os.path.dirname(self.file) if not self.file.startswith("<") else ""
        kwargs.update(openai_class_fields(data, self.fail, at=path, base_dir=base))
        return self.build(path, RequestClass, **kwargs)

    def payload(self, value: Any, path: Path) -> PayloadSpec:
        if value is None:
            return PayloadSpec()
        from tailscope.scenario_model.load_fields import replay_bodies

        data = self.mapping(value, path, PAYLOAD_FIELDS)
        size = self.size(data.get("size"), path + ("size",))
        kind = self.string(data, path, "kind", "none")
        file, bodies = replay_bodies(self, data, path) if kind == "replay" else (None, ())
        return self.build(
            path,
            PayloadSpec,
            kind=kind,
            body=self.string(data, path, "body", ""),
            size=size,
            field=self.string(data, path, "field", "text"),
            bodies=bodies,
            file=file,
            order=self.string(data, path, "order", "sequential"),
        )

    def size(self, value: Any, path: Path) -> SizeSpec:
        if value is None:
            return SizeSpec()
        if isinstance(value, int) and not isinstance(value, bool):
            return self.build(path, SizeSpec, dist="fixed", value=value)
        data = self.mapping(value, path, SIZE_FIELDS)
        kwargs = {"dist": self.string(data, path, "dist", "fixed")}
        for key in ("value", "min", "max"):
            if key in data:
                kwargs[key] = self.number(data, path, key, integer=True)
        for key in ("median", "sigma"):
            if key in data:
                kwargs[key] = float(self.number(data, path, key))
        if kwargs["dist"] == "empirical":
            from tailscope.scenario_model.load_fields import empirical_sizes

            kwargs["file"], kwargs["values"] = empirical_sizes(self, data, path)
        return self.build(path, SizeSpec, **kwargs)

    def slos(self, value: Any, path: Path) -> list[str]:
        from tailscope.analyzers.stats.slo import parse_slo

        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, "expected a list of SLOs such as ['p99 < 250ms', 'error_rate < 1%']")
        for i, text in enumerate(value):
            if not isinstance(text, str):
                raise self.fail(path + (i,), f"expected a string such as 'p99 < 250ms', got {text!r}")
            try:
                parse_slo(text)
            except ValueError as exc:
                raise self.fail(path + (i,), str(exc)) from None
        return list(value)


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "nothing"}.get(type(value), type(value).__name__)
