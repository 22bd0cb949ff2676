"""Pressure stall information (/proc/pressure/{cpu,memory,io}).

The ``total`` fields are cumulative microseconds during which some (or all)
runnable tasks were stalled on the resource; they are stored as counters.
Kernels without PSI (or with ``psi=0``) lack the files: the sampler then
reports why and emits nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from tailscope.signals.sampler import COUNTER, OpenFiles, SeriesMeta
from tailscope.support.procfs import read_text

PRESSURE_DIR = "/proc/pressure"
RESOURCES = ("cpu", "memory", "io")
_SCOPE_WORDS = {"some": "at least one task was", "full": "all non-idle tasks were"}


def parse_pressure(text: str) -> dict[str, int]:
    """``{"some": total_us, "full": total_us}`` from one /proc/pressure file."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] not in ("some", "full"):
            continue
        for item in parts[1:]:
            key, _, value = item.partition("=")
            if key == "total" and value.isdigit():
                out[parts[0]] = int(value)
    return out


class PressureSampler:
    """PSI some/full stall totals for cpu, memory and io (µs counters)."""

    name = "psi"

    def __init__(self, directory: str = PRESSURE_DIR):
        self.directory = directory
        self._resources: list[str] = []
        self._files = OpenFiles()

    def probe(self) -> str | None:
        self._resources = []
        errors = []
        for resource in RESOURCES:
            try:
                read_text(f"{self.directory}/{resource}")
                self._resources.append(resource)
            except OSError as exc:
                errors.append(f"{self.directory}/{resource}: {exc.strerror or exc}")
        if not self._resources:
            return "PSI unavailable (" + "; ".join(errors) + ")"
        return None

    def series(self) -> dict[str, SeriesMeta]:
        return {
            f"psi.{resource}.{scope}_us": SeriesMeta(
                "us", COUNTER, f"time {_SCOPE_WORDS[scope]} stalled on {resource} ({self.directory}/{resource})"
            )
            for resource in RESOURCES
            for scope in ("some", "full")
        }

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        out = []
        for resource in self._resources:
            for scope, total in parse_pressure(self._files.read(f"{self.directory}/{resource}")).items():
                out.append((f"psi.{resource}.{scope}_us", float(total)))
        return out
