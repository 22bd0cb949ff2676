"""W3C trace context for every request, without the OpenTelemetry SDK.

The generator starts each request's trace: it makes a ``traceparent`` header
(version 00) with a random 128-bit trace id and a random 64-bit parent span
id, and records the trace id as the join key between its request record and
the target's spans. Cost: two ``getrandbits`` calls and two string formats
(about 1 µs).

**Head sampling.** With a ``sample_rate`` below 1 the sampled flag (``01``)
is set only on the traces the rule of
:func:`tailscope.rundir.retention_policy.trace_sampled` picks (low 64 bits of the
trace id below ``rate·2^64``, OpenTelemetry's ``TraceIdRatioBased``); the
others carry ``00``, and a target that honours its parent's decision (the
OTel SDK's default ``ParentBased`` sampler, the tailscope kit) records no span
for them. Because the rule is the retention sample's, a retention sample at a
rate no higher than the trace rate keeps only traced requests.

See https://www.w3.org/TR/trace-context/#traceparent-header.
"""

from __future__ import annotations

import random

from tailscope.rundir.retention_policy import trace_sampled

TRACEPARENT_HEADER = "traceparent"


def _nonzero_bits(rng: random.Random, bits: int) -> int:
    """A uniformly random non-zero integer of ``bits`` bits (W3C forbids all-zero ids)."""
    value = rng.getrandbits(bits)
    while value == 0:
        value = rng.getrandbits(bits)
    return value


def new_traceparent(rng: random.Random, sample_rate: float = 1.0) -> tuple[str, str]:
    """Return ``(traceparent header value, trace id)``.

    The header is ``00-<32 hex trace id>-<16 hex span id>-<flags>`` in
    lowercase hex, flags ``01`` (sampled) for every trace when ``sample_rate``
    is 1, else for the ``sample_rate`` share picked by
    :func:`~tailscope.rundir.retention_policy.trace_sampled` and ``00`` for the rest;
    the trace id is returned alone (32 lowercase hex digits) for the record.
    ``rng`` is any object with ``getrandbits`` (a :class:`random.Random`);
    use one seeded from OS entropy so that runs never share trace ids.
    """
    trace_id = f"{_nonzero_bits(rng, 128):032x}"
    span_id = f"{_nonzero_bits(rng, 64):016x}"
    flags = "01" if sample_rate >= 1.0 or trace_sampled(trace_id, sample_rate) else "00"
    return f"00-{trace_id}-{span_id}-{flags}", trace_id
