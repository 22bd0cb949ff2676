"""``tailscope demo``: a reference service (the inference target, or the LLM server), started for one run
and stopped after it, exporting its spans to the run's receiver."""

from __future__ import annotations

import os

from tailscope.conductor.children import Child, ChildGroup
from tailscope.support.python_child import python_module


def reference_target_env(receiver_port: int) -> dict[str, str]:
    """Environment of a reference target exporting to the receiver on ``receiver_port``."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        # Export spans promptly so the report sees them without a long grace period.
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_BSP_MAX_QUEUE_SIZE": "65536",
        # One BLAS thread: idle OpenBLAS threads spin and would steal the
        # generator's core on a small machine.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


#: Knobs of the LLM server ``tailscope demo --llm`` starts (docs/llm-server.md): an accelerator-like
#: 10 ms per engine step (so TPOT is in the range real servers show) and 2 tokens per SSE chunk
#: (so the demo exercises token counting over multi-token chunks).
LLM_DEMO_ARGS = ("--step-extra-delay-ms", "10", "--tokens-per-chunk", "2")


def launch_reference_target(children: ChildGroup, receiver_port: int, run_dir: str) -> tuple[Child, str]:
    """Start the reference target on a free loopback port, exporting its spans
    to the run's receiver. Returns the child and the target's base URL."""
    return _launch_service(children, "reference target", "tailscope.targets.reference", (), receiver_port, run_dir)


def launch_llm_target(children: ChildGroup, receiver_port: int, run_dir: str,
                      args: tuple[str, ...] = LLM_DEMO_ARGS) -> tuple[Child, str]:
    """Start the LLM reference server (``python -m tailscope.targets.llm`` with ``args``) on a free
    loopback port, its ``llm_request`` spans exported to the run's receiver. Returns the child and
    the server's base URL (its ``/metrics`` is the scenario's ``signals.prometheus: /metrics``)."""
    return _launch_service(children, "LLM reference server", "tailscope.targets.llm", args, receiver_port, run_dir)


def _launch_service(children: ChildGroup, name: str, module: str, args: tuple[str, ...], receiver_port: int,
                    run_dir: str) -> tuple[Child, str]:
    """Start ``python -m module --host 127.0.0.1 --port 0 *args`` as a child of the run (log:
    ``target.log``), wait for its ``LISTENING <port>`` line; (child, base URL)."""
    child = children.start(
        Child(name, python_module(module, "--host", "127.0.0.1", "--port", "0", *args),
              env=reference_target_env(receiver_port), log_path=os.path.join(run_dir, "target.log")),
        wait_listening=True,
    )
    return child, f"http://127.0.0.1:{child.port}"
