"""The scenario section ``faults:`` — a list of ``{kind, at, duration, params, role}``.

Registered in :mod:`tailscope.scenario_model.sections`; errors name the file, the
line and the field like every scenario error::

    scenarios/lab.yaml:12: faults[0].params.cpus: must be >= 0.01, got 0
"""

from __future__ import annotations

from typing import Any

from tailscope.faults.injector import FaultSpec, FaultSpecError
from tailscope.faults.registry import build_spec

ENTRY_FIELDS = {"kind", "at", "duration", "params", "role"}


def parse_faults_section(value: Any, path: tuple, reader: Any) -> list[FaultSpec]:
    """Validate the ``faults`` list with ``reader`` (a tailscope.scenario_model.scenario.FieldReader)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise reader.fail(path, "expected a list of faults such as [{kind: cpu_throttle, at: 10s, duration: 5s}]")
    specs = []
    for index, item in enumerate(value):
        at = path + (index,)
        data = reader.mapping(item, at, ENTRY_FIELDS)
        kind = reader.string(data, at, "kind", None)
        if not kind:
            raise reader.fail(at, "kind: missing")
        start_s = reader.duration(data, at, "at", 0.0)
        if "duration" not in data:
            raise reader.fail(at, "duration: missing (e.g. duration: 5s)")
        duration_s = reader.duration(data, at, "duration", None)
        params = data.get("params") or {}
        if not isinstance(params, dict):
            raise reader.fail(at + ("params",), "expected a mapping of parameters")
        role = reader.string(data, at, "role", "cause")
        try:
            specs.append(build_spec(kind, start_s, duration_s, params, role))
        except FaultSpecError as exc:
            raise reader.fail(at + tuple(exc.field.split(".")), exc.message) from None
    return specs
