"""Figures behind the lab's mechanisms, as ratios against references measured in the same run.

1. Continuous batching of /v1/generate: time of one decode step for B
   streams, per token, relative to one stream (B = 1). Below 1 means
   batching pays off per token.
2. GC pressure: the longest generation-2 pause while the GC storm runs with
   a retained heap of R MB, relative to a full collection of the same
   process without the storm (``gc.collect()``).

Run: ``python benchmarks/lab_mechanisms.py`` (about 20 s). Nothing is asserted.
"""

from __future__ import annotations

import gc
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from tailscope.targets.reference.gc_load import GcPressure  # noqa: E402
from tailscope.targets.reference.generation import DecoderModel  # noqa: E402

DIM = 128
STEPS = 200


def decode_step_s(model: DecoderModel, streams: int) -> float:
    state, last = model.prefill(np.arange(1, 17, dtype=np.int32))
    states = np.stack([state] * streams)
    tokens = np.full(streams, last, dtype=np.int64)
    started = time.perf_counter()
    for _ in range(STEPS):
        states, tokens = model.step(states, tokens)
    return (time.perf_counter() - started) / STEPS


def longest_gen2_pause_s(retained_mb: float, seconds: float = 4.0) -> float:
    pauses, started = [], {}

    def callback(phase, info):
        if info["generation"] != 2:
            return
        if phase == "start":
            started["t"] = time.perf_counter()
        elif "t" in started:
            pauses.append(time.perf_counter() - started.pop("t"))

    pressure = GcPressure()
    gc.callbacks.append(callback)
    try:
        pressure.configure(True, 60.0, retained_mb)
        time.sleep(seconds)
    finally:
        pressure.close()
        gc.callbacks.remove(callback)
    return max(pauses, default=0.0)


def main() -> None:
    model = DecoderModel(DIM)
    single = decode_step_s(model, 1)
    print(f"decode step, one stream: {single * 1e3:.3f} ms (reference)")
    for streams in (4, 16):
        step = decode_step_s(model, streams)
        print(f"decode step, {streams:2d} streams: {step / single:5.2f}x the one-stream step; "
              f"per token {step / streams / single:5.2f}x")
    started = time.perf_counter()
    gc.collect()
    baseline = time.perf_counter() - started
    print(f"full collection without GC pressure: {baseline * 1e3:.2f} ms (reference)")
    for retained in (64.0, 128.0):
        pause = longest_gen2_pause_s(retained)
        print(f"longest gen-2 pause under GC pressure, {retained:.0f} MB retained: {pause / baseline:6.1f}x "
              f"the reference ({pause * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
