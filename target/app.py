"""The reference inference service as an ASGI application.

Routes: ``POST /v1/infer/text`` (JSON ``{"text": ...}`` or raw text),
``POST /v1/infer/image`` (raw bytes, a square RGB buffer), ``GET /healthz``.
Each inference request goes preprocess (event loop) → dynamic batcher → model
(worker thread) → postprocess (event loop), with a stage span per step; the
SERVER span around them comes from :class:`tailscope.tracing.kit.TraceContextMiddleware`.
Status codes: 400 bad input, 404/405 unknown route/method, 413 body too large,
429 batcher queue full, 503 shutting down.

The ASGI ``lifespan`` protocol starts and stops the batchers and the model
thread pool; serve the app with a server that runs lifespan (uvicorn does).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from tailscope.target.asgi_io import HttpError, Receive, Send, header, json_bytes, read_body, send_error
from tailscope.target.asgi_io import send_response
from tailscope.target.batcher import BatcherStoppedError, BatchPolicy, DynamicBatcher, QueueFullError
from tailscope.target.config import TargetConfig
from tailscope.target.model import ReferenceModel
from tailscope.target.pipeline import ModelOutput, TracedBatchRunner
from tailscope.target.postprocessing import top_classes
from tailscope.target.preprocessing import InvalidInputError, decode_image, text_from_body, tokenize
from tailscope.tracing import kit

TEXT_ROUTE = "/v1/infer/text"
IMAGE_ROUTE = "/v1/infer/image"
HEALTH_ROUTE = "/healthz"

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
        self._routes: dict[str, tuple[str, Handler]] = {
            TEXT_ROUTE: ("POST", self._infer_text),
            IMAGE_ROUTE: ("POST", self._infer_image),
            HEALTH_ROUTE: ("GET", self._health),
        }

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            try:
                await self._route(scope, receive, send)
            except HttpError as error:
                await send_error(send, error)

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Create the model thread pool and start both batchers (in the running event loop)."""
        workers = self._config.model_workers
        self._executor = ThreadPoolExecutor(max_workers=2 * workers, thread_name_prefix="model")
        self._text_batcher = self._make_batcher("text", self._model.classify_texts)
        self._image_batcher = self._make_batcher("image", self._model.classify_images)
        await self._text_batcher.start()
        await self._image_batcher.start()

    async def stop(self) -> None:
        """Stop the batchers (executing batches finish) and the thread pool."""
        for batcher in (self._text_batcher, self._image_batcher):
            if batcher is not None:
                await batcher.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def _make_batcher(self, model_name: str, model_fn: Callable[[list[Any]], Any]) -> DynamicBatcher[Any, ModelOutput]:
        assert self._executor is not None
        runner = TracedBatchRunner(
            model_name,
            model_fn,
            self._tracer,
            queue_capacity=self._config.max_queue_size,
            extra_delay_s=self._config.model_extra_delay_ms / 1000.0,
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
        output = await self._submit(self._text_batcher, token_ids)
        with kit.postprocess(self._tracer):
            payload = json_bytes(self._prediction(output, tokens=len(token_ids)))
        await send_response(send, 200, payload, "application/json")

    async def _infer_image(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        body = await read_body(receive, self._config.max_body_bytes)
        with kit.preprocess(self._tracer, **{"request.bytes": len(body)}):
            try:
                image = decode_image(body)
            except InvalidInputError as exc:
                raise HttpError(400, str(exc)) from exc
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

    def _prediction(self, output: ModelOutput, **sizes: int) -> dict[str, Any]:
        return {
            "classes": top_classes(output.logits, self._config.top_k),
            **sizes,
            "batch_size": output.batch_size,
            "batch_id": output.batch_id,
        }
