"""Property-based: malformed, truncated, oversized and gzip-bombed payloads against a live receiver.

One receiver (HTTP and gRPC on loopback) takes every generated payload. For
each one the answer must be the one OTLP specifies, the rejection must be
counted under the right reason, and a valid export right after must succeed.
The oracle for "does this decode" is the protobuf decoder itself: the property
under test is the transport's handling, counting and survival.

A second receiver has a bearer token: generated ``Authorization`` values (any
header-safe text, and near misses of the token: one character changed, cut,
extended, another scheme, other blanks) are let in exactly when they are
``Bearer``, spaces, the token (the oracle is a regular expression of RFC
6750's form, independent of the receiver's parser), and every refusal is
counted as ``unauthenticated``.
"""

from __future__ import annotations

import gzip
import re
import secrets
import time

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from receiver_helpers import post, span, trace_request

from tailscope.tracing.ingest.otlp_decode import MalformedPayload, decode_traces_protobuf
from tailscope.tracing.ingest.receiver import OtlpReceiver
from tailscope.tracing.ingest.receiver_auth import BearerCheck

MAX_BODY = 32 * 1024
TRACES_GRPC = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
VALID = trace_request([span("valid", payload="p" * 200) for _ in range(3)])
FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    rx = OtlpReceiver(str(tmp_path_factory.mktemp("fuzz")), port=0, max_body_bytes=MAX_BODY, grpc_port=0)
    rx.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{rx.grpc_port}", options=[("grpc.max_send_message_length", -1)])
    try:
        yield rx, channel
    finally:
        channel.close()
        rx.stop()


def decodes(body: bytes) -> bool:
    try:
        decode_traces_protobuf(body)
        return True
    except MalformedPayload:
        return False


def grpc_code(channel, body: bytes, gzip_it: bool = False) -> grpc.StatusCode:
    try:
        channel.unary_unary(TRACES_GRPC)(body, timeout=10,
                                         compression=grpc.Compression.Gzip if gzip_it else None)
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()


def rejected(rx) -> dict:
    return rx.stats()["rejected"]


def eventually_rejected(rx, reason: str, expected: int, timeout_s: float = 5.0) -> int:
    """The ``reason`` count once it reaches ``expected`` (or the timeout). A call the gRPC
    transport refuses is answered before the handler thread counts it, a moment later."""
    deadline = time.monotonic() + timeout_s
    while rejected(rx)[reason] < expected and time.monotonic() < deadline:
        time.sleep(0.005)
    return rejected(rx)[reason]


_truncated = st.integers(min_value=0, max_value=len(VALID) - 1).map(lambda n: VALID[:n])
_garbage = st.binary(min_size=1, max_size=2000)
_flipped = st.tuples(st.integers(0, len(VALID) - 1), st.integers(1, 255)).map(
    lambda pair: VALID[:pair[0]] + bytes([VALID[pair[0]] ^ pair[1]]) + VALID[pair[0] + 1:])
_broken = st.one_of(_truncated, _garbage, _flipped)
_oversize = st.integers(min_value=MAX_BODY + 1, max_value=3 * MAX_BODY)
_bomb_size = st.integers(min_value=MAX_BODY + 1, max_value=64 * MAX_BODY)


@FUZZ
@given(body=_broken)
def test_http_broken_bodies(live, body):
    rx, _ = live
    before = rejected(rx)["malformed"]
    status = post(rx.port, "/v1/traces", body)[0]
    assert status == (200 if decodes(body) else 400)
    assert rejected(rx)["malformed"] == before + (status == 400)
    assert post(rx.port, "/v1/traces", VALID)[0] == 200


@FUZZ
@given(size=_oversize, gzip_it=st.booleans())
def test_http_oversized_and_gzip_bombs(live, size, gzip_it):
    rx, _ = live
    before = rejected(rx)["oversized"]
    raw = b"\x0a" * size
    headers = {"Content-Encoding": "gzip"} if gzip_it else None
    status = post(rx.port, "/v1/traces", gzip.compress(raw) if gzip_it else raw, headers=headers)[0]
    assert status == 413
    assert rejected(rx)["oversized"] == before + 1
    assert post(rx.port, "/v1/traces", VALID)[0] == 200


@FUZZ
@given(size=_bomb_size)
def test_http_gzip_bombs_of_valid_looking_protobuf(live, size):
    rx, _ = live
    before = rejected(rx)["oversized"]
    bomb = trace_request([span("bomb", payload="\x00" * size)])
    status = post(rx.port, "/v1/traces", gzip.compress(bomb), headers={"Content-Encoding": "gzip"})[0]
    assert status == 413 and rejected(rx)["oversized"] == before + 1
    assert post(rx.port, "/v1/traces", VALID)[0] == 200


@FUZZ
@given(body=_broken)
def test_grpc_broken_messages(live, body):
    rx, channel = live
    before = rejected(rx)["malformed"]
    code = grpc_code(channel, body)
    assert code == (grpc.StatusCode.OK if decodes(body) else grpc.StatusCode.INVALID_ARGUMENT)
    assert rejected(rx)["malformed"] == before + (code == grpc.StatusCode.INVALID_ARGUMENT)
    assert grpc_code(channel, VALID) == grpc.StatusCode.OK


@FUZZ
@given(size=_bomb_size, gzip_it=st.booleans())
def test_grpc_oversized_and_gzip_bombs(live, size, gzip_it):
    rx, channel = live
    before = rejected(rx)["oversized"]
    body = trace_request([span("big", payload="\x00" * size)])
    assert grpc_code(channel, body, gzip_it) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert eventually_rejected(rx, "oversized", before + 1) == before + 1
    assert grpc_code(channel, VALID) == grpc.StatusCode.OK


TOKEN = secrets.token_urlsafe(24)
#: RFC 6750 credentials with optional blanks around them: what the receiver must accept, and only that.
_BEARER = re.compile(r"[ \t]*[Bb][Ee][Aa][Rr][Ee][Rr] +(.*?)[ \t]*", re.DOTALL)
#: Characters an HTTP client may put in a header value (no CR/LF), latin-1 as http.server decodes it.
_HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f")
                       | st.sampled_from("\t"), max_size=80)
#: gRPC metadata values are printable ASCII (the client refuses a tab before sending).
_METADATA_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80)


def allowed(value: str | None) -> bool:
    match = _BEARER.fullmatch(value or "")
    return bool(match) and match.group(1) == TOKEN


def _near_misses(text: st.SearchStrategy) -> st.SearchStrategy:
    changed = st.tuples(st.integers(0, len(TOKEN) - 1), st.sampled_from("Aa0-_~.x")).map(
        lambda pair: TOKEN[:pair[0]] + pair[1] + TOKEN[pair[0] + 1:])
    cut = st.integers(0, len(TOKEN)).map(lambda n: TOKEN[:n])
    extended = text.map(lambda extra: TOKEN + extra)
    credential = st.one_of(st.just(TOKEN), changed, cut, extended, st.just(TOKEN.upper()), text)
    scheme = st.sampled_from(["Bearer", "bearer", "BEARER", "Basic", "Bearer:", "Bear", "Token", ""])
    blanks = st.sampled_from(["", " ", "  ", "\t", " \t"])
    return st.one_of(text, st.tuples(blanks, scheme, st.sampled_from([" ", "  ", "\t", "", "="]), credential,
                                     blanks).map("".join))


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    rx = OtlpReceiver(str(tmp_path_factory.mktemp("guarded")), port=0, max_body_bytes=MAX_BODY, grpc_port=0,
                      token=TOKEN)
    rx.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{rx.grpc_port}")
    try:
        yield rx, channel
    finally:
        channel.close()
        rx.stop()


@settings(max_examples=400, deadline=None)
@given(value=st.one_of(st.none(), _near_misses(st.text(max_size=40))))
def test_bearer_check_accepts_exactly_the_token(value):
    assert BearerCheck(TOKEN).allows(value) == allowed(value)
    assert BearerCheck(None).allows(value)


@FUZZ
@given(value=st.one_of(st.none(), _near_misses(_HEADER_TEXT)))
def test_http_authorization_headers(guarded, value):
    rx, _ = guarded
    before = rejected(rx)["unauthenticated"]
    headers = None if value is None else {"Authorization": value}
    status, answer, _ = post(rx.port, "/v1/traces", VALID, headers=headers)
    assert status == (200 if allowed(value) else 401)
    assert rejected(rx)["unauthenticated"] == before + (status == 401)
    if status == 401:
        assert answer["WWW-Authenticate"].startswith("Bearer")
    assert post(rx.port, "/v1/traces", VALID, headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200


@FUZZ
@given(value=st.one_of(st.none(), _near_misses(_METADATA_TEXT).filter(lambda v: "\t" not in v)))
def test_grpc_authorization_metadata(guarded, value):
    rx, channel = guarded
    before = rejected(rx)["unauthenticated"]
    metadata = None if value is None else [("authorization", value)]
    try:
        channel.unary_unary(TRACES_GRPC)(VALID, timeout=10, metadata=metadata)
        code = grpc.StatusCode.OK
    except grpc.RpcError as exc:
        code = exc.code()
    assert code == (grpc.StatusCode.OK if allowed(value) else grpc.StatusCode.UNAUTHENTICATED)
    assert rejected(rx)["unauthenticated"] == before + (code == grpc.StatusCode.UNAUTHENTICATED)
    assert channel.unary_unary(TRACES_GRPC)(VALID, timeout=10, metadata=[("authorization", f"Bearer {TOKEN}")]) == b""
