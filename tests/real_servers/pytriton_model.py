"""A numpy model served by PyTriton's bundled Triton Inference Server (run in the PyTriton venv).

``python pytriton_model.py --http-port P --grpc-port G --metrics-port M --trace-url URL
--workspace DIR`` serves the model ``tiny_mlp`` over HTTP on 127.0.0.1:P (``POST
/v2/models/tiny_mlp/infer``), its Prometheus metrics on ``/metrics`` of port M, and prints
``READY`` once Triton answers. Nothing from tailscope is imported (this runs in a venv of its own).

The model: input ``x`` (FP32, shape ``[-1]``) is tiled into ``ROUNDS`` passes of an
``n × 64`` matrix through a 64 × 64 layer, so its compute time grows linearly with ``n``
(the input's length); output ``y`` is one FP32 per input element.

Tracing, as the issue asks: ``mode=opentelemetry``, ``rate=1``, ``level=TIMESTAMPS``, spans
to ``URL`` (an OTLP/HTTP ``/v1/traces`` endpoint); PyTriton then also traces its own proxy
(the Python side of the model) to the same URL with the OTel SDK's batch exporter (5 s).

Stops on SIGTERM (Triton and the proxy shut down, the workspace is removed by PyTriton).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

MODEL = "tiny_mlp"
WIDTH = 64
ROUNDS = 4
_WEIGHTS = np.random.default_rng(0).standard_normal((WIDTH, WIDTH)).astype(np.float32) / WIDTH


@batch
def infer(x: np.ndarray) -> dict:
    """``x``: (batch, n) FP32 → ``y``: (batch, n); cost O(batch × n × WIDTH² × ROUNDS)."""
    out = np.empty_like(x)
    for row, values in enumerate(x):
        hidden = np.resize(values, (len(values), WIDTH))
        for _ in range(ROUNDS):
            hidden = np.tanh(hidden @ _WEIGHTS)
        out[row] = hidden[:, 0]
    return {"y": out}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--http-port", "--grpc-port", "--metrics-port"):
        parser.add_argument(flag, type=int, required=True)
    parser.add_argument("--trace-url", required=True, help="OTLP/HTTP traces URL (…/v1/traces)")
    parser.add_argument("--workspace", required=True, help="PyTriton's workspace (removed on stop)")
    args = parser.parse_args(argv)
    config = TritonConfig(
        http_address="127.0.0.1", http_port=args.http_port, grpc_address="127.0.0.1", grpc_port=args.grpc_port,
        metrics_address="127.0.0.1", metrics_port=args.metrics_port, allow_metrics=True,
        trace_config=["mode=opentelemetry", "rate=1", "level=TIMESTAMPS",
                      f"opentelemetry,url={args.trace_url}",
                      "opentelemetry,resource=service.name=pytriton-tiny-mlp"])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Triton(config=config, workspace=args.workspace) as triton:
        triton.bind(model_name=MODEL, infer_func=infer,
                    inputs=[Tensor(name="x", dtype=np.float32, shape=(-1,))],
                    outputs=[Tensor(name="y", dtype=np.float32, shape=(-1,))],
                    config=ModelConfig(max_batch_size=8))
        triton.run()
        print("READY", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
