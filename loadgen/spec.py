"""What a load test asks for: arrival process, request classes, payloads, bounds.

These are plain, validated values. The scenario parser (tailscope.scenario)
builds them from YAML and turns a ``SpecError`` into a message naming the
file, line and field; the load generator consumes them.

Units are in the names: ``*_s`` seconds, ``rate`` requests per second,
sizes in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class SpecError(ValueError):
    """A value that cannot be used. ``field`` is the dotted path of the bad field,
    relative to the object being built (e.g. ``rate`` or ``size.sigma``)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


ARRIVAL_PROCESSES = ("constant", "poisson", "gamma", "closed")


@dataclass(frozen=True)
class ArrivalSpec:
    """How requests arrive.

    - ``constant``: one request every 1/rate s.
    - ``poisson``: exponential gaps with mean 1/rate s.
    - ``gamma``: gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness));
      burstiness 1 is Poisson, < 1 burstier, > 1 smoother.
    - ``closed``: ``users`` concurrent users, each sending its next request
      ``think_time_s`` after the previous reply (subject to coordinated omission).
    """

    process: str = "poisson"
    rate: float = 10.0  # requests/s (open loop)
    burstiness: float = 1.0  # gamma shape
    users: int = 1  # closed loop only
    think_time_s: float = 0.0  # closed loop only

    def __post_init__(self):
        if self.process not in ARRIVAL_PROCESSES:
            raise SpecError("process", f"unknown arrival process {self.process!r}; "
                            f"expected one of {', '.join(ARRIVAL_PROCESSES)}")
        if self.process != "closed" and not (self.rate > 0):
            raise SpecError("rate", f"must be a positive number of requests/s, got {self.rate!r}")
        if self.rate > 1_000_000:
            raise SpecError("rate", f"{self.rate} requests/s is beyond what one harness can offer")
        if not (self.burstiness > 0):
            raise SpecError("burstiness", f"must be > 0, got {self.burstiness!r}")
        if self.process == "closed" and self.users < 1:
            raise SpecError("users", f"must be >= 1, got {self.users!r}")
        if self.think_time_s < 0:
            raise SpecError("think_time", f"must be >= 0, got {self.think_time_s!r}")


SIZE_DISTRIBUTIONS = ("fixed", "uniform", "lognormal")


@dataclass(frozen=True)
class SizeSpec:
    """A payload size distribution, in bytes (or characters for text).

    - ``fixed``: always ``value``.
    - ``uniform``: integers in [``min``, ``max``].
    - ``lognormal``: median ``median``, log-space std-dev ``sigma``, clipped to
      [``min``, ``max``].
    """

    dist: str = "fixed"
    value: int = 256
    min: int = 1
    max: int = 1 << 20
    median: float = 256.0
    sigma: float = 0.5

    def __post_init__(self):
        if self.dist not in SIZE_DISTRIBUTIONS:
            raise SpecError("dist", f"unknown size distribution {self.dist!r}; "
                            f"expected one of {', '.join(SIZE_DISTRIBUTIONS)}")
        if self.value < 0 or self.min < 0:
            raise SpecError("value" if self.value < 0 else "min", "sizes must be >= 0")
        if self.max < self.min:
            raise SpecError("max", f"max ({self.max}) is below min ({self.min})")
        if self.dist == "lognormal" and not (self.median > 0 and self.sigma >= 0):
            raise SpecError("median", "lognormal needs median > 0 and sigma >= 0")


PAYLOAD_KINDS = ("none", "fixed", "random_text", "random_bytes", "json_text")


@dataclass(frozen=True)
class PayloadSpec:
    """How a request body is made.

    - ``none``: no body.
    - ``fixed``: ``body`` verbatim.
    - ``random_text``: words of random letters, total length drawn from ``size``.
    - ``random_bytes``: random bytes, length drawn from ``size``.
    - ``json_text``: ``{"<field>": "<random_text>"}`` with the text length from ``size``.
    """

    kind: str = "none"
    body: str = ""
    size: SizeSpec = field(default_factory=SizeSpec)
    field: str = "text"  # json_text only

    def __post_init__(self):
        if self.kind not in PAYLOAD_KINDS:
            raise SpecError("kind", f"unknown payload kind {self.kind!r}; "
                            f"expected one of {', '.join(PAYLOAD_KINDS)}")


HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")


@dataclass(frozen=True)
class RequestClass:
    """One kind of request in the mix, chosen with probability weight/sum(weights)."""

    name: str
    path: str
    weight: float = 1.0
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    payload: PayloadSpec = field(default_factory=PayloadSpec)
    stream: bool = False  # read the response as a stream of chunks (TTFT / ITL)

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise SpecError("name", "every request class needs a name")
        if not isinstance(self.path, str) or not self.path.startswith("/"):
            raise SpecError("path", f"must start with '/', got {self.path!r}")
        if not (self.weight > 0):
            raise SpecError("weight", f"must be > 0, got {self.weight!r}")
        if self.method not in HTTP_METHODS:
            raise SpecError("method", f"unknown HTTP method {self.method!r}")


@dataclass(frozen=True)
class LoadPlan:
    """Everything the load generator needs for one run. Every run is bounded:
    it stops after ``duration_s`` or ``max_requests``, whichever comes first."""

    target: str  # base URL, e.g. http://127.0.0.1:8000
    duration_s: float
    arrival: ArrivalSpec
    classes: tuple[RequestClass, ...]
    max_requests: int = 1_000_000
    seed: int = 1
    timeout_s: float = 10.0  # client timeout per request
    max_in_flight: int = 1000  # cap on concurrent requests; waiting counts in latency
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if not (self.duration_s > 0):
            raise SpecError("duration", f"must be > 0, got {self.duration_s!r}")
        if self.max_requests < 1:
            raise SpecError("max_requests", f"must be >= 1, got {self.max_requests!r}")
        if not self.classes:
            raise SpecError("classes", "at least one request class is needed")
        if not (self.timeout_s > 0):
            raise SpecError("timeout", f"must be > 0, got {self.timeout_s!r}")
        if self.max_in_flight < 1:
            raise SpecError("max_in_flight", f"must be >= 1, got {self.max_in_flight!r}")
