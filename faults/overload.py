"""overload: a burst of arrivals above capacity, with client retries, for a window.

Mechanism: a separate process (:mod:`.burst`) sends ``rate`` requests/s
(Poisson, open loop) of ``text_chars``-character texts to ``path`` on the
target for the window, each over its own loopback connection. Above the
target's capacity its batcher queue fills to ``--max-queue-size`` and answers
429; the burst retries each 429 up to ``retries`` times with exponential
backoff, which adds load. The tailscope load itself sees long ``queue_wait``
and 429s. Needs a loopback target; nothing else.
"""

from __future__ import annotations

from tailscope.faults.injector import Param
from tailscope.faults.traffic_injector import TrafficChildInjector


class Overload(TrafficChildInjector):
    kind = "overload"
    summary = "an open-loop burst above capacity with retrying clients (queue saturation, 429s)"
    requires = "a loopback target"
    module = "tailscope.faults.burst"
    params = {
        "rate": Param("number", 400.0, "burst arrivals per second", minimum=1.0, maximum=20000.0),
        "path": Param("string", "/v1/infer/text", "route the burst posts to (JSON {'text': ...})"),
        "text_chars": Param("integer", 2000, "characters of each burst request's text", minimum=1),
        "retries": Param("integer", 2, "retries of a request answered 429", minimum=0, maximum=10),
        "backoff_ms": Param("number", 50.0, "first retry delay; doubles per retry (ms)", minimum=0.0),
        "max_in_flight": Param("integer", 512, "most open burst requests", minimum=1, maximum=10000),
        "seed": Param("integer", 1, "seed of the burst's arrivals and texts"),
    }

    def _child_args(self) -> list[str]:
        params = self.spec.params
        return ["--url", self.require_url(), "--path", params["path"], "--rate", str(params["rate"]),
                "--duration", str(self.spec.duration_s), "--text-chars", str(params["text_chars"]),
                "--retries", str(params["retries"]), "--backoff-ms", str(params["backoff_ms"]),
                "--max-in-flight", str(params["max_in_flight"]), "--seed", str(params["seed"])]

    def _applied(self) -> dict:
        return {"rate": self.spec.params["rate"], "path": self.spec.params["path"]}
