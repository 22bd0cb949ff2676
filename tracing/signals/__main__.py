"""``python -m tailscope.tracing.signals --run-dir DIR [--pid PID] [--rate 10]``.

Samples until SIGTERM/SIGINT, then flushes and closes ``signals.arrow`` and exits 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .runner import DEFAULT_RATE_HZ, run_sampling


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tailscope.tracing.signals",
        description="Sample host, process, cgroup, PSI and GPU signals into a run directory.",
    )
    parser.add_argument("--run-dir", required=True, help="run directory to write into")
    parser.add_argument("--pid", type=int, default=None, help="target process to watch")
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE_HZ, help="samples per second (default 10)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    run_sampling(args.run_dir, args.pid, args.rate, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
