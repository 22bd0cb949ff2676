"""Both tracing engines (lean, sdk) produce the same spans from the real reference target, as the receiver stores them.

The target's ASGI app (middleware, preprocess, batcher, pipeline, generation
with its ``first_token`` event, a 400 error) is driven in-process through its
lifespan and HTTP interface; each engine exports over OTLP/HTTP to a real
receiver; the stored spans are compared structurally (names, kinds, parent
names, attributes, links, events, status).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os

import pytest
from receiver_helpers import stored_events, stored_spans

from tailscope.targets.reference.config import TargetConfig
from tailscope.targets.reference.server import build_asgi_app
from tailscope.tracing import kit
from tailscope.tracing.ingest.receiver import OtlpReceiver

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
REMOTE_PARENT = "b7ad6b7169203331"
#: Attributes that depend on timing, not on the engine.
_TIMING_ATTRIBUTES = ("gen.first_token_ns", "io.fsync_ms")


def request_scope(path: str, body: bytes, index: int) -> dict:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"traceparent", f"00-{TRACE_ID}-{REMOTE_PARENT}-01".encode()), (b"user-agent", b"engines-test")]
    return {"type": "http", "method": "POST", "path": path, "scheme": "http", "http_version": "1.1",
            "query_string": b"", "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 40000 + index),
            "headers": headers}


async def call(app, scope: dict, body: bytes) -> int:
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict] = []
    disconnected = asyncio.Event()

    async def receive():
        if messages:
            return messages.pop(0)
        await disconnected.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    disconnected.set()
    return sent[0]["status"]


async def drive_target(app) -> list[int]:
    """Lifespan startup, five requests one after the other, lifespan shutdown; the statuses."""
    inbox: asyncio.Queue = asyncio.Queue()
    outbox: asyncio.Queue = asyncio.Queue()
    lifespan = asyncio.create_task(app({"type": "lifespan"}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    requests = [
        ("/v1/infer/text", json.dumps({"text": "the quick brown fox"}).encode()),
        ("/v1/infer/text", json.dumps({"text": "jumps over the lazy dog"}).encode()),
        ("/v1/infer/text", b"{not json"),
        ("/v1/generate", json.dumps({"prompt": "once upon", "max_tokens": 3}).encode()),
        ("/v1/infer/image", bytes(3 * 8 * 8)),
    ]
    statuses = []
    for index, (path, body) in enumerate(requests):
        statuses.append(await call(app, request_scope(path, body, index), body))
    await inbox.put({"type": "lifespan.shutdown"})
    assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
    await lifespan
    return statuses


def normalised(rows: list[dict]) -> list[tuple]:
    """Engine-independent view of stored spans: ids replaced by the names they point at."""
    names = {row["span_id"]: row["name"] for row in rows}
    out = []
    for row in rows:
        attributes = {k: v for k, v in json.loads(row["attributes"] or "{}").items() if k not in _TIMING_ATTRIBUTES}
        events = [(event["name"], sorted(event["attributes"])) for event in json.loads(row["events"] or "[]")]
        links = sorted(names.get(link["span_id"], "?") for link in json.loads(row["links"] or "[]"))
        parent = row["parent_span_id"]
        parent_name = None if parent is None else "<remote>" if parent == REMOTE_PARENT else names.get(parent, "?")
        trace = "request" if row["trace_id"] == TRACE_ID else "own"
        out.append((row["name"], row["kind"], parent_name, trace, row["status_code"],
                    json.dumps(attributes, sort_keys=True), json.dumps(events), json.dumps(links), row["pid"]))
    return sorted(out)


def run_engine(engine: str, run_dir: str) -> tuple[list[int], list[dict], list[dict]]:
    receiver = OtlpReceiver(run_dir, port=0, grpc_port=None)
    receiver.start()
    try:
        config = TargetConfig(port=0, max_batch_size=1, model_dim=16, seed=3)
        provider = kit.setup_tracing("engines-test", f"http://127.0.0.1:{receiver.port}", engine=engine)
        reporter = kit.GcPauseReporter(provider, flush_interval_s=0.05)
        reporter.start()
        try:
            statuses = asyncio.run(drive_target(build_asgi_app(config, provider)))
            gc.collect()
        finally:
            reporter.stop()
            provider.shutdown()
    finally:
        receiver.stop()
    return statuses, stored_spans(run_dir), stored_events(run_dir)


@pytest.mark.timeout(120)
def test_lean_and_sdk_engines_store_the_same_spans(tmp_path) -> None:
    lean_statuses, lean_spans, lean_events = run_engine("lean", str(tmp_path / "lean"))
    sdk_statuses, sdk_spans, sdk_events = run_engine("sdk", str(tmp_path / "sdk"))
    assert lean_statuses == sdk_statuses == [200, 200, 400, 200, 200]
    lean, sdk = normalised(lean_spans), normalised(sdk_spans)
    assert lean == sdk
    names = {span[0] for span in lean}
    assert {"POST /v1/infer/text", "POST /v1/generate", "preprocess", "queue_wait", "batch_wait", "inference",
            "postprocess", "batch", "prefill", "decode"} <= names
    assert any(span[6] != "[]" for span in lean), "events (first_token) are compared too"
    assert any(span[7] != "[]" for span in lean), "links (batch <-> inference) are compared too"
    assert {span[4] for span in lean} >= {0, 2}, "the 400's stage span and the error status are compared too"
    assert {span[8] for span in lean} == {os.getpid()}
    for events in (lean_events, sdk_events):
        pauses = [json.loads(e["attributes"]) for e in events if e["kind"] == "gc_pause"]
        assert pauses and {"generation", "collected", "uncollectable", "pid"} <= set(pauses[-1])
