"""The GC-pause snippet of docs/tracing.md ("GC pauses from any Python service"), as a module.

Importing it (after the tracer provider is set up) makes a Python service send one ``gc.pause``
span per garbage collection, with the OpenTelemetry API only; the receiver stores each as a
``gc_pause`` event. tests/test_process_stall.py checks that this file and the snippet in the docs
are the same lines.
"""

# --- snippet start
import collections, gc, threading, time  # noqa: E401, I001
from opentelemetry import context, trace

pauses, started = collections.deque(maxlen=10_000), [0]

def on_gc(phase, info):                       # inside the collector: the clock and a deque only  # noqa: E302
    if phase == "start":
        started[0] = time.time_ns()
    else:
        pauses.append((started[0], time.time_ns(), info["generation"], info["collected"]))

def send_pauses():                            # one gc.pause span per pause, from its own thread  # noqa: E302
    tracer = trace.get_tracer("gc-pauses")
    while True:
        time.sleep(0.2)
        while pauses:
            start, end, generation, collected = pauses.popleft()
            tracer.start_span("gc.pause", context=context.Context(), start_time=start, attributes={
                "gc.generation": generation, "gc.collected": collected}).end(end_time=end)

gc.callbacks.append(on_gc)  # noqa: E305
threading.Thread(target=send_pauses, daemon=True, name="gc-pauses").start()
# --- snippet end
