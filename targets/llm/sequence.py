"""One request's state in the engine, its timings, and the stream of its tokens to the event loop.

Engine side (only the engine thread writes these): ``num_computed`` (context
tokens whose K/V are in the cache), ``output_ids`` (generated tokens, EOS
excluded), the timings and the finish reason. Tokens reach the event loop in
one ``call_soon_threadsafe`` per engine step (:func:`deliver`); the HTTP writer
awaits :meth:`Sequence.take`, which returns *every* token delivered since its
last call, so a writer that falls behind sends several tokens in one chunk.

Timings are epoch nanoseconds (``time.time_ns()``), as in OTLP; None until the
event happened:

* ``arrival_ns`` — the HTTP request reached the server (the span's start);
* ``queued_ns`` — handed to the engine;
* ``scheduled_ns`` — first scheduled into a step (later re-admissions after a
  preemption do not move it, as in vLLM's ``scheduled_ts``);
* ``first_token_ns`` / ``last_token_ns`` — end of the step that produced the
  first / last streamed token;
* ``finished_ns`` — end of the step that finished the request (the span's end);
* ``answer_token_ns`` — end of the step that produced output token number
  ``reasoning_tokens`` (0-based), the first one streamed as the answer (or the
  tool call) after the reasoning tokens.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from collections.abc import Sequence as SequenceOf
from dataclasses import dataclass, field
from typing import Any

FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_ABORT = "abort"

_ids = itertools.count(1)
_log = logging.getLogger(__name__)


class EngineStoppedError(RuntimeError):
    """The engine stopped before the request finished (server shutdown)."""


@dataclass(eq=False)
class Sequence:
    """A generation (or, with ``pooling``, an embedding) request; hashable by identity."""

    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    ignore_eos: bool = False
    pooling: bool = False
    arrival_ns: int = 0
    loop: asyncio.AbstractEventLoop | None = None
    #: Called on the event loop once, after the last delivery (spans, timing records).
    on_finish: Callable[[Sequence], None] | None = None
    #: Request parameters recorded on the span (``max_tokens``, ``temperature``, ``top_p``, ``n``), as given.
    params: dict[str, Any] = field(default_factory=dict)
    trace_context: Any = None
    seq_no: int = field(default_factory=lambda: next(_ids))
    #: Output tokens streamed as reasoning (``reasoning_content``) before the answer or tool call.
    reasoning_tokens: int = 0

    # engine side
    output_ids: list[int] = field(default_factory=list)
    num_computed: int = 0
    num_preemptions: int = 0
    queued_ns: int | None = None
    scheduled_ns: int | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    answer_token_ns: int | None = None
    finished_ns: int | None = None
    finish_reason: str | None = None
    embedding: Any = None
    cancelled: bool = False
    #: Prompt tokens taken from the prefix cache at the (last) admission, not computed.
    cached_tokens: int = 0
    #: The prompt's full-block prefix hashes (:func:`~.kv_cache.block_hashes`), once computed.
    block_hashes: list[int] | None = None

    # event-loop side
    _pending: list[int] = field(default_factory=list)
    _done: bool = False
    _error: BaseException | None = None
    _event: asyncio.Event | None = None

    # ------------------------------------------------------------------ engine side

    @property
    def num_tokens(self) -> int:
        """Context length once every token is computed: prompt + generated tokens."""
        return len(self.prompt_ids) + len(self.output_ids)

    def token_at(self, start: int, stop: int) -> list[int]:
        """Token ids of context positions ``start .. stop-1`` (prompt, then output)."""
        prompt = self.prompt_ids
        if stop <= len(prompt):
            return prompt[start:stop]
        return (prompt + self.output_ids)[start:stop]

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def cancel(self) -> None:
        """Ask the engine to abort this request at its next step (the client went away)."""
        self.cancelled = True

    # ------------------------------------------------------------------ event-loop side

    async def take(self) -> tuple[list[int], bool]:
        """Wait for tokens; return ``(every token delivered since the last call, finished)``.

        Raises :class:`EngineStoppedError` when the engine stopped first. Call from the event loop.
        """
        if self._event is None:
            self._event = asyncio.Event()
        while not self._pending and not self._done:
            self._event.clear()
            await self._event.wait()
        tokens, self._pending = self._pending, []
        if self._error is not None and not tokens:
            raise self._error
        return tokens, self._done and self._error is None

    def _receive(self, tokens: SequenceOf[int], finished: bool, error: BaseException | None) -> None:
        self._pending.extend(tokens)
        if finished:
            self._done = True
            self._error = error
        if self._event is None:
            self._event = asyncio.Event()
        self._event.set()


Delivery = tuple[Sequence, list[int], bool, "BaseException | None"]


def _deliver_on_loop(deliveries: list[Delivery]) -> None:
    for seq, tokens, finished, error in deliveries:
        seq._receive(tokens, finished, error)
        if finished and seq.on_finish is not None:
            try:
                seq.on_finish(seq)
            except Exception:  # noqa: BLE001 - one request's bookkeeping must not stop the others' delivery
                _log.exception("on_finish of request %s failed", seq.request_id)


def deliver(deliveries: list[Delivery]) -> None:
    """Hand a step's ``(sequence, new tokens, finished, error)`` items to their event loops, one call per loop.

    Call from the engine thread. A closed loop (nobody listening any more) is skipped.
    """
    by_loop: dict[asyncio.AbstractEventLoop, list[Delivery]] = {}
    for item in deliveries:
        loop = item[0].loop
        if loop is not None:
            by_loop.setdefault(loop, []).append(item)
    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_deliver_on_loop, items)
        except RuntimeError:  # the event loop closed
            pass
