"""``python -m tailscope.signals --run-dir DIR [--pid PID] [--rate 10]
[--cgroup PATH] [--prometheus URL ...] [--no-children]``.

Samples until SIGTERM/SIGINT, then flushes and closes ``signals.arrow`` and
exits 0; exits 2 when a given cgroup cannot be found.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from tailscope.rundir.appender import EXIT_DISK_FULL
from tailscope.signals.config import SamplerConfig
from tailscope.signals.sampling_loop import DEFAULT_RATE_HZ, run_sampling
from tailscope.support.cgroups import locate_cgroup_path
from tailscope.support.procfs import read_text


def add_sampler_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by the local sampler process and ``tailscope agent``."""
    parser.add_argument("--pid", type=int, default=None, help="target process to watch")
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE_HZ, help="samples per second (default 10)")
    parser.add_argument("--cgroup", metavar="PATH", default=None,
                        help="cgroup to watch (a directory under /sys/fs/cgroup or a cgroup path "
                             "such as /docker/ID); default: the pid's own")
    parser.add_argument("--prometheus", metavar="URL", action="append", default=[],
                        help="a /metrics URL to scrape at the sampling rate (repeatable)")
    parser.add_argument("--no-children", dest="include_children", action="store_false",
                        help="watch the pid alone, not summed with its descendants")


def sampler_config(args: argparse.Namespace) -> SamplerConfig:
    """SamplerConfig from parsed arguments; raises FileNotFoundError for an unknown cgroup."""
    location = None
    if args.cgroup:
        location = locate_cgroup_path(args.cgroup, read_text("/proc/self/mountinfo"))
    return SamplerConfig(pid=args.pid, include_children=args.include_children, cgroup=location,
                         prometheus_urls=list(args.prometheus))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tailscope.signals",
        description="Sample host, process, cgroup, PSI, Prometheus and GPU signals into a run directory.",
    )
    parser.add_argument("--run-dir", required=True, help="run directory to write into")
    add_sampler_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = sampler_config(args)
    except (OSError, ValueError) as exc:
        print(f"signals: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        run_sampling(args.run_dir, args.pid, args.rate, stop, config=config)
    except OSError as exc:  # disk full (DiskFullError) or another write error: say so, exit clean
        try:
            print(f"signals: stopped: {exc}", file=sys.stderr, flush=True)
        except OSError:
            pass  # the log is on the full disk too; the exit status says it
        return EXIT_DISK_FULL if exc.errno == 28 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
