"""Scenario fields of the load generator beyond the basics: rate profiles,
replayed arrival logs, empirical sizes and replayed bodies (docs/scenario-format.md).

Used by :class:`tailscope.scenario_model.scenario.FieldReader`; every error names the
scenario file, line and field, and for a data file also that file's bad line::

    scen.yaml:9: arrival.file: arrivals.txt:17: expected a number (s), got 'abc'

Data files are resolved relative to the scenario file's folder.
"""

from __future__ import annotations

import os
from typing import Any

from tailscope.loadgen.datafiles import DataFileError, load_arrival_log, load_bodies, load_sizes
from tailscope.loadgen.spec import ArrivalLog, RateProfile, SessionSpec, SizeSpec

PROFILE_FIELDS = {
    "steps": {"kind", "steps"},
    "ramp": {"kind", "from", "to", "over"},
    "periodic": {"kind", "amplitude", "period", "phase"},
}
STEP_FIELDS = {"rate", "for"}
REPLAY_FIELDS = {"file", "format", "unit", "speed", "loop"}
SESSION_FIELDS = {"concurrency", "rate", "turns", "think_time"}
THINK_TIME_FIELDS = {"dist", "value", "min", "max", "median", "sigma"}
#: Arrival fields a session load sets inside ``sessions`` instead.
SESSION_EXCLUSIVE = ("concurrency", "users", "think_time", "rate", "max_concurrency")


def data_path(reader, value: str) -> str:
    """A data file named in the scenario, relative to the scenario's folder."""
    if os.path.isabs(value):
        return value
    base = os.path.dirname(reader.file) if not reader.file.startswith("<") else ""
    return os.path.normpath(os.path.join(base, value))


def _data_file_name(reader, data: dict, path: tuple) -> str:
    name = reader.string(data, path, "file", None)
    if not name:
        raise reader.fail(path, "file: missing (a path relative to the scenario file)")
    return data_path(reader, name)


def parse_profile(reader, value: Any, path: tuple, mean_rate: float | None, duration_s: float | None) -> RateProfile:
    """``arrival.profile``: steps, ramp or periodic (see :class:`RateProfile`)."""
    if not isinstance(value, dict):
        raise reader.fail(path, "expected a mapping such as {kind: ramp, from: 10, to: 100, over: 60s}")
    kind = reader.string(value, path, "kind", None)
    if kind not in PROFILE_FIELDS:
        raise reader.fail(path + ("kind",), f"expected one of {', '.join(PROFILE_FIELDS)}, got {kind!r}")
    data = reader.mapping(value, path, PROFILE_FIELDS[kind])
    if kind == "steps":
        return reader.build(path, RateProfile, kind="steps", steps=_steps(reader, data.get("steps"), path + ("steps",)))
    if kind == "ramp":
        start = reader.number(data, path, "from", None)
        end = reader.number(data, path, "to", None)
        if start is None or end is None:
            raise reader.fail(path, "a ramp needs `from` and `to` (requests/s)")
        over = reader.duration(data, path, "over", duration_s)
        return reader.build(path, RateProfile, kind="ramp", start_rate=float(start), end_rate=float(end),
                            ramp_s=float(over or 0.0))
    if mean_rate is None:
        raise reader.fail(path[:-1], "rate: missing (the periodic profile's mean, requests/s)")
    period = reader.duration(data, path, "period", None)
    if period is None:
        raise reader.fail(path, "period: missing (e.g. period: 10m for a day compressed into 10 minutes)")
    return reader.build(path, RateProfile, kind="periodic", mean=float(mean_rate),
                        amplitude=float(reader.number(data, path, "amplitude", 0.0)),
                        period_s=float(period), phase_s=float(reader.duration(data, path, "phase", 0.0) or 0.0))


def _steps(reader, value: Any, path: tuple) -> tuple[tuple[float, float], ...]:
    if not isinstance(value, list) or not value:
        raise reader.fail(path, "expected a list of steps such as [{rate: 10, for: 30s}, {rate: 50, for: 30s}]")
    steps = []
    for index, item in enumerate(value):
        at = path + (index,)
        step = reader.mapping(item, at, STEP_FIELDS)
        rate = reader.number(step, at, "rate", None)
        duration = reader.duration(step, at, "for", None)
        if rate is None or duration is None:
            raise reader.fail(at, "each step needs `rate` (requests/s) and `for` (a duration)")
        steps.append((float(duration), float(rate)))
    return tuple(steps)


def parse_arrival_log(reader, data: dict, path: tuple) -> ArrivalLog:
    """``arrival.file`` (+ ``format``, ``unit``): the recorded log, read now; an LLM trace
    (``format: mooncake | azure | burstgpt``) through :mod:`.trace_fields`."""
    from tailscope.scenario_model.trace_fields import TRACE_FORMATS, parse_trace, plain_log_fields

    file = _data_file_name(reader, data, path)
    fmt = reader.string(data, path, "format", "timestamps")
    if fmt in TRACE_FORMATS:
        return parse_trace(reader, data, path, file, fmt)
    plain_log_fields(reader, data, path)
    unit = reader.string(data, path, "unit", "s")
    try:
        offsets = load_arrival_log(file, fmt, unit)
    except DataFileError as exc:
        key = "file" if exc.line or "read" in exc.message or "no arrivals" in exc.message else (
            "format" if "format" in exc.message else "unit")
        raise reader.fail(path + (key,), str(exc)) from None
    return reader.build(path, ArrivalLog, path=file, offsets_ns=offsets, format=fmt)


def empirical_sizes(reader, data: dict, path: tuple):
    """``size.file``: the sizes of an empirical distribution, read now."""
    file = _data_file_name(reader, data, path)
    try:
        return file, load_sizes(file)
    except DataFileError as exc:
        raise reader.fail(path + ("file",), str(exc)) from None


def replay_bodies(reader, data: dict, path: tuple):
    """``payload.file``: the recorded bodies (JSON lines), read now."""
    file = _data_file_name(reader, data, path)
    try:
        return file, load_bodies(file)
    except DataFileError as exc:
        raise reader.fail(path + ("file",), str(exc)) from None


def parse_sessions(reader, value: Any, path: tuple, arrival: dict) -> tuple[int | None, float | None, SessionSpec]:
    """``arrival.sessions``: ``(concurrency, rate, SessionSpec)``, exactly one of ``concurrency``
    (sessions kept going) and ``rate`` (sessions started per second on the arrival's open-loop
    process) set. ``turns`` is a count distribution (the payload ``size`` grammar); ``think_time``
    a duration or a distribution of durations (``{dist: lognormal, median: 2s, sigma: 0.5, max: 30s}``)."""
    data = reader.mapping(value, path, SESSION_FIELDS)
    for key in SESSION_EXCLUSIVE:
        if key in arrival:
            raise reader.fail(path[:-1] + (key,), "not with sessions: set the session load inside `sessions` "
                              "(concurrency: N sessions at a time, or rate: sessions/s)")
    concurrency = reader.number(data, path, "concurrency", None, integer=True)
    rate = reader.number(data, path, "rate", None)
    if (concurrency is None) == (rate is None):
        raise reader.fail(path, "give either concurrency (sessions at a time) or rate (sessions started per second)")
    if concurrency is not None and concurrency < 1:
        raise reader.fail(path + ("concurrency",), f"must be >= 1, got {concurrency}")
    if concurrency is not None and arrival.get("process", "closed") != "closed":
        raise reader.fail(path[:-1] + ("process",), "concurrent sessions are a closed loop; "
                          "for an open-loop process give sessions.rate")
    turns = reader.size(data["turns"], path + ("turns",)) if "turns" in data else None
    think = _think_time(reader, data.get("think_time", 0), path + ("think_time",))
    return concurrency, rate, reader.build(path, SessionSpec, turns=turns, think_time_ms=think)


def _think_time(reader, value: Any, path: tuple) -> SizeSpec:
    """A think-time distribution, as whole milliseconds."""
    if not isinstance(value, dict):
        return reader.build(path[:-1], SizeSpec, dist="fixed", value=_ms(reader, value, path))
    data = reader.mapping(value, path, THINK_TIME_FIELDS)
    kwargs: dict[str, Any] = {"dist": reader.string(data, path, "dist", "fixed")}
    for key in ("value", "min", "max", "median"):
        if key in data:
            kwargs[key] = _ms(reader, data[key], path + (key,))
    if "sigma" in data:
        kwargs["sigma"] = float(reader.number(data, path, "sigma"))
    if kwargs["dist"] == "empirical":
        raise reader.fail(path + ("dist",), "expected fixed, uniform or lognormal")
    return reader.build(path, SizeSpec, **kwargs)


def _ms(reader, value: Any, path: tuple) -> int:
    from tailscope.support.units import parse_duration_s

    try:
        seconds = parse_duration_s(value)
    except ValueError as exc:
        raise reader.fail(path, str(exc)) from None
    if seconds < 0:
        raise reader.fail(path, f"must be >= 0, got {value!r}")
    return int(round(seconds * 1000))
