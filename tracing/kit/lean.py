"""The lean tracing engine: the OpenTelemetry trace *API*, implemented for a few microseconds per span.

:class:`LeanTracerProvider`, :class:`LeanTracer` and :class:`LeanSpan`
implement ``opentelemetry.trace.TracerProvider`` / ``Tracer`` / ``Span``, so
code written against the standard API (the kit's helpers, ``trace.get_current_span()``,
``start_as_current_span``, W3C ``traceparent`` continuation through
``opentelemetry.context``) works unchanged. A span is one small object: ids,
name, kind, start/end epoch ns, an attribute dict, links, events, status.
When it ends it is appended to the bounded queue of a
:class:`~tailscope.tracing.kit.lean_export.BatchExporter`, whose background
thread encodes batches with :mod:`tailscope.tracing.kit.otlp_encode` and exports
them over OTLP (HTTP/protobuf or gRPC).

Behaviour matches the OTel SDK with its defaults: sampler
``ParentBased(ALWAYS_ON)`` (a child of an unsampled parent is a
``NonRecordingSpan``), random 64-bit span ids and 128-bit trace ids, times
from ``time.time_ns()``, at most 128 attributes, events and links per span
(the rest are dropped), attribute values validated when encoded (invalid ones
dropped), exceptions leaving ``start_as_current_span`` recorded as an
``exception`` event with status ERROR. What it does not have: span
processors, custom samplers and id generators, span limits other than 128.
"""

from __future__ import annotations

import functools
import random
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation import _SPAN_KEY
from opentelemetry.trace.span import DEFAULT_TRACE_STATE, TraceState

from tailscope.tracing.kit.lean_export import BatchExporter
from tailscope.tracing.kit.otlp_encode import scope_message

#: Per-span bounds (the OTel SDK's default span limits).
MAX_ATTRIBUTES = 128
MAX_EVENTS = 128
MAX_LINKS = 128

_SAMPLED_RANDOM = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
_SAMPLED = TraceFlags.SAMPLED
_ERROR, _OK, _UNSET = StatusCode.ERROR, StatusCode.OK, StatusCode.UNSET
_INTERNAL = SpanKind.INTERNAL

_time_ns = time.time_ns
_random_bits = random.getrandbits
_set_item = dict.__setitem__
_new_tuple = tuple.__new__


def _runtime_context_functions() -> tuple[Callable[[], Context], Callable[[Context], Any], Callable[[Any], None]]:
    """``(get_current, attach, detach)`` of opentelemetry.context.

    With the default contextvars runtime context these are its ContextVar's
    own ``get``/``set``/``reset`` (the same state, without two Python call
    levels); with any other runtime context, the public functions.
    """
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    variable = getattr(runtime, "_current_context", None)
    if type(runtime).__name__ == "ContextVarsRuntimeContext" and isinstance(variable, ContextVar):
        return variable.get, variable.set, variable.reset
    return otel_context.get_current, otel_context.attach, otel_context.detach


_get_current, _attach, _detach = _runtime_context_functions()


def _new_span_id() -> int:
    span_id = _random_bits(64)
    while not span_id:
        span_id = _random_bits(64)
    return span_id


def _new_trace_id() -> int:
    trace_id = _random_bits(128)
    while not trace_id:
        trace_id = _random_bits(128)
    return trace_id


#: TraceFlags of an unsampled child, by the parent's flags (the SDK keeps only RANDOM_TRACE_ID).
_UNSAMPLED_CHILD_FLAGS = [TraceFlags(flags & TraceFlags.RANDOM_TRACE_ID) for flags in range(256)]


def _unsampled_child(parent_context: SpanContext) -> NonRecordingSpan:
    """The non-recording child of an unsampled parent: the parent's trace, a new span id, as the SDK makes it.

    Built without ``SpanContext``'s range checks (the parent's ids are valid,
    the new span id is non-zero by construction): this is the whole cost of a
    span in a trace the caller did not sample.
    """
    trace_id, _, _, flags, trace_state, _ = parent_context
    return NonRecordingSpan(_new_tuple(SpanContext, (
        trace_id, _new_span_id(), False, _UNSAMPLED_CHILD_FLAGS[flags & 0xFF], trace_state, True
    )))


def context_with_span(span: trace.Span, context: Context | None = None) -> Context:
    """``trace.set_span_in_context(span, context)``, without the generic copy path (~3x cheaper)."""
    new = Context(_get_current() if context is None else context)
    _set_item(new, _SPAN_KEY, span)
    return new


class LeanSpan(trace.Span):
    """A recording span; immutable once ended (later changes are ignored, as in the SDK).

    Public fields (read by the encoder): ``trace_id``, ``span_id``, ``parent_id``
    (0 for a root), ``parent_remote``, ``trace_flags``, ``trace_state``, ``name``,
    ``kind`` (SpanKind), ``start_ns``/``end_ns`` (epoch ns; ``end_ns`` 0 while
    open), ``attributes`` (dict or None), ``events`` (list of ``(name, t_ns,
    attributes)``), ``links`` (list of ``(SpanContext, attributes or None)``
    pairs, valid contexts only: cheaper than ``Link`` objects), ``status_code``
    (0 unset, 1 ok, 2 error), ``status_message``, ``scope`` (encoded InstrumentationScope).
    """

    # Set on every span; the rarely used fields below are class-level defaults,
    # overridden on the instance only when a span has them.
    __slots__ = ("trace_id", "span_id", "parent_id", "name", "kind", "start_ns", "end_ns", "attributes", "scope",
                 "_submit")

    parent_remote = False
    trace_flags = _SAMPLED_RANDOM
    trace_state: TraceState | None = None
    events: list | None = None
    links: list | None = None
    status_code = 0
    status_message: str | None = None
    _context: SpanContext | None = None
    _record_exception = True
    _set_status_on_exception = True

    def get_span_context(self) -> SpanContext:
        context = self._context
        if context is None:
            # SpanContext(...) without its range checks: the ids are valid by construction.
            context = self._context = _new_tuple(SpanContext, (
                self.trace_id, self.span_id, False, self.trace_flags, self.trace_state or DEFAULT_TRACE_STATE, True
            ))
        return context

    def is_recording(self) -> bool:
        return not self.end_ns

    def end(self, end_time: int | None = None) -> None:
        if self.end_ns:
            return
        self.end_ns = end_time if end_time is not None else _time_ns()
        self._submit(self)

    def set_attribute(self, key: str, value: Any) -> None:
        if self.end_ns:
            return
        attributes = self.attributes
        if attributes is None:
            attributes = self.attributes = {}
        elif len(attributes) >= MAX_ATTRIBUTES and key not in attributes:
            return
        attributes[key] = tuple(value) if type(value) is list else value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self.attributes is None and not self.end_ns and len(attributes) <= MAX_ATTRIBUTES:
            self.attributes = {key: tuple(value) if type(value) is list else value
                               for key, value in attributes.items()}
            return
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None) -> None:
        if self.end_ns:
            return
        events = self.events
        if events is None:
            events = self.events = []
        elif len(events) >= MAX_EVENTS:
            return
        events.append((name, timestamp if timestamp is not None else _time_ns(), dict(attributes) if attributes else None))

    def add_link(self, context: SpanContext, attributes: Mapping[str, Any] | None = None) -> None:
        if self.end_ns or context is None or not context[5]:  # [5]: SpanContext.is_valid
            return
        links = self.links
        if links is None:
            links = self.links = []
        elif len(links) >= MAX_LINKS:
            return
        links.append((context, dict(attributes) if attributes else None))

    def update_name(self, name: str) -> None:
        if not self.end_ns:
            self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self.end_ns or self.status_code == _OK.value:
            return
        if isinstance(status, Status):
            code, description = status.status_code, status.description
        else:
            code = status
        if code is _UNSET:
            return
        self.status_code = code.value
        self.status_message = description if code is _ERROR else None

    def record_exception(
        self,
        exception: BaseException,
        attributes: Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        kind = type(exception)
        module, qualname = kind.__module__, kind.__qualname__
        event_attributes = {
            "exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            event_attributes.update(attributes)
        self.add_event("exception", event_attributes, timestamp)

    def __exit__(self, exc_type: Any, exc_val: BaseException | None, exc_tb: Any) -> None:
        if exc_val is not None and not self.end_ns:
            if self._record_exception:
                self.record_exception(exc_val, escaped=True)
            if self._set_status_on_exception:
                self.set_status(Status(_ERROR, f"{type(exc_val).__name__}: {exc_val}"))
        self.end()

    def __repr__(self) -> str:
        return f"LeanSpan(name={self.name!r}, trace_id=0x{self.trace_id:032x}, span_id=0x{self.span_id:016x})"


class _CurrentSpan:
    """What :meth:`LeanTracer.start_as_current_span` returns: a context manager (and decorator).

    The span starts on ``__enter__`` (as with the SDK's generator-based one), is
    current while the block runs, records an ``Exception`` leaving the block
    (event + status ERROR), and ends on exit when ``end_on_exit``.
    """

    __slots__ = ("_tracer", "_args", "_end_on_exit", "_span", "_token")

    def __init__(self, tracer: LeanTracer, args: tuple, end_on_exit: bool) -> None:
        self._tracer = tracer
        self._args = args
        self._end_on_exit = end_on_exit

    def __enter__(self) -> trace.Span:
        span = self._span = self._tracer.start_span(*self._args)
        self._token = _attach(context_with_span(span))
        return span

    def __exit__(self, exc_type: Any, exc_val: BaseException | None, exc_tb: Any) -> None:
        try:
            _detach(self._token)
        except ValueError:  # exited in another context than entered: as otel_context.detach, ignore
            pass
        span = self._span
        if isinstance(exc_val, Exception) and span.is_recording():
            args = self._args
            if args[6]:
                span.record_exception(exc_val)
            if args[7]:
                span.set_status(Status(_ERROR, f"{type(exc_val).__name__}: {exc_val}"))
        if self._end_on_exit:
            span.end()

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def traced(*args: Any, **kwargs: Any) -> Any:
            with _CurrentSpan(self._tracer, self._args, self._end_on_exit):
                return function(*args, **kwargs)

        return traced


class LeanTracer(trace.Tracer):
    """Starts :class:`LeanSpan` objects of one instrumentation scope; ended spans go to ``submit``."""

    def __init__(self, scope: bytes, submit: Callable[[LeanSpan], None]) -> None:
        self._scope = scope
        self._submit = submit

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = _INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        parent = (_get_current() if context is None else context).get(_SPAN_KEY)
        span = LeanSpan()
        if type(parent) is LeanSpan:
            span.trace_id = parent.trace_id
            span.parent_id = parent.span_id
            if parent.trace_flags is not _SAMPLED_RANDOM:
                span.trace_flags = parent.trace_flags
            if parent.trace_state is not None:
                span.trace_state = parent.trace_state
        else:
            parent_context = (parent.get_span_context() if type(parent) is NonRecordingSpan
                              or isinstance(parent, trace.Span) else None)
            if parent_context is None or not parent_context[5]:  # no parent, or an invalid one
                span.trace_id = _new_trace_id()
                span.parent_id = 0
            elif parent_context[3] & _SAMPLED:
                span.trace_id = parent_context.trace_id
                span.parent_id = parent_context.span_id
                span.parent_remote = parent_context.is_remote
                span.trace_flags = parent_context.trace_flags
                if parent_context.trace_state:
                    span.trace_state = parent_context.trace_state
            else:  # ParentBased(ALWAYS_ON): an unsampled parent's children are not recorded
                return _unsampled_child(parent_context)
        span.span_id = _new_span_id()
        span.name = name
        span.kind = kind
        span.start_ns = start_time if start_time is not None else _time_ns()
        span.end_ns = 0
        span.attributes = dict(attributes) if attributes else None
        span.scope = self._scope
        span._submit = self._submit
        if links:
            valid = [(link.context, link.attributes) for link in links if link.context[5]][:MAX_LINKS]
            if valid:
                span.links = valid
        if not record_exception:
            span._record_exception = False
        if not set_status_on_exception:
            span._set_status_on_exception = False
        return span

    def start_as_current_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = _INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Any:
        return _CurrentSpan(
            self,
            (name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception),
            end_on_exit,
        )


class LeanTracerProvider(trace.TracerProvider):
    """A TracerProvider whose spans go to one :class:`~tailscope.tracing.kit.lean_export.BatchExporter`.

    ``resource_attributes`` are the Resource of every span (e.g. from
    ``opentelemetry.sdk.resources.Resource.create(...).attributes``). The
    exporter thread starts here; call :meth:`shutdown` before exiting (it
    exports what is queued). Counters: :attr:`spans_exported`,
    :attr:`spans_dropped` (queue full, or their export failed),
    :attr:`export_failures`.
    """

    def __init__(self, resource_attributes: Mapping[str, Any], exporter: BatchExporter) -> None:
        self.resource_attributes = dict(resource_attributes)
        self._exporter = exporter
        self._tracers: dict[tuple[str, str | None], LeanTracer] = {}
        self._lock = threading.Lock()
        exporter.start()

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> trace.Tracer:
        key = (instrumenting_module_name, instrumenting_library_version)
        with self._lock:
            tracer = self._tracers.get(key)
            if tracer is None:
                scope = scope_message(instrumenting_module_name, instrumenting_library_version)
                tracer = self._tracers[key] = LeanTracer(scope, self._exporter.submit)
            return tracer

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export every queued span now; True when all were exported within the timeout."""
        return self._exporter.flush(timeout_millis / 1000)

    def shutdown(self) -> None:
        """Stop the exporter thread after exporting what is queued. Idempotent."""
        self._exporter.shutdown()

    @property
    def spans_exported(self) -> int:
        return self._exporter.spans_exported

    @property
    def spans_dropped(self) -> int:
        return self._exporter.spans_dropped

    @property
    def export_failures(self) -> int:
        return self._exporter.export_failures

