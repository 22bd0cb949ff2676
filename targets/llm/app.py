"""The LLM reference server as an ASGI application (no web framework).

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions`` (streamed as
server-sent events with ``stream: true``, else one JSON response),
``POST /v1/embeddings``, ``GET /v1/models``, ``GET /version`` (``{"version": <tailscope
version>}``, as vLLM answers it), ``GET /health`` (200 while the
engine runs, else 503), ``GET /metrics`` (Prometheus text, vLLM's names) and
``GET /debug/requests[?request_id=ID]`` (the server's own timing records of
finished requests, :class:`~.spans.RequestRecorder`). Errors are OpenAI error
JSON: 400 invalid request, 404 unknown route or model, 405 wrong method, 413
body too large, 429 too many waiting requests, 503 engine not running.

A request's arrival time (the ``llm_request`` span's start) is taken when the
app receives it; its trace context is the incoming W3C ``traceparent`` /
``tracestate`` (:func:`tailscope.tracing.kit.http_server.asgi_parent_context`).
The request id is ``X-Request-Id`` when given (echoed back as a header), else a
random one; chat responses are ``chatcmpl-<id>``, completions ``cmpl-<id>``
(the engine request ``cmpl-<id>-0``), as vLLM names them.

Streaming: each SSE event is ``data: <json>\\n\\n``; a chat stream opens with a
role chunk, content chunks carry every token that arrived since the previous
chunk (at least ``tokens_per_chunk`` of them unless the sequence ended), the
chunk with the last tokens carries ``finish_reason``, then the usage chunk
(``choices: []``) when ``stream_options.include_usage``, then ``data: [DONE]``.
A client that disconnects aborts its request in the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import trace

from tailscope.support.version import tailscope_version
from tailscope.targets.llm.config import LlmServerConfig
from tailscope.targets.llm.engine import Engine, EngineStoppedError, QueueFullError
from tailscope.targets.llm.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from tailscope.targets.llm.metrics import LlmMetrics
from tailscope.targets.llm.openai_api import (
    ARGUMENTS_CLOSE,
    ARGUMENTS_OPEN,
    CHAT,
    COMPLETION,
    GenerationRequest,
    OpenAIError,
    chat_delta_chunk,
    embedding_response,
    error_body,
    full_response,
    models_response,
    pair_score,
    parse_embedding,
    parse_generation,
    parse_ranking,
    ranking_response,
    stream_chunk,
    tool_call_delta,
    usage_chunk,
)
from tailscope.targets.llm.sequence import Sequence
from tailscope.targets.llm.spans import RequestRecorder
from tailscope.targets.llm.tokens import detokenize
from tailscope.targets.reference.app import SSE_CONTENT_TYPE, SSE_DONE, cancel_on_disconnect
from tailscope.targets.reference.asgi_io import HttpError, Receive, Send, header, json_bytes, read_body, send_response
from tailscope.tracing.kit.http_server import asgi_parent_context

CHAT_ROUTE = "/v1/chat/completions"
COMPLETIONS_ROUTE = "/v1/completions"
EMBEDDINGS_ROUTE = "/v1/embeddings"
RERANK_ROUTE = "/v1/rerank"
SCORE_ROUTE = "/v1/score"
MODELS_ROUTE = "/v1/models"
HEALTH_ROUTE = "/health"
VERSION_ROUTE = "/version"
METRICS_ROUTE = "/metrics"
DEBUG_REQUESTS_ROUTE = "/debug/requests"

Handler = Callable[[dict[str, Any], Receive, Send, int], Awaitable[None]]


async def send_openai_error(send: Send, error: OpenAIError) -> None:
    """Answer with ``error``'s status and its OpenAI error JSON."""
    await send_response(send, error.status, json_bytes(error_body(error)), "application/json")


class LlmApp:
    """ASGI app over one :class:`~.engine.Engine` (started and stopped by the lifespan protocol)."""

    def __init__(self, config: LlmServerConfig, tracer: trace.Tracer | None) -> None:
        self._config = config
        self.metrics = LlmMetrics(config.served_model_name, config.max_model_len)
        self.engine = Engine(config, self.metrics)
        self.recorder = RequestRecorder(tracer)
        self._created = int(time.time())
        self._routes: dict[str, tuple[str, Handler]] = {
            CHAT_ROUTE: ("POST", self._chat),
            COMPLETIONS_ROUTE: ("POST", self._completions),
            EMBEDDINGS_ROUTE: ("POST", self._embeddings),
            RERANK_ROUTE: ("POST", self._rerank),
            SCORE_ROUTE: ("POST", self._score),
            MODELS_ROUTE: ("GET", self._models),
            HEALTH_ROUTE: ("GET", self._health),
            VERSION_ROUTE: ("GET", self._version),
            METRICS_ROUTE: ("GET", self._metrics),
            DEBUG_REQUESTS_ROUTE: ("GET", self._debug_requests),
        }

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        arrival_ns = time.time_ns()
        route = self._routes.get(scope["path"])
        try:
            if route is None:
                raise OpenAIError(404, f"no route {scope['path']}")
            if scope["method"] != route[0]:
                raise OpenAIError(405, f"{scope['path']} accepts {route[0]} only")
            await route[1](scope, receive, send, arrival_ns)
        except OpenAIError as error:
            await send_openai_error(send, error)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.engine.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await asyncio.get_running_loop().run_in_executor(None, self.engine.stop)
                await send({"type": "lifespan.shutdown.complete"})
                return

    # ----------------------------------------------------------------- helpers

    async def _json_body(self, receive: Receive) -> Any:
        try:
            body = await read_body(receive, self._config.max_body_bytes)
        except HttpError as exc:
            raise OpenAIError(exc.status, exc.message) from exc
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise OpenAIError(400, f"body is not valid JSON: {exc}") from exc

    def _submit(self, seq: Sequence) -> None:
        try:
            self.engine.submit(seq)
        except QueueFullError as exc:
            raise OpenAIError(429, str(exc)) from exc
        except EngineStoppedError as exc:
            raise OpenAIError(503, str(exc)) from exc

    def _sequence(self, request_id: str, prompt_ids: list[int], scope: dict[str, Any], arrival_ns: int,
                  **options: Any) -> Sequence:
        return Sequence(request_id=request_id, prompt_ids=prompt_ids, arrival_ns=arrival_ns,
                        loop=asyncio.get_running_loop(), on_finish=self.recorder,
                        trace_context=asgi_parent_context(scope), **options)

    # ----------------------------------------------------------------- generation

    async def _chat(self, scope: dict[str, Any], receive: Receive, send: Send, arrival_ns: int) -> None:
        await self._generate(CHAT, scope, receive, send, arrival_ns)

    async def _completions(self, scope: dict[str, Any], receive: Receive, send: Send, arrival_ns: int) -> None:
        await self._generate(COMPLETION, scope, receive, send, arrival_ns)

    async def _generate(self, kind: str, scope: dict[str, Any], receive: Receive, send: Send,
                        arrival_ns: int) -> None:
        request = parse_generation(kind, await self._json_body(receive), self._config)
        base_id = header(scope, b"x-request-id") or uuid.uuid4().hex
        response_id = f"chatcmpl-{base_id}" if kind == CHAT else f"cmpl-{base_id}"
        seq = self._sequence(response_id if kind == CHAT else f"{response_id}-0", request.prompt_ids, scope,
                             arrival_ns, max_tokens=request.max_tokens, ignore_eos=request.ignore_eos,
                             params=request.params, reasoning_tokens=request.reasoning_tokens)
        self._submit(seq)
        echo = [(b"x-request-id", base_id.encode("latin-1"))]
        watcher = asyncio.get_running_loop().create_task(cancel_on_disconnect(receive, seq))
        try:
            if request.stream:
                await self._stream(kind, request, seq, response_id, send, echo)
            else:
                await self._respond(kind, request, seq, response_id, send, echo)
        finally:
            seq.cancel()  # no-op once finished; aborts it in the engine otherwise
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _respond(self, kind: str, request: GenerationRequest, seq: Sequence, response_id: str, send: Send,
                       echo: list[tuple[bytes, bytes]]) -> None:
        tokens: list[int] = []
        finished = False
        try:
            while not finished:
                new, finished = await seq.take()
                tokens.extend(new)
        except EngineStoppedError as exc:
            raise OpenAIError(503, str(exc)) from exc
        split = min(request.reasoning_tokens, len(tokens))
        finish = "tool_calls" if request.tool_name is not None and len(tokens) > split else seq.finish_reason
        body = json_bytes(full_response(kind, response_id, seq.arrival_ns // 1_000_000_000, self._config.served_model_name,
                                        detokenize(tokens[split:]), finish, len(seq.prompt_ids), len(tokens),
                                        reasoning=detokenize(tokens[:split]), reasoning_tokens=split,
                                        tool_name=request.tool_name if len(tokens) > split else None))
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *echo]})
        await send({"type": "http.response.body", "body": body})

    async def _stream(self, kind: str, request: GenerationRequest, seq: Sequence, response_id: str, send: Send,
                      echo: list[tuple[bytes, bytes]]) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", SSE_CONTENT_TYPE.encode()), (b"cache-control", b"no-cache"), *echo]})
        model, created, with_usage = self._config.served_model_name, seq.arrival_ns // 1_000_000_000, request.include_usage

        async def event(document: Any) -> None:
            await send({"type": "http.response.body", "body": b"data: " + json_bytes(document) + b"\n\n",
                        "more_body": True})

        pending: list[int] = []
        sent = 0
        finished = False
        reasoning, tool = request.reasoning_tokens, request.tool_name
        try:
            while not finished:
                new, finished = await seq.take()
                pending.extend(new)
                if not finished and len(pending) < self._config.tokens_per_chunk:
                    continue
                if kind == CHAT and sent == 0 and (pending or finished):
                    await event(stream_chunk(kind, response_id, created, model, role=True, include_usage=with_usage))
                thinking = pending[: max(0, reasoning - sent)]
                answer = pending[len(thinking):]
                if thinking:  # reasoning tokens go first, in a chunk of their own
                    await event(chat_delta_chunk(response_id, created, model,
                                                 {"reasoning_content": detokenize(thinking)},
                                                 include_usage=with_usage))
                if tool is not None and (answer or (finished and sent + len(pending) > reasoning)):
                    first = sent + len(thinking) == reasoning and bool(answer)
                    piece = (ARGUMENTS_OPEN if first else "") + detokenize(answer) + (ARGUMENTS_CLOSE if finished else "")
                    await event(chat_delta_chunk(response_id, created, model,
                                                 tool_call_delta(response_id, tool, piece, first),
                                                 "tool_calls" if finished else None, with_usage))
                elif answer or (finished and not thinking):
                    await event(stream_chunk(kind, response_id, created, model, text=detokenize(answer),
                                             finish_reason=seq.finish_reason if finished else None,
                                             include_usage=with_usage))
                elif finished:  # the reasoning took every token: a finish chunk without text
                    await event(chat_delta_chunk(response_id, created, model, {}, seq.finish_reason, with_usage))
                sent += len(pending)
                pending = []
            if with_usage:
                await event(usage_chunk(kind, response_id, created, model, len(seq.prompt_ids), sent,
                                        min(reasoning, sent)))
        except EngineStoppedError as exc:
            await event(error_body(OpenAIError(503, str(exc))))
        await send({"type": "http.response.body", "body": SSE_DONE, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # ----------------------------------------------------------------- embeddings

    async def _embeddings(self, scope: dict[str, Any], receive: Receive, send: Send, arrival_ns: int) -> None:
        request = parse_embedding(await self._json_body(receive), self._config)
        base_id = f"embd-{header(scope, b'x-request-id') or uuid.uuid4().hex}"
        seqs = [self._sequence(f"{base_id}-{i}", ids, scope, arrival_ns, max_tokens=1, pooling=True)
                for i, ids in enumerate(request.inputs)]
        try:
            for seq in seqs:
                self._submit(seq)
            for seq in seqs:
                while not (await seq.take())[1]:
                    pass
        except EngineStoppedError as exc:
            raise OpenAIError(503, str(exc)) from exc
        finally:
            for seq in seqs:
                seq.cancel()
        prompt_tokens = sum(len(ids) for ids in request.inputs)
        await self._send_json(send, embedding_response(self._config.served_model_name, [s.embedding for s in seqs],
                                                       request.encoding_format, prompt_tokens))

    # ----------------------------------------------------------------- rerank and score

    async def _rerank(self, scope: dict[str, Any], receive: Receive, send: Send, arrival_ns: int) -> None:
        await self._ranking("rerank", scope, receive, send, arrival_ns)

    async def _score(self, scope: dict[str, Any], receive: Receive, send: Send, arrival_ns: int) -> None:
        await self._ranking("score", scope, receive, send, arrival_ns)

    async def _ranking(self, kind: str, scope: dict[str, Any], receive: Receive, send: Send, arrival_ns: int) -> None:
        """One pooling sequence per query + document pair (a cross-encoder's prefill), scored from its vector."""
        request = parse_ranking(kind, await self._json_body(receive), self._config)
        base_id = f"{kind}-{header(scope, b'x-request-id') or uuid.uuid4().hex}"
        seqs = [self._sequence(f"{base_id}-{i}", request.query + ids, scope, arrival_ns, max_tokens=1, pooling=True)
                for i, ids in enumerate(request.documents)]
        try:
            for seq in seqs:
                self._submit(seq)
            for seq in seqs:
                while not (await seq.take())[1]:
                    pass
        except EngineStoppedError as exc:
            raise OpenAIError(503, str(exc)) from exc
        finally:
            for seq in seqs:
                seq.cancel()
        prompt_tokens = sum(len(seq.prompt_ids) for seq in seqs)
        await self._send_json(send, ranking_response(kind, base_id, self._created, self._config.served_model_name,
                                                     request, [pair_score(s.embedding) for s in seqs], prompt_tokens))

    # ----------------------------------------------------------------- the rest

    async def _send_json(self, send: Send, document: Any) -> None:
        await send_response(send, 200, json_bytes(document), "application/json")

    async def _models(self, scope: dict[str, Any], receive: Receive, send: Send, arrival_ns: int) -> None:
        await self._send_json(send, models_response(self._config, self._created))

    async def _version(self, scope: dict[str, Any], receive: Receive, send: Send, arrival_ns: int) -> None:
        await self._send_json(send, {"version": tailscope_version()})

    async def _health(self, scope: dict[str, Any], receive: Receive, send: Send, arrival_ns: int) -> None:
        if not self.engine.alive:
            raise OpenAIError(503, "the engine is not running")
        await send_response(send, 200, b"", "text/plain")

    async def _metrics(self, scope: dict[str, Any], receive: Receive, send: Send, arrival_ns: int) -> None:
        await send_response(send, 200, self.metrics.exposition(), METRICS_CONTENT_TYPE)

    async def _debug_requests(self, scope: dict[str, Any], receive: Receive, send: Send, arrival_ns: int) -> None:
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
        request_id = query.get("request_id", [None])[0]
        await self._send_json(send, {"requests": self.recorder.records(request_id)})
