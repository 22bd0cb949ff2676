"""What a load test asks for: arrival process, request classes, payloads, bounds.

These are plain, validated values. The scenario parser (tailscope.scenario_model.scenario)
builds them from YAML and turns a ``SpecError`` into a message naming the
file, line and field; the load generator consumes them.

Units are in the names: ``*_s`` seconds, ``rate`` requests per second,
sizes in bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailscope.loadgen.arrivals import ARRIVALS
from tailscope.loadgen.trace_files import TRACE_FORMATS, TraceRequests


class SpecError(ValueError):
    """A value that cannot be used. ``field`` is the dotted path of the bad field,
    relative to the object being built (e.g. ``rate`` or ``size.sigma``)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


#: Every arrival process a scenario may name: the open-loop ones declared in
#: :data:`tailscope.loadgen.arrivals.ARRIVALS`, then the closed loop.
ARRIVAL_PROCESSES = (*ARRIVALS, "closed")
RATE_PROFILES = ("steps", "ramp", "periodic")
#: Arrival log formats: plain logs (one number a line), then the LLM trace formats (:mod:`.trace_files`).
ARRIVAL_LOG_FORMATS = ("timestamps", "gaps", *TRACE_FORMATS)


@dataclass(frozen=True)
class RateProfile:
    """A request rate that changes over the run (requests/s as a function of time).

    - ``steps``: ``steps`` is a sequence of ``(duration_s, rate)``; each rate
      holds for its duration, the last one until the run ends.
    - ``ramp``: linear from ``start_rate`` to ``end_rate`` over ``ramp_s``
      seconds, then ``end_rate`` until the run ends::

          rate ^        ____ end_rate
               |      /
               |____/ start_rate
               +-----|-----> t
                   ramp_s

    - ``periodic``: ``mean + amplitude * sin(2*pi*(t - phase_s) / period_s)``,
      e.g. a day's traffic compressed into ``period_s`` (diurnal); needs
      ``amplitude <= mean`` so the rate never goes negative.

    The arrival process (constant, Poisson, gamma) is kept: its unit-rate
    schedule is mapped through the inverse of the cumulative rate, so a Poisson
    process becomes a non-homogeneous Poisson process with this rate.
    """

    kind: str
    steps: tuple[tuple[float, float], ...] = ()
    start_rate: float = 0.0
    end_rate: float = 0.0
    ramp_s: float = 0.0
    mean: float = 0.0
    amplitude: float = 0.0
    period_s: float = 0.0
    phase_s: float = 0.0

    def __post_init__(self):
        if self.kind not in RATE_PROFILES:
            raise SpecError("kind", f"unknown rate profile {self.kind!r}; expected one of "
                            f"{', '.join(RATE_PROFILES)}")
        if self.kind == "steps":
            if not self.steps:
                raise SpecError("steps", "at least one step {rate, for} is needed")
            for i, (duration_s, rate) in enumerate(self.steps):
                if not duration_s > 0:
                    raise SpecError(f"steps.{i}.for", f"must be > 0 s, got {duration_s!r}")
                if not rate >= 0:
                    raise SpecError(f"steps.{i}.rate", f"must be >= 0 requests/s, got {rate!r}")
            if not any(rate > 0 for _, rate in self.steps):
                raise SpecError("steps", "every step has rate 0: nothing would be sent")
        elif self.kind == "ramp":
            if not (self.start_rate >= 0 and self.end_rate >= 0) or self.start_rate + self.end_rate <= 0:
                raise SpecError("to", "a ramp needs rates >= 0, not both 0")
            if not self.ramp_s > 0:
                raise SpecError("over", f"must be > 0 s, got {self.ramp_s!r}")
        else:
            if not self.mean > 0:
                raise SpecError("rate", f"the periodic profile's mean rate must be > 0, got {self.mean!r}")
            if not 0 <= self.amplitude <= self.mean:
                raise SpecError("amplitude", f"must be between 0 and the mean rate ({self.mean:g}), "
                                f"got {self.amplitude!r}")
            if not self.period_s > 0:
                raise SpecError("period", f"must be > 0 s, got {self.period_s!r}")
        if self.peak_rate > 1_000_000:
            raise SpecError("rate", f"{self.peak_rate:g} requests/s is beyond what one harness can offer")

    @property
    def peak_rate(self) -> float:
        """Highest rate the profile reaches, requests/s."""
        if self.kind == "steps":
            return max(rate for _, rate in self.steps)
        if self.kind == "ramp":
            return max(self.start_rate, self.end_rate)
        return self.mean + self.amplitude

    def describe(self) -> dict:
        """The profile as plain JSON values (for the manifest)."""
        if self.kind == "steps":
            return {"kind": "steps", "steps": [{"for_s": d, "rate": r} for d, r in self.steps]}
        if self.kind == "ramp":
            return {"kind": "ramp", "from": self.start_rate, "to": self.end_rate, "over_s": self.ramp_s}
        return {"kind": "periodic", "mean": self.mean, "amplitude": self.amplitude,
                "period_s": self.period_s, "phase_s": self.phase_s}


@dataclass(frozen=True, eq=False)
class ArrivalLog:
    """A recorded arrival log to replay: send offsets in ns from the log's first
    arrival (int64, non-decreasing), read from ``path``.

    An LLM trace (``format`` mooncake, azure, burstgpt) also gives each arrival's
    request (``requests``, row ``i`` for arrival ``i``); ``slice_s`` is the part of
    the trace kept, ``(from_s, to_s)`` in trace seconds (``to_s`` None: to the end)."""

    path: str
    offsets_ns: np.ndarray
    format: str = "timestamps"  # how the file gave them: timestamps | gaps | a trace format
    requests: TraceRequests | None = None  # an LLM trace's per-arrival requests
    slice_s: tuple[float, float | None] | None = None  # the trace seconds kept

    def __post_init__(self):
        if self.format not in ARRIVAL_LOG_FORMATS:
            raise SpecError("format", f"unknown arrival log format {self.format!r}; expected one of "
                            f"{', '.join(ARRIVAL_LOG_FORMATS)}")
        if len(self.offsets_ns) == 0:
            raise SpecError("file", f"{self.path}: the arrival log has no arrivals")
        if self.requests is not None and len(self.requests) != len(self.offsets_ns):
            raise SpecError("file", f"{self.path}: {len(self.requests)} trace rows for "
                            f"{len(self.offsets_ns)} arrivals")


#: Most turns one session may have (a bound on the history a session carries).
MAX_SESSION_TURNS = 1000


@dataclass(frozen=True)
class SessionSpec:
    """Multi-turn sessions (conversations) as the load: ``arrival.sessions``.

    A session draws one request class (by weight; every class ``openai-chat``)
    and its number of turns from ``turns`` (a count distribution; None: each
    session is one conversation of a dataset class, its user turns in order).
    Turn 1 goes at the session's start; turn k+1 is sent a think time (drawn
    from ``think_time_ms``, milliseconds) after turn k's reply ended, with the
    history: every earlier user message and the model's *actual* answer to it
    (the text streamed back, not a recorded one). A failed turn ends its
    session; a turn due after the run's duration is not sent.
    """

    turns: SizeSpec | None = None
    think_time_ms: SizeSpec = field(default_factory=lambda: SizeSpec(dist="fixed", value=0))

    def __post_init__(self):
        if self.turns is not None:
            if _size_lower(self.turns) < 1:
                raise SpecError("turns", "a session has at least 1 turn")
            if _size_upper(self.turns) > MAX_SESSION_TURNS:
                raise SpecError("turns", f"at most {MAX_SESSION_TURNS} turns a session")

    def describe(self) -> dict:
        """The session settings as plain JSON values (for the manifest and the report)."""
        return {"turns": _describe_size(self.turns) if self.turns is not None else "dataset",
                "think_time_ms": _describe_size(self.think_time_ms)}


@dataclass(frozen=True)
class ArrivalSpec:
    """How requests arrive.

    - ``constant``: one request every 1/rate s.
    - ``poisson``: exponential gaps with mean 1/rate s.
    - ``gamma``: gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness));
      burstiness 1 is Poisson, < 1 burstier, > 1 smoother.
    - ``replay``: the arrivals of a recorded log (``log``), played ``speed``
      times as fast, from the start again when ``loop`` and the log ends first;
      ``max_rate`` (requests/s) spaces arrivals at least ``1/max_rate`` s apart
      (a burst above it is spread out, later arrivals shift with it).
    - ``closed``: ``users`` concurrent users, each sending its next request
      ``think_time_s`` after the previous reply (subject to coordinated omission).
      With no think time this is *concurrency mode* (perf_analyzer's and
      AIPerf's ``--concurrency``): ``users`` requests kept in flight, a new one
      sent as soon as one ends, latency measured from the send.

    ``profile`` (constant, poisson, gamma) makes the rate vary over time; ``rate``
    is then the profile's peak, for reference. ``max_concurrency`` (open loop)
    caps the requests in flight: the schedule is kept, a request whose turn
    comes while ``max_concurrency`` are in flight waits for a slot, and the
    wait is its lateness (part of its latency: no coordinated omission). The
    load plan's in-flight cap is lowered to it (:class:`LoadPlan`).

    ``sessions`` (:class:`SessionSpec`) makes the unit of arrival a multi-turn
    session: ``closed`` then keeps ``users`` sessions going (a new one as soon
    as one ends), an open-loop process starts sessions at ``rate`` sessions/s;
    the in-flight cap counts the sessions under way.
    """

    process: str = "poisson"
    rate: float = 10.0  # requests/s (open loop)
    burstiness: float = 1.0  # gamma shape
    users: int = 1  # closed loop only
    think_time_s: float = 0.0  # closed loop only
    profile: RateProfile | None = None  # time-varying rate (constant, poisson, gamma)
    log: ArrivalLog | None = field(default=None, compare=False)  # replay only
    speed: float = 1.0  # replay: 2 plays the log twice as fast
    loop: bool = False  # replay: start the log again when it ends before the run
    max_concurrency: int | None = None  # open loop: at most this many requests in flight
    max_rate: float | None = None  # replay: arrivals at least 1/max_rate s apart
    sessions: SessionSpec | None = None  # multi-turn sessions are the unit of arrival

    def __post_init__(self):
        if self.process not in ARRIVAL_PROCESSES:
            raise SpecError("process", f"unknown arrival process {self.process!r}; "
                            f"expected one of {', '.join(ARRIVAL_PROCESSES)}")
        if self.process not in ("closed", "replay") and not (self.rate > 0):
            raise SpecError("rate", f"must be a positive number of requests/s, got {self.rate!r}")
        if self.rate > 1_000_000:
            raise SpecError("rate", f"{self.rate} requests/s is beyond what one harness can offer")
        if not (self.burstiness > 0):
            raise SpecError("burstiness", f"must be > 0, got {self.burstiness!r}")
        if self.process == "closed" and self.users < 1:
            raise SpecError("users", f"must be >= 1, got {self.users!r}")
        if self.think_time_s < 0:
            raise SpecError("think_time", f"must be >= 0, got {self.think_time_s!r}")
        if self.profile is not None and self.process in ("closed", "replay"):
            raise SpecError("profile", f"a rate profile needs an open-loop process "
                            f"(constant, poisson, gamma), not {self.process!r}")
        if self.process == "replay" and self.log is None:
            raise SpecError("file", "the replay process needs an arrival log file")
        if not self.speed > 0:
            raise SpecError("speed", f"must be > 0, got {self.speed!r}")
        if self.max_rate is not None:
            if self.process != "replay":
                raise SpecError("max_rate", "only for `process: replay`")
            if not (self.max_rate > 0) or self.max_rate > 1_000_000:
                raise SpecError("max_rate", f"must be a rate in (0, 1000000] requests/s, got {self.max_rate!r}")
        if self.max_concurrency is not None:
            if self.process == "closed":
                raise SpecError("max_concurrency", "a closed loop's concurrency is its number of users; "
                                "max_concurrency caps an open-loop schedule")
            if isinstance(self.max_concurrency, bool) or not isinstance(self.max_concurrency, int) \
                    or self.max_concurrency < 1:
                raise SpecError("max_concurrency", f"must be an integer >= 1, got {self.max_concurrency!r}")
        if self.sessions is not None:
            if self.process == "replay":
                raise SpecError("sessions", "sessions start on a closed loop or an open-loop rate, not a replay")
            if self.think_time_s:
                raise SpecError("think_time", "a session's think time is sessions.think_time")

    @property
    def open_loop(self) -> bool:
        """True when requests follow a schedule (everything but ``closed``)."""
        return self.process != "closed"

    def describe(self) -> dict:
        """The arrival process as plain JSON values, for the manifest and the report."""
        if self.process == "closed":
            out = {"loop": "closed", "process": "closed", "users": self.users, "think_time_s": self.think_time_s}
            if self.sessions is not None:
                out["sessions"] = self.sessions.describe()
            return out
        out: dict[str, Any] = {"loop": "open", "process": self.process}
        if self.process == "replay":
            out.update(file=self.log.path, format=self.log.format, arrivals=int(len(self.log.offsets_ns)),
                       speed=self.speed, loop_log=self.loop)
            if self.max_rate is not None:
                out["max_rate"] = self.max_rate
            if self.log.slice_s is not None:
                out["slice_s"] = list(self.log.slice_s)
            if self.log.requests is not None:
                out["trace"] = self.log.requests.describe()
            return out
        out["rate"] = self.rate
        if self.process == "gamma":
            out["burstiness"] = self.burstiness
        if self.profile is not None:
            out["profile"] = self.profile.describe()
        if self.max_concurrency is not None:
            out["max_concurrency"] = self.max_concurrency
        if self.sessions is not None:
            out["sessions"] = self.sessions.describe()
        return out


SIZE_DISTRIBUTIONS = ("fixed", "uniform", "lognormal", "empirical")


@dataclass(frozen=True)
class SizeSpec:
    """A payload size distribution, in bytes (or characters for text; tokens for
    an OpenAI-API class's ``prompt_tokens`` and ``output_tokens``).

    - ``fixed``: always ``value``.
    - ``uniform``: integers in [``min``, ``max``].
    - ``lognormal``: median ``median``, log-space std-dev ``sigma``, clipped to
      [``min``, ``max``].
    - ``empirical``: one of ``values`` (sizes read from ``file``), each equally
      likely: the recorded distribution, replayed.
    """

    dist: str = "fixed"
    value: int = 256
    min: int = 1
    max: int = 1 << 20
    median: float = 256.0
    sigma: float = 0.5
    values: np.ndarray | None = field(default=None, compare=False)  # empirical: sizes (int64)
    file: str | None = None  # empirical: where the sizes came from

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
        if self.dist == "empirical" and (self.values is None or len(self.values) == 0):
            raise SpecError("file", "the empirical distribution needs a file of sizes (one per line)")


PAYLOAD_KINDS = ("none", "fixed", "random_text", "random_bytes", "json_text", "template", "replay")
REPLAY_ORDERS = ("sequential", "random")


@dataclass(frozen=True)
class PayloadSpec:
    """How a request body is made.

    - ``none``: no body.
    - ``fixed``: ``body`` verbatim.
    - ``random_text``: words of random letters, total length drawn from ``size``.
    - ``random_bytes``: random bytes, length drawn from ``size``.
    - ``json_text``: ``{"<field>": "<random_text>"}`` with the text length from ``size``.
    - ``template``: ``body`` with random fields filled in per request:
      ``{{int:LO:HI}}``, ``{{float:LO:HI}}``, ``{{choice:a|b|c}}``,
      ``{{text:N}}`` / ``{{text:MIN:MAX}}`` (random words, N characters),
      ``{{text}}`` (length from ``size``), ``{{uuid}}`` (see
      :mod:`tailscope.loadgen.templates`).
    - ``replay``: recorded bodies (``bodies``, one JSON document per line of
      ``file``), in ``order`` ``sequential`` (wrapping around) or ``random``.
    """

    kind: str = "none"
    body: str = ""
    size: SizeSpec = field(default_factory=SizeSpec)
    field: str = "text"  # json_text only
    bodies: tuple[bytes, ...] = dataclasses.field(default=(), compare=False)  # replay only
    file: str | None = None  # replay: where the bodies came from
    order: str = "sequential"  # replay only

    def __post_init__(self):
        if self.kind not in PAYLOAD_KINDS:
            raise SpecError("kind", f"unknown payload kind {self.kind!r}; "
                            f"expected one of {', '.join(PAYLOAD_KINDS)}")
        if self.kind == "template":
            from tailscope.loadgen.templates import TemplateError, parse_template

            try:
                parse_template(self.body)
            except TemplateError as exc:
                raise SpecError("body", str(exc)) from None
        if self.kind == "replay" and not self.bodies:
            raise SpecError("file", "the replay payload needs a JSON-lines file of bodies")
        if self.order not in REPLAY_ORDERS:
            raise SpecError("order", f"unknown order {self.order!r}; expected one of {', '.join(REPLAY_ORDERS)}")


LLM_APIS = ("openai-chat", "openai-completions", "openai-embeddings", "rerank", "score")
#: The APIs that generate no tokens: embeddings, and rerank / score (``tailscope.loadgen.llm_features``).
NON_GENERATING_APIS = ("openai-embeddings", "rerank", "score")
#: The path each API is served on (a class's ``path`` overrides it, e.g. behind a proxy prefix).
LLM_API_PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-completions": "/v1/completions",
    "openai-embeddings": "/v1/embeddings",
    "rerank": "/v1/rerank",
    "score": "/v1/score",
}
#: Output length when a class gives no ``output_tokens`` (and a dataset turn has no recorded reply).
DEFAULT_OUTPUT_TOKENS = 128
#: Longest prompt or output a class may ask for, tokens.
MAX_TOKENS_LIMIT = 1 << 20
MESSAGE_ROLES = ("system", "user", "assistant")


@dataclass(frozen=True, eq=False)
class LLMDataset:
    """Recorded conversations to replay as prompts (read from ``path``, a JSONL file).

    ``conversations``: each a tuple of ``(role, content)`` messages, role in
    :data:`MESSAGE_ROLES`, with at least one ``user`` message. Every user
    message is one request, sent with all the messages before it (the
    conversation's history, the recorded assistant replies included);
    ``order`` ``sequential`` walks the conversations in file order (wrapping
    around), ``random`` picks the next conversation at random (seeded), and
    in both a conversation's turns go in order.
    """

    path: str
    conversations: tuple[tuple[tuple[str, str], ...], ...]
    order: str = "sequential"

    def __post_init__(self):
        if not self.conversations:
            raise SpecError("dataset", f"{self.path}: no conversations in the file")
        if self.order not in REPLAY_ORDERS:
            raise SpecError("dataset_order", f"unknown order {self.order!r}; expected one of "
                            f"{', '.join(REPLAY_ORDERS)}")

    @property
    def turns(self) -> int:
        """Requests one pass over the dataset makes (user messages), count."""
        return sum(1 for c in self.conversations for role, _ in c if role == "user")


PREFIX_CHOICES = ("uniform", "zipf")
#: Most system prompts a prefix pool may hold.
MAX_PREFIX_PROMPTS = 4096


@dataclass(frozen=True)
class PrefixPool:
    """``prompts`` shared system prompts (a pool of prefixes), their lengths drawn once from
    ``tokens`` (a :class:`SizeSpec` in tokens) by a generator seeded by the class name, so the
    pool is the same in every worker and run; each request takes one, chosen ``uniform``-ly or
    by ``zipf`` (prompt ``k`` of 1..K with weight ``1 / k**zipf_s``: a few hot prefixes, a long
    tail)."""

    prompts: int
    tokens: SizeSpec
    choice: str = "uniform"
    zipf_s: float = 1.0

    def __post_init__(self):
        if isinstance(self.prompts, bool) or not isinstance(self.prompts, int) \
                or not 1 <= self.prompts <= MAX_PREFIX_PROMPTS:
            raise SpecError("prompts", f"must be an integer between 1 and {MAX_PREFIX_PROMPTS}, got {self.prompts!r}")
        if _size_upper(self.tokens) > MAX_TOKENS_LIMIT:
            raise SpecError("tokens", f"at most {MAX_TOKENS_LIMIT} tokens")
        if self.choice not in PREFIX_CHOICES:
            raise SpecError("choice", f"expected one of {', '.join(PREFIX_CHOICES)}, got {self.choice!r}")
        if not (self.zipf_s > 0):
            raise SpecError("zipf_s", f"must be > 0, got {self.zipf_s!r}")

    def weights(self) -> np.ndarray:
        """Probability of each prompt (float64, sums to 1)."""
        if self.choice == "uniform":
            return np.full(self.prompts, 1.0 / self.prompts)
        raw = 1.0 / np.arange(1, self.prompts + 1, dtype=np.float64) ** self.zipf_s
        return raw / raw.sum()

    def describe(self) -> dict:
        out = {"prompts": self.prompts, "tokens": _describe_size(self.tokens), "choice": self.choice}
        if self.choice == "zipf":
            out["zipf_s"] = self.zipf_s
        return out


@dataclass(frozen=True)
class LLMSpec:
    """A request class that speaks an OpenAI-compatible API (``api``).

    Lengths are in tokens. ``prompt_tokens`` and ``output_tokens`` are
    :class:`SizeSpec` distributions (their ``value``/``min``/``max``/``median``
    read as tokens). A synthetic prompt is ``shared_prefix_tokens`` tokens
    common to every request of the class followed by ``prompt_tokens`` drawn
    tokens: random words (one token per word, as the reference LLM server
    counts) or, with ``tokenizer`` (a local Hugging Face ``tokenizer.json``),
    random token ids whose text re-encodes to exactly that many tokens.
    ``dataset`` replaces synthetic prompts with recorded conversations
    (``prompt_tokens`` is then not used; the shared prefix becomes a system
    message). ``output_tokens`` sets ``max_tokens`` (default: a dataset turn's
    recorded reply length, else :data:`DEFAULT_OUTPUT_TOKENS`); ``ignore_eos``
    (sent only when true) asks the server to generate exactly that many.
    ``stream`` (chat, completions) adds ``stream_options: {include_usage:
    true}``. ``extra_body`` is merged last, key by key, into the JSON body
    (so it can override any of the above). Embeddings generate nothing:
    ``output_tokens``, ``ignore_eos`` and ``stream`` do not apply.
    ``prefix_pool`` replaces the one shared prefix with a pool of them
    (:class:`PrefixPool`). ``trace`` (set from a replayed LLM trace's arrival
    log, :class:`~.trace_files.TraceRequests`): each request's prompt and
    output lengths (and Mooncake's shared blocks) come from its trace row.
    """

    api: str
    model: str
    prompt_tokens: SizeSpec = field(default_factory=SizeSpec)
    output_tokens: SizeSpec | None = None
    ignore_eos: bool = True
    stream: bool = True
    extra_body: dict[str, Any] = field(default_factory=dict)
    shared_prefix_tokens: int = 0
    tokenizer: str | None = None
    dataset: LLMDataset | None = None
    #: Chat options (``tailscope.loadgen.llm_features``): ``reasoning_effort`` sent as is; ``tools``
    #: (OpenAI function tools, JSON values) and ``tool_choice`` (auto | required | none | a tool's name).
    reasoning_effort: str | None = None
    tools: tuple = ()
    tool_choice: str | None = None
    #: Chat: images per request and their sizes (``tailscope.loadgen.llm_images.ImageSpec``), or None.
    images: Any = None
    #: Rerank and score: the documents per request (``tailscope.loadgen.llm_features.RankingSpec``).
    ranking: Any = None
    prefix_pool: PrefixPool | None = None
    trace: TraceRequests | None = field(default=None, compare=False)

    def __post_init__(self):
        if self.api not in LLM_APIS:
            raise SpecError("api", f"unknown api {self.api!r}; expected one of {', '.join(LLM_APIS)}")
        if not isinstance(self.model, str) or not self.model:
            raise SpecError("model", "missing: the served model's name (as the server's /v1/models lists it)")
        for name in ("prompt_tokens", "output_tokens"):
            size = getattr(self, name)
            if size is not None and _size_upper(size) > MAX_TOKENS_LIMIT:
                raise SpecError(name, f"at most {MAX_TOKENS_LIMIT} tokens")
        if self.output_tokens is not None and _size_lower(self.output_tokens) < 1:
            raise SpecError("output_tokens", "must be >= 1 token (max_tokens 0 generates nothing)")
        if not (isinstance(self.shared_prefix_tokens, int) and 0 <= self.shared_prefix_tokens <= MAX_TOKENS_LIMIT):
            raise SpecError("shared_prefix_tokens", f"must be an integer between 0 and {MAX_TOKENS_LIMIT}, "
                            f"got {self.shared_prefix_tokens!r}")
        if not isinstance(self.extra_body, dict):
            raise SpecError("extra_body", "expected a mapping of JSON fields")
        if self.prefix_pool is not None and self.shared_prefix_tokens:
            raise SpecError("shared_prefix_tokens", "either a number of tokens or a pool, not both")
        if self.trace is not None:
            if not self.generates or self.dataset is not None:
                raise SpecError("api", "a replayed LLM trace needs a chat or completions class without a dataset")
            if self.shared_prefix_tokens or self.prefix_pool is not None:
                raise SpecError("shared_prefix_tokens", "not with a replayed LLM trace (its rows give whole prompts)")
        if not self.generates:
            what = "embeddings" if self.api == "openai-embeddings" else f"{self.api} requests"
            if self.output_tokens is not None:
                raise SpecError("output_tokens", f"{what} generate no tokens; remove output_tokens")
            if self.stream:
                raise SpecError("stream", f"{what} are not streamed; remove stream or set it to false")

    @property
    def generates(self) -> bool:
        """True when the API generates tokens (chat, completions), False for embeddings, rerank and score."""
        return self.api not in NON_GENERATING_APIS

    def describe(self) -> dict:
        """The class's API settings as plain JSON values (for the manifest and the report)."""
        out: dict[str, Any] = {"api": self.api, "model": self.model, "stream": self.stream}
        if self.dataset is not None:
            out["dataset"] = {"file": self.dataset.path, "conversations": len(self.dataset.conversations),
                              "turns": self.dataset.turns, "order": self.dataset.order}
        elif self.trace is not None:
            out["prompt_tokens"] = "trace"
        else:
            out["prompt_tokens"] = _describe_size(self.prompt_tokens)
        if self.generates:
            out["output_tokens"] = (_describe_size(self.output_tokens) if self.output_tokens is not None
                                    else ("dataset" if self.dataset is not None else
                                          "trace" if self.trace is not None else DEFAULT_OUTPUT_TOKENS))
            out["ignore_eos"] = self.ignore_eos
        if self.shared_prefix_tokens:
            out["shared_prefix_tokens"] = self.shared_prefix_tokens
        if self.prefix_pool is not None:
            out["prefix_pool"] = self.prefix_pool.describe()
        if self.tokenizer:
            out["tokenizer"] = self.tokenizer
        if self.extra_body:
            out["extra_body"] = sorted(self.extra_body)
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        if self.tools:
            out["tools"] = [tool["function"]["name"] for tool in self.tools]
            out["tool_choice"] = self.tool_choice or "auto"
        if self.images is not None:
            out["images"] = self.images.describe()
        if self.ranking is not None:
            out.update(self.ranking.describe())
        return out


def _size_upper(size: SizeSpec) -> int:
    """Largest value a size distribution can give."""
    if size.dist == "fixed":
        return size.value
    if size.dist == "empirical":
        return int(size.values.max())
    return size.max


def _size_lower(size: SizeSpec) -> int:
    """Smallest value a size distribution can give."""
    if size.dist == "fixed":
        return size.value
    if size.dist == "empirical":
        return int(size.values.min())
    return size.min


def _describe_size(size: SizeSpec) -> dict:
    if size.dist == "fixed":
        return {"dist": "fixed", "value": size.value}
    if size.dist == "uniform":
        return {"dist": "uniform", "min": size.min, "max": size.max}
    if size.dist == "lognormal":
        return {"dist": "lognormal", "median": size.median, "sigma": size.sigma, "min": size.min, "max": size.max}
    return {"dist": "empirical", "file": size.file, "values": int(len(size.values))}


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
    #: An OpenAI-compatible API class: the body is built from it (``payload`` unused),
    #: the method is POST and ``stream`` follows ``llm.stream``.
    llm: LLMSpec | None = None

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise SpecError("name", "every request class needs a name")
        if self.llm is not None and not self.path:
            object.__setattr__(self, "path", LLM_API_PATHS[self.llm.api])
        if not isinstance(self.path, str) or not self.path.startswith("/"):
            raise SpecError("path", f"must start with '/', got {self.path!r}")
        if not (self.weight > 0):
            raise SpecError("weight", f"must be > 0, got {self.weight!r}")
        if self.method not in HTTP_METHODS:
            raise SpecError("method", f"unknown HTTP method {self.method!r}")
        if self.llm is not None:
            if self.method != "POST":
                raise SpecError("method", f"an {self.llm.api} class sends POST, not {self.method}")
            if self.payload.kind != "none":
                raise SpecError("payload", f"an {self.llm.api} class builds its own body "
                                "(prompt_tokens, dataset, extra_body); remove payload")
            object.__setattr__(self, "stream", self.llm.stream)

    @property
    def api(self) -> str | None:
        """The OpenAI-compatible API this class speaks, or None for plain HTTP."""
        return self.llm.api if self.llm is not None else None


IN_FLIGHT_POLICIES = ("wait", "drop")


@dataclass(frozen=True)
class LoadPlan:
    """Everything the load generator needs for one run. Every run is bounded:
    it stops after ``duration_s`` or ``max_requests``, whichever comes first.

    ``max_in_flight`` is lowered to ``arrival.max_concurrency`` when that is
    smaller (the arrival's cap is the plan's cap)."""

    target: str  # base URL, e.g. http://127.0.0.1:8000
    duration_s: float
    arrival: ArrivalSpec
    classes: tuple[RequestClass, ...]
    max_requests: int = 1_000_000
    seed: int = 1
    timeout_s: float = 10.0  # client timeout per request
    max_in_flight: int = 1000  # cap on concurrent requests; waiting counts in latency
    #: When the cap is reached: "wait" (send when a slot frees; the wait counts in
    #: latency) or "drop" (record the request as error_kind "dropped", never sent).
    in_flight_policy: str = "wait"
    #: Share of requests whose traceparent carries the sampled flag (head sampling; 1: all).
    trace_sample_rate: float = 1.0
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
        cap = self.arrival.max_concurrency
        if cap is not None and cap < self.max_in_flight:
            object.__setattr__(self, "max_in_flight", cap)
        if not (0.0 <= self.trace_sample_rate <= 1.0):
            raise SpecError("trace_sample_rate", f"must be between 0 and 1, got {self.trace_sample_rate!r}")
        if self.in_flight_policy not in IN_FLIGHT_POLICIES:
            raise SpecError("in_flight_policy", f"unknown policy {self.in_flight_policy!r}; expected one of "
                            f"{', '.join(IN_FLIGHT_POLICIES)}")
