"""The reference inference service as an ASGI application.

Routes: ``POST /v1/infer/text`` (JSON ``{"text": ...}`` or raw text),
``POST /v1/infer/image`` (raw bytes, a square RGB buffer), ``POST
/v1/generate`` (JSON ``{"prompt", "max_tokens"}``, answered as server-sent
events), ``GET /healthz``; with ``admin`` on, the fault switches ``POST
/admin/gc_pressure``, ``POST /admin/io_stall`` and ``GET /admin/state``; with
``metrics`` on, ``GET /metrics`` (Prometheus text format).
Each inference request goes preprocess (event loop) → dynamic batcher → model
(worker thread) → postprocess (event loop), with a stage span per step; the
SERVER span around them comes from :class:`tailscope.tracing.kit.TraceContextMiddleware`.
Generation streams go preprocess → decode scheduler (continuous batching,
:mod:`tailscope.targets.reference.generation`) → one SSE event per token.
Status codes: 400 bad input, 404/405 unknown route/method, 413 body too large,
429 batcher queue full, 503 shutting down.

Preprocessing also does what the config and the admin switches ask of every
request: read a slice of the resident working set (``resident_mb``), create
cyclic garbage (``preprocess_garbage``) and write + fsync (io stall).

The ASGI ``lifespan`` protocol starts and stops the batchers and the model
thread pool; serve the app with a server that runs lifespan (uvicorn does).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from tailscope.targets.reference.asgi_io import (
    HttpError,
    Receive,
    Send,
    header,
    json_bytes,
    read_body,
    send_error,
    send_json,
    send_response,
)
from tailscope.targets.reference.batcher import BatcherStoppedError, BatchPolicy, DynamicBatcher, QueueFullError
from tailscope.targets.reference.config import TargetConfig
from tailscope.targets.reference.fsync_writes import IoStall
from tailscope.targets.reference.gc_load import GcPressure, make_request_garbage
from tailscope.targets.reference.generation import DecoderModel, DecodeScheduler
from tailscope.targets.reference.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from tailscope.targets.reference.metrics import TargetMetrics
from tailscope.targets.reference.model import ReferenceModel
from tailscope.targets.reference.pipeline import ModelOutput, TracedBatchRunner
from tailscope.targets.reference.postprocessing import top_classes
from tailscope.targets.reference.preprocessing import InvalidInputError, decode_image, text_from_body, tokenize
from tailscope.targets.reference.resident import ResidentSet
from tailscope.tracing import kit

TEXT_ROUTE = "/v1/infer/text"
IMAGE_ROUTE = "/v1/infer/image"
GENERATE_ROUTE = "/v1/generate"
HEALTH_ROUTE = "/healthz"
METRICS_ROUTE = "/metrics"
ADMIN_GC_PRESSURE_ROUTE = "/admin/gc_pressure"
ADMIN_IO_STALL_ROUTE = "/admin/io_stall"
ADMIN_STATE_ROUTE = "/admin/state"
SSE_CONTENT_TYPE = "text/event-stream"
#: The last server-sent event of a generation stream.
SSE_DONE = b"data: [DONE]\n\n"

Handler = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]


def batch_policy(config: TargetConfig) -> BatchPolicy:
    """The batcher rules the config asks for."""
    return BatchPolicy(
        max_batch_size=config.max_batch_size,
        max_queue_delay_ns=int(config.max_queue_delay_ms * 1_000_000),
        max_queue_size=config.max_queue_size,
        preferred_batch_sizes=config.preferred_batch_sizes,
    )


class InferenceApp:
    """ASGI app: one dynamic batcher (and ``model_workers`` executing batches) per model: text, image."""

    def __init__(self, config: TargetConfig, model: ReferenceModel, tracer: trace.Tracer) -> None:
        self._config = config
        self._model = model
        self._tracer = tracer
        self._executor: ThreadPoolExecutor | None = None
        self._text_batcher: DynamicBatcher[Any, ModelOutput] | None = None
        self._image_batcher: DynamicBatcher[Any, ModelOutput] | None = None
        self._decoder: DecodeScheduler | None = None
        self._metrics = TargetMetrics() if config.metrics else None
        self._resident = ResidentSet(config.resident_mb, config.resident_touch_kb, config.seed)
        self._gc_pressure = GcPressure()
        self._io_stall = IoStall(config.io_dir)
        self._routes: dict[str, tuple[str, Handler]] = {
            TEXT_ROUTE: ("POST", self._infer_text),
            IMAGE_ROUTE: ("POST", self._infer_image),
            GENERATE_ROUTE: ("POST", self._generate),
            HEALTH_ROUTE: ("GET", self._health),
        }
        if config.admin:
            self._routes[ADMIN_GC_PRESSURE_ROUTE] = ("POST", self._admin_gc_pressure)
            self._routes[ADMIN_IO_STALL_ROUTE] = ("POST", self._admin_io_stall)
            self._routes[ADMIN_STATE_ROUTE] = ("GET", self._admin_state)
        if config.metrics:
            self._routes[METRICS_ROUTE] = ("GET", self._serve_metrics)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            if self._metrics is not None:
                send = self._counting(scope["path"], send)
            try:
                await self._route(scope, receive, send)
            except HttpError as error:
                await send_error(send, error)

    def _counting(self, path: str, send: Send) -> Send:
        """``send`` that counts the response status in the metrics (unknown paths as ``other``)."""
        route = path if path in self._routes else "other"
        metrics = self._metrics
        assert metrics is not None

        async def counting_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                metrics.count_request(route, message["status"])
            await send(message)

        return counting_send

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Create the model thread pool and start both batchers (in the running event loop)."""
        workers = self._config.model_workers
        self._executor = ThreadPoolExecutor(max_workers=2 * workers, thread_name_prefix="model")
        self._text_batcher = self._make_batcher("text", self._model.classify_texts)
        self._image_batcher = self._make_batcher("image", self._model.classify_images)
        await self._text_batcher.start()
        await self._image_batcher.start()
        self._decoder = DecodeScheduler(
            DecoderModel(self._config.model_dim, self._config.seed),
            self._tracer,
            max_streams=self._config.decode_max_streams,
            max_queue_size=self._config.max_queue_size,
            extra_delay_s=self._config.decode_extra_delay_ms / 1000.0,
            metrics=self._metrics,
        )
        self._decoder.start()
        if self._metrics is not None:
            self._metrics.watch_queue_depth("text", lambda: self._text_batcher.depth if self._text_batcher else 0)
            self._metrics.watch_queue_depth("image", lambda: self._image_batcher.depth if self._image_batcher else 0)
            self._metrics.watch_queue_depth("generate", lambda: self._decoder.depth if self._decoder else 0)
            self._metrics.watch_decode_streams(lambda: self._decoder.active if self._decoder else 0)
        if self._config.gc_pressure_mb_per_s > 0:
            self._gc_pressure.configure(True, self._config.gc_pressure_mb_per_s, self._config.gc_retained_mb)
        if self._config.io_stall_kb > 0:
            self._io_stall.configure(True, self._config.io_stall_kb)

    async def stop(self) -> None:
        """Stop the batchers (executing batches finish) and the thread pool."""
        for batcher in (self._text_batcher, self._image_batcher):
            if batcher is not None:
                await batcher.stop()
        if self._decoder is not None:
            self._decoder.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self._gc_pressure.close()
        self._io_stall.close()

    def _make_batcher(self, model_name: str, model_fn: Callable[[list[Any]], Any]) -> DynamicBatcher[Any, ModelOutput]:
        assert self._executor is not None
        runner = TracedBatchRunner(
            model_name,
            model_fn,
            self._tracer,
            queue_capacity=self._config.max_queue_size,
            extra_delay_s=self._config.model_extra_delay_ms / 1000.0,
            metrics=self._metrics,
        )
        return DynamicBatcher(runner, batch_policy(self._config), self._executor, self._config.model_workers)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.start()
                except Exception as exc:  # noqa: BLE001 - reported to the server through the protocol
                    await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # ----------------------------------------------------------------- routes

    async def _route(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        route = self._routes.get(scope["path"])
        if route is None:
            raise HttpError(404, f"no route {scope['path']}")
        method, handler = route
        if scope["method"] != method:
            raise HttpError(405, f"{scope['path']} accepts {method} only")
        await handler(scope, receive, send)

    async def _health(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        await send_response(send, 200, b"ok", "text/plain")

    async def _infer_text(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        body = await read_body(receive, self._config.max_body_bytes)
        with kit.preprocess(self._tracer, **{"request.bytes": len(body)}) as span:
            try:
                text = text_from_body(body, header(scope, b"content-type"))
            except InvalidInputError as exc:
                raise HttpError(400, str(exc)) from exc
            token_ids = tokenize(text, self._model.vocab_size, self._config.max_tokens)
            span.set_attribute("request.tokens", len(token_ids))
            self._request_side_work(span)
        output = await self._submit(self._text_batcher, token_ids)
        with kit.postprocess(self._tracer):
            payload = json_bytes(self._prediction(output, tokens=len(token_ids)))
        await send_response(send, 200, payload, "application/json")

    async def _infer_image(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        body = await read_body(receive, self._config.max_body_bytes)
        with kit.preprocess(self._tracer, **{"request.bytes": len(body)}) as span:
            try:
                image = decode_image(body)
            except InvalidInputError as exc:
                raise HttpError(400, str(exc)) from exc
            self._request_side_work(span)
        output = await self._submit(self._image_batcher, image)
        with kit.postprocess(self._tracer):
            payload = json_bytes(self._prediction(output, input_bytes=len(body)))
        await send_response(send, 200, payload, "application/json")

    async def _submit(self, batcher: DynamicBatcher[Any, ModelOutput] | None, payload: Any) -> ModelOutput:
        if batcher is None:
            raise HttpError(503, "the service is not started")
        try:
            return await batcher.submit(payload, otel_context.get_current())
        except QueueFullError as exc:
            raise HttpError(429, str(exc)) from exc
        except BatcherStoppedError as exc:
            raise HttpError(503, str(exc)) from exc

    def _request_side_work(self, span: Any) -> None:
        """Resident-set read, request garbage and io-stall write, as configured; facts go on ``span``."""
        pages = self._resident.read_slice()
        if pages:
            span.set_attribute("resident.pages_read", pages)
        if self._config.preprocess_garbage:
            span.set_attribute("gc.garbage_cycles", make_request_garbage(self._config.preprocess_garbage))
        fsync_ms = self._io_stall.write()
        if fsync_ms is not None:
            span.set_attribute("io.fsync_ms", round(fsync_ms, 3))

    # ----------------------------------------------------------------- generation

    async def _generate(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        body = await read_body(receive, self._config.max_body_bytes)
        with kit.preprocess(self._tracer, **{"request.bytes": len(body)}) as span:
            prompt, max_tokens = self._generation_request(body)
            prompt_ids = tokenize(prompt, self._model.vocab_size, self._config.max_tokens)
            span.set_attribute("request.tokens", len(prompt_ids))
            self._request_side_work(span)
        if self._decoder is None:
            raise HttpError(503, "the service is not started")
        try:
            stream = self._decoder.submit(prompt_ids, max_tokens, otel_context.get_current())
        except QueueFullError as exc:
            raise HttpError(429, str(exc)) from exc
        except BatcherStoppedError as exc:
            raise HttpError(503, str(exc)) from exc
        await send({
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", SSE_CONTENT_TYPE.encode()), (b"cache-control", b"no-cache")],
        })
        watcher = asyncio.get_running_loop().create_task(cancel_on_disconnect(receive, stream))
        try:
            index = 0
            async for token in stream:
                event = json_bytes({"token": token, "index": index})
                await send({"type": "http.response.body", "body": b"data: " + event + b"\n\n", "more_body": True})
                index += 1
        except BatcherStoppedError:
            pass  # shutting down: end the stream without [DONE]
        else:
            await send({"type": "http.response.body", "body": SSE_DONE, "more_body": True})
        finally:
            stream.cancel()
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _generation_request(self, body: bytes) -> tuple[str, int]:
        """``(prompt, max_tokens)`` of a /v1/generate body; HttpError 400 when malformed."""
        try:
            document = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"body is not valid JSON: {exc}") from exc
        if not isinstance(document, dict) or not isinstance(document.get("prompt"), str):
            raise HttpError(400, 'JSON body must be an object with a string "prompt"')
        max_tokens = document.get("max_tokens", 16)
        limit = self._config.generate_max_tokens
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= limit:
            raise HttpError(400, f"max_tokens must be an integer in 1..{limit}, got {max_tokens!r}")
        return document["prompt"], max_tokens

    # ----------------------------------------------------------------- admin and metrics

    async def _admin_gc_pressure(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        settings = _admin_settings(await read_body(receive, 64 * 1024))
        enabled = _setting(settings, "enabled", bool, True)
        mb_per_s = float(_setting(settings, "mb_per_s", (int, float), self._config.gc_pressure_mb_per_s or 50.0))
        retained_mb = float(_setting(settings, "retained_mb", (int, float), self._config.gc_retained_mb))
        try:
            state = self._gc_pressure.configure(enabled, mb_per_s, retained_mb)
        except ValueError as exc:
            raise HttpError(400, str(exc)) from exc
        await send_json(send, 200, state.as_dict())

    async def _admin_io_stall(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        settings = _admin_settings(await read_body(receive, 64 * 1024))
        enabled = _setting(settings, "enabled", bool, True)
        kb = _setting(settings, "kb", int, self._config.io_stall_kb or 256)
        try:
            state = self._io_stall.configure(enabled, kb)
        except ValueError as exc:
            raise HttpError(400, str(exc)) from exc
        await send_json(send, 200, state.as_dict())

    async def _admin_state(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        await send_json(send, 200, {
            "gc_pressure": self._gc_pressure.state().as_dict(),
            "io_stall": self._io_stall.state().as_dict(),
            "resident_bytes": self._resident.size_bytes,
            "queue_depth": {
                "text": self._text_batcher.depth if self._text_batcher else 0,
                "image": self._image_batcher.depth if self._image_batcher else 0,
                "generate": self._decoder.depth if self._decoder else 0,
            },
            "decode_streams": self._decoder.active if self._decoder else 0,
        })

    async def _serve_metrics(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        assert self._metrics is not None
        await send_response(send, 200, self._metrics.exposition(), METRICS_CONTENT_TYPE)

    def _prediction(self, output: ModelOutput, **sizes: int) -> dict[str, Any]:
        return {
            "classes": top_classes(output.logits, self._config.top_k),
            **sizes,
            "batch_size": output.batch_size,
            "batch_id": output.batch_id,
        }


async def cancel_on_disconnect(receive: Receive, stream: Any) -> None:
    """Cancel ``stream`` when the client disconnects (runs until cancelled)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            stream.cancel()
            return


def _admin_settings(body: bytes) -> dict[str, Any]:
    """The JSON object of an admin request (an empty body is ``{}``); HttpError 400 otherwise."""
    if not body.strip():
        return {}
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"body is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise HttpError(400, "body must be a JSON object")
    return document


def _setting(settings: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    """``settings[key]`` when present and of ``kind`` (booleans are not numbers), else ``default``."""
    if key not in settings:
        return default
    value = settings[key]
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise HttpError(400, f"{key}: expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
    return value
