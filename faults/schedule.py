"""Running a run's faults on time: one thread per fault, ground truth for each window.

:class:`FaultSchedule` applies each fault ``at_s`` after ``t0_ns`` (the load
start) and reverts it ``duration_s`` later, each in its own thread, and hands
one ground-truth event per applied fault to ``record``::

    kind="fault", start_ns=<before apply>, end_ns=<after revert>,
    source="tailscope.faults.<kind>",
    attributes={"fault", "role", "params", "planned": {"at_s", "duration_s"},
                "mechanism": <apply() facts>, "observed": <revert() facts>,
                "cut_short": bool, "error": str | None}

``error`` is set when apply or revert failed, or when revert's facts carry a
``failure`` (a fault that stopped itself early, e.g. traffic the server refused).

``role`` says whether the fault is the ``cause`` the diagnosis should name or a
``distraction`` elsewhere on the host (:data:`~.injector.ROLES`).
The window therefore covers the whole time the fault was being applied,
in effect and being removed. :meth:`FaultSchedule.shutdown` (always called)
cuts faults still in effect short, records them, and cleans up every
injector, also those whose window never came.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tailscope.faults.injector import FaultError, Injector

Record = Callable[[str, int, int, str, dict], None]


class FaultSchedule:
    """Apply/revert injectors on a timeline relative to ``t0_ns`` (epoch ns)."""

    def __init__(self, injectors: list[Injector], record: Record) -> None:
        self._injectors = injectors
        self._record = record
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._active: dict[int, tuple[Injector, int, dict]] = {}
        #: apply/revert failures (also recorded in the faults' events) and cleanup failures.
        self.errors: list[str] = []
        self.cleanup_errors: list[str] = []

    def check(self) -> None:
        """Every injector's check(); the first FaultSetupError propagates."""
        for injector in self._injectors:
            injector.check()

    def prepare(self) -> None:
        for injector in self._injectors:
            injector.prepare()

    def start(self, t0_ns: int) -> None:
        for index, injector in enumerate(self._injectors):
            thread = threading.Thread(target=self._run_one, args=(index, injector, t0_ns),
                                      name=f"fault-{injector.kind}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until every window has ended; True when all did."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def shutdown(self) -> list[str]:
        """Stop: cut active faults short (recorded), clean up every injector. Returns the cleanup failures."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)
        with self._lock:
            leftovers = list(self._active.items())
            self._active.clear()
        for _, (injector, started_ns, facts) in leftovers:
            self._finish(injector, started_ns, facts, cut_short=True)
        for injector in self._injectors:
            try:
                injector.cleanup()
            except (FaultError, OSError) as exc:
                self.cleanup_errors.append(f"{injector.kind}: {exc}")
        return self.cleanup_errors

    def _run_one(self, index: int, injector: Injector, t0_ns: int) -> None:
        spec = injector.spec
        if self._stop.wait(max(0.0, (t0_ns / 1e9 + spec.at_s) - time.time())):
            return
        started_ns = time.time_ns()
        try:
            facts = injector.apply()
        except (FaultError, OSError) as exc:
            self.errors.append(f"{spec.kind}: apply: {exc}")
            self._record_event(injector, started_ns, time.time_ns(), {}, {}, False, f"apply failed: {exc}")
            return
        with self._lock:
            self._active[index] = (injector, started_ns, facts)
        cut_short = self._stop.wait(max(0.0, started_ns / 1e9 + spec.duration_s - time.time()))
        with self._lock:
            still_mine = self._active.pop(index, None) is not None
        if still_mine:
            self._finish(injector, started_ns, facts, cut_short=cut_short)

    def _finish(self, injector: Injector, started_ns: int, facts: dict, cut_short: bool) -> None:
        error = None
        try:
            observed = injector.revert()
        except (FaultError, OSError) as exc:
            observed, error = {}, f"revert failed: {exc}"
            self.errors.append(f"{injector.kind}: revert: {exc}")
        else:
            failure = observed.get("failure") if isinstance(observed, dict) else None
            if failure:  # the fault stopped itself before its window ended (e.g. the server refused it)
                error = f"the fault stopped early: {failure}"
                self.errors.append(f"{injector.kind}: {error}")
        self._record_event(injector, started_ns, time.time_ns(), facts, observed, cut_short, error)

    def _record_event(self, injector: Injector, start_ns: int, end_ns: int, facts: dict, observed: dict,
                      cut_short: bool, error: str | None) -> None:
        spec = injector.spec
        self._record("fault", start_ns, end_ns, f"tailscope.faults.{spec.kind}", {
            "fault": spec.kind,
            "role": spec.role,
            "params": spec.params,
            "planned": {"at_s": spec.at_s, "duration_s": spec.duration_s},
            "mechanism": facts,
            "observed": observed,
            "cut_short": cut_short,
            "error": error,
        })
