"""What every fault injector shares: its declaration, its lifecycle, its errors.

An injector is a small class registered by ``kind`` (:mod:`.registry`). The
agent (:mod:`.agent`) drives every injector of a run through the same
lifecycle, all before or beside the load:

1. ``check()`` — before any load: can the fault run here (root, a writable
   cgroup, a reachable admin endpoint)? Raises :class:`FaultSetupError` with
   the reason; has no side effects.
2. ``prepare()`` — before any load: slow set-up that is not the fault yet
   (e.g. writing a swap file).
3. ``apply()`` at ``at`` seconds after the load started, ``revert()``
   ``duration`` seconds later. Each returns the facts it established or
   observed (what was written where, counters before/after); they go into
   the fault's ground-truth event.
4. ``cleanup()`` — always, also after Ctrl-C or a failure: reverts a fault
   still in effect and removes whatever the injector created (cgroups, swap
   files, processes). Idempotent; raises :class:`FaultCleanupError` listing
   what could not be removed.

Params are declared as :class:`Param` and validated once, by
:func:`validate_params`, so the scenario file, the command line and the lab
report the same errors.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tailscope.faults.undo_journal import UndoJournal


class FaultError(Exception):
    """Base of the fault injectors' errors."""


class FaultSpecError(FaultError, ValueError):
    """A fault declaration is invalid (unknown kind, bad parameter). ``field`` names the part."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


class FaultSetupError(FaultError, RuntimeError):
    """The fault cannot run on this machine or against this target; nothing was changed."""


class FaultCleanupError(FaultError, RuntimeError):
    """Something the injector created could not be removed; the message says what and where."""


@dataclass(frozen=True)
class Param:
    """One parameter of a fault kind: its type (``number``, ``integer``, ``string``), default and meaning."""

    kind: str
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    #: For a ``string``: the values it may take (None: any string).
    choices: tuple[str, ...] | None = None


#: What a fault is to the diagnosis, recorded in its ground truth: the ``cause`` of the
#: target's trouble (the lab expects it named), or a ``distraction`` elsewhere on the host
#: (another process's trouble, happening at the same time; naming it is wrong).
ROLES = ("cause", "distraction")


@dataclass(frozen=True)
class FaultSpec:
    """One fault of a run: ``kind`` from ``at_s`` to ``at_s + duration_s`` seconds after the load starts.

    ``params`` hold every parameter of the kind, defaults filled in; ``role`` is one of :data:`ROLES`.
    """

    kind: str
    at_s: float
    duration_s: float
    params: dict = field(default_factory=dict)
    role: str = "cause"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "at_s": self.at_s, "duration_s": self.duration_s, "params": dict(self.params),
                "role": self.role}

    @classmethod
    def from_dict(cls, data: dict) -> FaultSpec:
        return cls(kind=data["kind"], at_s=float(data["at_s"]), duration_s=float(data["duration_s"]),
                   params=dict(data.get("params") or {}), role=str(data.get("role") or "cause"))


@dataclass(frozen=True)
class TargetInfo:
    """The process and URL a fault acts on; ``run_id`` names what the injectors create; ``undo``
    is where an injector writes how to undo a host change before making it (:mod:`.undo_journal`)."""

    pid: int | None
    url: str | None
    run_id: str
    work_dir: str
    undo: UndoJournal = field(default_factory=lambda: UndoJournal(None))


def validate_params(kind: str, declared: dict[str, Param], given: dict) -> dict:
    """Every declared parameter, converted and range-checked, defaults filled in.

    Raises :class:`FaultSpecError` (field ``params.<name>``) for an unknown
    name, a wrong type or a value out of range.
    """
    unknown = sorted(set(given) - set(declared))
    if unknown:
        known = ", ".join(sorted(declared)) or "none"
        raise FaultSpecError(f"params.{unknown[0]}", f"unknown parameter of {kind}; known: {known}")
    values = {}
    for name, param in declared.items():
        value = given.get(name, param.default)
        values[name] = _convert(f"params.{name}", param, value)
    return values


def _convert(field_name: str, param: Param, value: Any) -> Any:
    if param.kind == "string":
        if not isinstance(value, str):
            raise FaultSpecError(field_name, f"expected a string, got {value!r}")
        if param.choices is not None and value not in param.choices:
            raise FaultSpecError(field_name, f"expected one of {', '.join(param.choices)}, got {value!r}")
        return value
    if isinstance(value, str):
        try:
            value = float(value) if param.kind == "number" else int(value)
        except ValueError:
            raise FaultSpecError(field_name, f"expected {'a number' if param.kind == 'number' else 'an integer'}, "
                                             f"got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FaultSpecError(field_name, f"expected a number, got {value!r}")
    if param.kind == "integer":
        if float(value) != int(value):
            raise FaultSpecError(field_name, f"expected an integer, got {value!r}")
        value = int(value)
    else:
        value = float(value)
    if param.minimum is not None and value < param.minimum:
        raise FaultSpecError(field_name, f"must be >= {param.minimum:g}, got {value:g}")
    if param.maximum is not None and value > param.maximum:
        raise FaultSpecError(field_name, f"must be <= {param.maximum:g}, got {value:g}")
    return value


class Injector(ABC):
    """A fault kind (see the module docstring for the lifecycle)."""

    #: Name used in scenarios, on the command line and in ground truth.
    kind: ClassVar[str]
    #: One line: what the fault does.
    summary: ClassVar[str]
    #: What it needs from the machine, for docs and error messages.
    requires: ClassVar[str]
    params: ClassVar[dict[str, Param]] = {}
    #: The kind of target the fault needs: None for any target, ``"llm"`` for an LLM server
    #: (OpenAI API; the lab runs such kinds only in its LLM suite).
    target_kind: ClassVar[str | None] = None

    def __init__(self, spec: FaultSpec, target: TargetInfo) -> None:
        self.spec = spec
        self.target = target

    @classmethod  # noqa: B027  (an optional hook: no checks by default)
    def check_host(cls) -> None:
        """Checks that need no target (root, tools); raise FaultSetupError. Run by the CLI before anything starts."""

    def check(self) -> None:
        """Checks against the target; raise FaultSetupError. Default: the host checks."""
        self.check_host()

    def prepare(self) -> None:  # noqa: B027  (an optional hook)
        """Slow set-up before the load (default: nothing)."""

    @abstractmethod
    def apply(self) -> dict:
        """Start the fault; return the facts of the mechanism (JSON-ready)."""

    @abstractmethod
    def revert(self) -> dict:
        """End the fault; return what was observed during it (JSON-ready)."""

    @abstractmethod
    def cleanup(self) -> None:
        """Revert if still in effect and remove everything created; idempotent."""

    def require_pid(self) -> int:
        """The target's PID, or FaultSetupError."""
        if self.target.pid is None:
            raise FaultSetupError(f"{self.kind} needs the target's process (give --target-pid or a loopback target)")
        try:
            os.kill(self.target.pid, 0)
        except ProcessLookupError:
            raise FaultSetupError(f"{self.kind}: target process {self.target.pid} does not exist") from None
        return self.target.pid

    def require_url(self) -> str:
        """The target's base URL (loopback only), or FaultSetupError."""
        from urllib.parse import urlparse

        url = self.target.url
        host = (urlparse(url).hostname or "") if url else ""
        if not url or not (host in ("localhost", "::1") or host.startswith("127.")):
            raise FaultSetupError(f"{self.kind} acts on the target over HTTP and only on a loopback URL, got {url!r}")
        return url.rstrip("/")


def require_root(kind: str) -> None:
    """FaultSetupError unless this process runs as root."""
    if os.geteuid() != 0:
        raise FaultSetupError(f"{kind} needs root (it writes cgroup files / enables swap); run as root")
