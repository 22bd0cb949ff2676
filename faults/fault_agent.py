"""``python -m tailscope.faults.fault_agent``: the process that injects a run's faults.

The harness (its run companion, :mod:`tailscope.conductor.fault_companion`) starts one
agent per run. Running the injectors in their own process keeps their
blocking work (cgroup writes that reclaim memory, swapoff, dd) off the load
generator's event loop, and — with ``PR_SET_PDEATHSIG`` — makes them undo
their faults even when the harness is killed with ``kill -9``.

Protocol on stdin/stdout (one line each):

1. the agent checks and prepares every fault, then prints ``READY`` — or
   ``ERROR <reason>`` and exits with status 2, having changed nothing;
2. the harness writes ``GO <t0_ns>`` when the load starts (EOF: cancelled);
3. the agent applies and reverts each fault on time, writing each window to
   ``events.faults.arrow`` in the run directory as soon as it ends;
4. on SIGTERM/SIGINT (or when every window is over and stdin closes) it cuts
   active faults short, cleans up everything and exits: 0, or 3 when some
   cleanup failed (listed on stderr as ``CLEANUP-ERROR <message>`` lines; a
   fault that failed to apply or revert is a ``FAULT-ERROR`` line and an
   ``error`` in its ground-truth event).

Before each change to the host, the injector writes how to undo it to
``faults.undo.jsonl`` (:mod:`.undo_journal`); the agent deletes that journal
when it ends having undone everything, so a journal left behind means a
killed agent, and the harness replays it (:mod:`.leftovers`).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import threading

from tailscope.faults.injector import FaultError, FaultSetupError, FaultSpec, TargetInfo
from tailscope.faults.registry import make_injector
from tailscope.faults.schedule import FaultSchedule
from tailscope.faults.undo_journal import JOURNAL_NAME, UndoJournal
from tailscope.rundir import Appender, schema

EXIT_SETUP = 2
EXIT_CLEANUP = 3
WRITER_NAME = "faults"
PR_SET_PDEATHSIG = 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tailscope.faults.fault_agent")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--faults", required=True, help="JSON list of FaultSpec dicts")
    parser.add_argument("--target-pid", type=int, default=None)
    parser.add_argument("--target-url", default=None)
    parser.add_argument("--run-id", required=True, help="names the cgroups and files the injectors create")
    return parser.parse_args(argv)


class EventFile:
    """``events.faults.arrow``: one flushed batch per ground-truth event."""

    def __init__(self, run_dir: str) -> None:
        self._appender = Appender(os.path.join(run_dir, schema.writer_file(schema.EVENTS, WRITER_NAME)),
                                  schema.EVENTS_SCHEMA)
        self._lock = threading.Lock()

    def record(self, kind: str, start_ns: int, end_ns: int, source: str, attributes: dict) -> None:
        with self._lock:
            self._appender.append(kind, int(start_ns), int(end_ns), source, json.dumps(attributes))
            self._appender.flush()

    def close(self) -> None:
        self._appender.close()


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _wait_for_go(stop: threading.Event) -> int | None:
    """t0 from a ``GO <t0_ns>`` line on stdin; None on EOF or when ``stop`` is set first."""
    result: dict = {}

    def reader() -> None:
        line = sys.stdin.readline()
        parts = line.split()
        if len(parts) == 2 and parts[0] == "GO" and parts[1].isdigit():
            result["t0"] = int(parts[1])
        else:
            stop.set()
        got.set()

    got = threading.Event()
    threading.Thread(target=reader, name="stdin", daemon=True).start()
    while not got.wait(0.1):
        if stop.is_set():
            return None
    return result.get("t0")


def run_agent(args: argparse.Namespace, stop: threading.Event) -> int:
    specs = [FaultSpec.from_dict(item) for item in json.loads(args.faults)]
    undo = UndoJournal(os.path.join(args.run_dir, JOURNAL_NAME))
    target = TargetInfo(pid=args.target_pid, url=args.target_url, run_id=args.run_id, work_dir=args.run_dir,
                        undo=undo)
    events = EventFile(args.run_dir)
    schedule = FaultSchedule([make_injector(spec, target) for spec in specs], events.record)
    try:
        try:
            schedule.check()
            schedule.prepare()
        except (FaultSetupError, OSError) as exc:
            _say(f"ERROR {exc}")
            return EXIT_SETUP
        _say("READY")
        t0_ns = _wait_for_go(stop)
        if t0_ns is not None:
            schedule.start(t0_ns)
            while not stop.is_set() and not schedule.wait(0.2):
                pass
            stop.wait()
    except FaultError as exc:
        print(f"agent failed: {exc}", file=sys.stderr)
    finally:
        cleanup_errors = schedule.shutdown()
        events.close()
        for message in schedule.errors:
            print(f"FAULT-ERROR {message}", file=sys.stderr, flush=True)
        for message in cleanup_errors:
            print(f"CLEANUP-ERROR {message}", file=sys.stderr, flush=True)
        if not cleanup_errors:
            undo.discard()
    return EXIT_CLEANUP if cleanup_errors else 0


def main(argv: list[str] | None = None) -> int:
    _die_with_parent()
    args = parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if os.getppid() == 1:  # the harness died before we could ask to die with it
        return EXIT_SETUP
    return run_agent(args, stop)


if __name__ == "__main__":
    sys.exit(main())
