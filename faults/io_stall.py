"""io_stall: fsync'd writes in the target's request path, for a window.

Mechanism: ``POST /admin/io_stall {"enabled": true, "kb": N}`` on the
reference target makes each request's preprocessing append N KB to a file
and ``fsync`` it, synchronously, in the event loop (as a per-request audit
log would); ``{"enabled": false}`` ends it and deletes the file. The cost
is the disk's flush latency: real on a disk, weak on tmpfs or a disk with a
volatile write cache. Needs the reference target's admin endpoint on loopback.
"""

from __future__ import annotations

from tailscope.faults import admin_client
from tailscope.faults.injector import Injector, Param

ENDPOINT = "/admin/io_stall"


class IoStall(Injector):
    kind = "io_stall"
    summary = "fsync'd writes of N KB in every request's preprocessing"
    requires = "the reference target's admin endpoint (--admin) on a loopback URL; a disk (weak on tmpfs)"
    params = {
        "kb": Param("integer", 256, "KB written and fsynced per request", minimum=1, maximum=65536),
    }

    def __init__(self, spec, target) -> None:
        super().__init__(spec, target)
        self._on = False
        self._writes_before = 0

    def check(self) -> None:
        admin_client.call(self.require_url(), "GET", "/admin/state")

    def apply(self) -> dict:
        state = admin_client.call(self.require_url(), "POST", ENDPOINT, {"enabled": True, "kb": self.spec.params["kb"]})
        self._on = True
        self._writes_before = int(state.get("writes", 0))
        return {"endpoint": ENDPOINT, "file": state.get("path")}

    def revert(self) -> dict:
        state = admin_client.call(self.require_url(), "POST", ENDPOINT, {"enabled": False})
        self._on = False
        return {"fsynced_writes": int(state.get("writes", 0)) - self._writes_before}

    def cleanup(self) -> None:
        if self._on:
            self.revert()
