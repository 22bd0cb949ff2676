"""``tailscope demo``: the reference target, started for one run and stopped after it."""

from __future__ import annotations

import os

from tailscope.conductor.children import Child, ChildGroup, python_module


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


def launch_reference_target(children: ChildGroup, receiver_port: int, run_dir: str) -> tuple[Child, str]:
    """Start the reference target on a free loopback port, exporting its spans
    to the run's receiver. Returns the child and the target's base URL."""
    env = reference_target_env(receiver_port)
    child = children.start(
        Child("reference target",
              python_module("tailscope.targets.reference", "--host", "127.0.0.1", "--port", "0"),
              env=env, log_path=os.path.join(run_dir, "target.log")),
        wait_listening=True,
    )
    return child, f"http://127.0.0.1:{child.port}"
