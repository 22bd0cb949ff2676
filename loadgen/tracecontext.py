"""W3C trace context for every request, without the OpenTelemetry SDK.

The generator starts each request's trace: it makes a ``traceparent`` header
(version 00, sampled flag 01) with a random 128-bit trace id and a random
64-bit parent span id, and records the trace id as the join key between its
request record and the target's spans. Cost: two ``getrandbits`` calls and two
string formats (about 1 µs).

See https://www.w3.org/TR/trace-context/#traceparent-header.
"""

from __future__ import annotations

import random

TRACEPARENT_HEADER = "traceparent"


def _nonzero_bits(rng: random.Random, bits: int) -> int:
    """A uniformly random non-zero integer of ``bits`` bits (W3C forbids all-zero ids)."""
    value = rng.getrandbits(bits)
    while value == 0:
        value = rng.getrandbits(bits)
    return value


def new_traceparent(rng: random.Random) -> tuple[str, str]:
    """Return ``(traceparent header value, trace id)``.

    The header is ``00-<32 hex trace id>-<16 hex span id>-01`` in lowercase hex;
    the trace id is returned alone (32 lowercase hex digits) for the record.
    ``rng`` is any object with ``getrandbits`` (a :class:`random.Random`);
    use one seeded from OS entropy so that runs never share trace ids.
    """
    trace_id = f"{_nonzero_bits(rng, 128):032x}"
    span_id = f"{_nonzero_bits(rng, 64):016x}"
    return f"00-{trace_id}-{span_id}-01", trace_id
