"""The request mix: which class each request belongs to, and its body and headers.

No Locust or gevent import. Class choice and bodies are seeded (same seed, same
sequence of classes and bodies); trace ids come from a separate generator
seeded from OS entropy, so two runs (or two workers) never share a trace id.
An OpenAI-API class (``RequestClass.llm``) gets its JSON body from an
:class:`~.llm_requests.LLMRequestMaker`, and its prepared request carries what
the client knows of it (``PreparedRequest.llm``: prompt tokens, max_tokens);
its ``X-Request-Id`` header is its trace id. A multi-turn session's turns are
prepared from its :class:`~.llm_requests.Conversation` (:meth:`RequestMix.start_session`,
:meth:`RequestMix.prepare_turn`); its session id comes from the trace-id generator.
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass

import numpy as np

from tailscope.loadgen.llm_requests import Conversation, LLMRequestInfo, LLMRequestMaker
from tailscope.loadgen.payloads import PayloadMaker
from tailscope.loadgen.spec import RequestClass
from tailscope.loadgen.tracecontext import TRACEPARENT_HEADER, new_traceparent

#: OpenAI-API requests carry their trace id in this header (unless the class sets
#: one): vLLM and the LLM reference server name the request after it
#: (``chatcmpl-<trace id>``), a second join key beside the ``traceparent``.
REQUEST_ID_HEADER = "X-Request-Id"


@dataclass
class PreparedRequest:
    """One request ready to send: class, method, path, body, headers and trace id."""

    cls: RequestClass
    body: bytes
    headers: dict[str, str]
    trace_id: str
    #: The request's bytes on the wire, when built ahead of its send time
    #: (``Exchanger.encode``); None: built at send time.
    wire: bytes | None = None
    #: OpenAI-API classes: the client's facts about the request; None for plain HTTP.
    llm: LLMRequestInfo | None = None


class RequestMix:
    """Draws request classes by weight and prepares their requests.

    Not thread-safe: one mix per event loop. ``share`` ``(index, count)``: this mix prepares
    a distributed worker's share of the schedule (arrivals ``index``, ``index + count``, …),
    which a replayed LLM trace's rows follow.
    """

    def __init__(self, classes: tuple[RequestClass, ...], seed: int,
                 trace_rng: random.Random | None = None, trace_sample_rate: float = 1.0,
                 share: tuple[int, int] = (0, 1)):
        if not classes:
            raise ValueError("a request mix needs at least one class")
        self.classes = classes
        streams = np.random.SeedSequence(seed).spawn(len(classes) + 1)
        self._choice_rng = random.Random(int(streams[0].generate_state(1)[0]))
        self._makers = [LLMRequestMaker(c.name, c.llm, np.random.default_rng(s), share) if c.llm is not None
                        else PayloadMaker(c.payload, np.random.default_rng(s))
                        for c, s in zip(classes, streams[1:])]
        self._cumulative = list(itertools.accumulate(c.weight for c in classes))
        self._base_headers = [_base_headers(c, m) for c, m in zip(classes, self._makers)]
        self._request_id = [c.llm is not None and not any(k.lower() == REQUEST_ID_HEADER.lower() for k in c.headers)
                            for c in classes]
        self._trace_rng = trace_rng if trace_rng is not None else random.Random()
        self._trace_sample_rate = trace_sample_rate

    def draw_class(self) -> int:
        """Index of one class in ``classes``, with probability weight / sum of weights."""
        point = self._choice_rng.random() * self._cumulative[-1]
        return min(bisect.bisect_right(self._cumulative, point), len(self.classes) - 1)

    def prepare(self, index: int) -> PreparedRequest:
        """Body, headers (with a new ``traceparent``, head-sampled at the mix's rate) and trace id for class ``index``."""
        traceparent, trace_id = new_traceparent(self._trace_rng, self._trace_sample_rate)
        headers = dict(self._base_headers[index])
        headers[TRACEPARENT_HEADER] = traceparent
        maker = self._makers[index]
        if isinstance(maker, LLMRequestMaker):
            body, info = maker.make()
            if self._request_id[index]:
                headers[REQUEST_ID_HEADER] = trace_id
            return PreparedRequest(self.classes[index], body, headers, trace_id, llm=info)
        return PreparedRequest(self.classes[index], maker.make(), headers, trace_id)

    def start_session(self, index: int, turns: int | None) -> Conversation:
        """A new multi-turn session of OpenAI-API class ``index`` (``turns``: its turn count; None:
        a dataset conversation's), with a random session id from the trace-id generator."""
        maker = self._makers[index]
        if not isinstance(maker, LLMRequestMaker):
            raise ValueError(f"class {self.classes[index].name!r} is not an OpenAI-API class: no sessions")
        return maker.start_session(self._trace_rng.getrandbits(63) or 1, turns)

    def prepare_turn(self, index: int, conversation: Conversation) -> PreparedRequest:
        """The next turn of ``conversation`` (of class ``index``) ready to send, as :meth:`prepare`."""
        traceparent, trace_id = new_traceparent(self._trace_rng, self._trace_sample_rate)
        headers = dict(self._base_headers[index])
        headers[TRACEPARENT_HEADER] = traceparent
        body, info = self._makers[index].make_turn(conversation)
        if self._request_id[index]:
            headers[REQUEST_ID_HEADER] = trace_id
        return PreparedRequest(self.classes[index], body, headers, trace_id, llm=info)


def _base_headers(cls: RequestClass, maker: PayloadMaker | LLMRequestMaker) -> dict[str, str]:
    """The class's own headers, plus a Content-Type matching its payload when it sets none."""
    headers = dict(cls.headers)
    if maker.content_type and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = maker.content_type
    return headers
