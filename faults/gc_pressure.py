"""gc_pressure: the target allocates long-lived cyclic garbage over a large live heap, for a window.

Mechanism: ``POST /admin/gc_pressure {"enabled": true, "mb_per_s", "retained_mb"}``
on the reference target (``--admin``, on by default) switches on a thread
that keeps ``retained_mb`` of GC-tracked objects alive and allocates
``mb_per_s`` of reference cycles that live ~2 s, so they reach generation 2;
full collections then traverse the whole heap, pausing every thread of the
target (tens to hundreds of ms, seen as ``gc_pause`` events with
generation 2). ``{"enabled": false}`` ends it and frees the heap. Needs a
target that serves the admin endpoint (the reference target), on loopback.
"""

from __future__ import annotations

from tailscope.faults import admin_client
from tailscope.faults.injector import Injector, Param

ENDPOINT = "/admin/gc_pressure"


class GcPressure(Injector):
    kind = "gc_pressure"
    summary = "cyclic garbage over a large live heap in the target: long gen-2 GC pauses"
    requires = "the reference target's admin endpoint (--admin) on a loopback URL"
    params = {
        "mb_per_s": Param("number", 50.0, "garbage allocated per second (MB/s)", minimum=0.1, maximum=2000.0),
        "retained_mb": Param("number", 128.0, "live GC-tracked heap every full collection traverses (MB)",
                             minimum=0.0, maximum=8192.0),
    }

    def __init__(self, spec, target) -> None:
        super().__init__(spec, target)
        self._on = False

    def check(self) -> None:
        admin_client.call(self.require_url(), "GET", "/admin/state")

    def apply(self) -> dict:
        state = admin_client.call(self.require_url(), "POST", ENDPOINT, {
            "enabled": True, "mb_per_s": self.spec.params["mb_per_s"],
            "retained_mb": self.spec.params["retained_mb"]})
        self._on = True
        return {"endpoint": ENDPOINT, "state": state}

    def revert(self) -> dict:
        state = admin_client.call(self.require_url(), "POST", ENDPOINT, {"enabled": False})
        self._on = False
        return {"allocated_mb_total": state.get("allocated_mb")}

    def cleanup(self) -> None:
        if self._on:
            self.revert()
