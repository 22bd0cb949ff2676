"""``tailscope agent --harness URL``: sample the target's host and send it to the harness.

For a service on another machine than the harness: run this on the service's
host; it samples host, process, cgroup, PSI, Prometheus and GPU signals like
the harness's own sampler and exports them as OTLP metrics to the harness's
receiver (start ``tailscope run`` with ``--receiver-host`` set to an address
the agent can reach, and a ``--receiver-token``: the agent sends the same token).
See docs/signals.md and docs/receiver.md.
"""

from __future__ import annotations

import http.client
import signal
import threading

from tailscope.cli.commands.common import EXIT_OK, duration_arg, error, receiver_token_from
from tailscope.support.cgroups import locate_cgroup_path
from tailscope.support.procfs import read_text


def register(sub) -> None:
    p = sub.add_parser(
        "agent", help="sample a remote target's host and send the signals to the harness (OTLP)",
        description="Run the samplers on the target's host and export them as OTLP metrics to a "
                    "harness receiver (series keep their names, with a host attribute; the clock "
                    "offset to the harness is measured and sent). Stops on Ctrl-C/SIGTERM or after "
                    "--duration. Exit 0, or 2 when the target or the harness cannot be found.")
    p.add_argument("--harness", required=True, metavar="URL",
                   help="the harness's OTLP/HTTP receiver, e.g. http://10.0.0.5:4318 (https:// when it serves TLS)")
    p.add_argument("--token", metavar="TOKEN",
                   help="the harness's receiver token (default: the environment variable TAILSCOPE_RECEIVER_TOKEN)")
    p.add_argument("--harness-ca", metavar="FILE",
                   help="PEM certificate(s) to verify an https:// harness with (e.g. its self-signed certificate)")
    p.add_argument("--rate", type=float, default=10.0, metavar="HZ", help="samples per second (default 10)")
    p.add_argument("--duration", type=duration_arg, metavar="D", help="stop after this long (default: until stopped)")
    p.add_argument("--host-label", metavar="NAME", help="the host attribute (default: this host's name)")
    p.add_argument("--export-interval", type=duration_arg, default=1.0, metavar="D",
                   help="how often buffered samples are sent (default 1s)")
    target = p.add_argument_group("target on this host (default: the process listening on --target-port)")
    target.add_argument("--target-port", type=int, metavar="PORT", help="the service's listening port")
    target.add_argument("--target-pid", type=int, metavar="PID")
    target.add_argument("--target-process", metavar="NAME")
    target.add_argument("--target-container", metavar="ID")
    target.add_argument("--target-cgroup", metavar="PATH")
    target.add_argument("--prometheus", metavar="URL", action="append", default=[],
                        help="a /metrics URL to scrape every tick (repeatable)")
    target.add_argument("--no-children", dest="include_children", action="store_false",
                        help="watch the process alone, not summed with its descendants")
    p.set_defaults(handler=handle)


def handle(args) -> int:
    # the samplers import psutil, numpy and the OTLP client: only when the agent runs
    from tailscope.signals.discovery import TargetNotFound
    from tailscope.signals.launch import TargetChoice, find_target
    from tailscope.signals.remote_agent import run_agent
    from tailscope.signals.sampling_loop import SamplerConfig

    if not 0.1 <= args.rate <= 1000:
        return error(f"--rate must be between 0.1 and 1000 Hz, got {args.rate}")
    choice = TargetChoice(pid=args.target_pid, process_name=args.target_process,
                          container=args.target_container, cgroup=args.target_cgroup)
    try:
        target = find_target(choice, args.target_port, loopback=True)
        location = (locate_cgroup_path(target["cgroup_path"], read_text("/proc/self/mountinfo"))
                    if target.get("cgroup_path") else None)
    except (TargetNotFound, OSError) as exc:
        return error(str(exc))
    print(f"tailscope agent: target pid {target.get('pid')} "
          f"({target.get('found_by') or target.get('reason')}); sending to {args.harness}", flush=True)
    config = SamplerConfig(pid=target.get("pid"), include_children=args.include_children, cgroup=location,
                           prometheus_urls=list(args.prometheus))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    timer = threading.Timer(args.duration, stop.set) if args.duration else None
    if timer is not None:
        timer.start()
    try:
        summary, stats = run_agent(args.harness, config, args.rate, stop, host=args.host_label,
                                   export_interval_s=args.export_interval, token=receiver_token_from(args, "token"),
                                   ca_file=args.harness_ca)
    except (OSError, http.client.HTTPException, ValueError, KeyError) as exc:
        return error(f"the harness receiver at {args.harness} does not answer {'/v1/time'}: {exc}")
    finally:
        if timer is not None:
            timer.cancel()
    offset = f"{stats.clock.offset_ns / 1e6:+.3f} ms (rtt {stats.clock.rtt_ns / 1e6:.3f} ms)" if stats.clock else "unknown"
    print(f"tailscope agent: {summary.ticks} ticks, {stats.points_sent} points sent, "
          f"{stats.points_dropped} dropped, clock offset {offset}", flush=True)
    return EXIT_OK
