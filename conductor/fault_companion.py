"""The run companion that injects a run's faults through the fault agent process.

:class:`FaultInjection` is a :class:`tailscope.conductor.companion.Companion` (duck
typed: this module does not import the conductor, so it stays free of
Locust). ``start`` launches ``python -m tailscope.faults.fault_agent`` beside the
load, waits until every fault is checked and prepared — a fault that cannot
run here fails the run *before any load* with :class:`FaultSetupError` — and
then gives the agent the load's start time. ``stop`` asks the agent to cut
active faults short and clean up (SIGTERM), waits for it, and raises
:class:`FaultCleanupError` listing anything left behind (the conductor
records it in the manifest's ``cleanup_errors``); an agent that did not end
cleanly (``kill -9``) has its undo journal replayed first, so what it left on
the host (cgroups, limits, swap files) is put back. The agent's log is
``faults.log`` in the run directory; its ground truth is ``events.faults.arrow``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import threading
import time

from tailscope.faults.injector import FaultCleanupError, FaultSetupError, FaultSpec
from tailscope.faults.leftovers import undo_leftovers
from tailscope.faults.llm_load import TOKENIZER_PARAM
from tailscope.faults.processes import stop_process
from tailscope.faults.undo_journal import JOURNAL_NAME
from tailscope.support.python_child import python_module

#: Longest wait for the agent's checks and preparation (a swap file of a few GB takes a while), s.
READY_TIMEOUT_S = 300.0
#: Longest wait for the agent to revert and clean up after SIGTERM (swapoff pages everything back in), s.
STOP_TIMEOUT_S = 300.0
LOG_NAME = "faults.log"


def run_id_of(run_dir: str) -> str:
    """A short name for what injectors create, from the run directory's name."""
    name = re.sub(r"[^A-Za-z0-9-]", "-", os.path.basename(os.path.normpath(run_dir)))
    return name[:40] or "run"


def with_scenario_tokenizer(specs: list[FaultSpec], plan) -> list[FaultSpec]:
    """``specs`` with an empty ``tokenizer`` parameter (the LLM traffic faults, faults/llm_load.py)
    set to the tokenizer the scenario's first OpenAI-API class names, so that the fault's prompts
    are sized in the same tokens as the load's; unchanged when no class names one."""
    tokenizer = next((c.llm.tokenizer for c in getattr(plan, "classes", ()) if c.llm is not None and c.llm.tokenizer),
                     None)
    if tokenizer is None:
        return list(specs)
    return [dataclasses.replace(spec, params={**spec.params, TOKENIZER_PARAM: tokenizer})
            if spec.params.get(TOKENIZER_PARAM) == "" else spec for spec in specs]


class FaultInjection:
    """Companion running ``specs`` against the run's target (see the module docstring)."""

    name = "faults"

    def __init__(self, specs: list[FaultSpec]) -> None:
        self.specs = list(specs)
        self._process: subprocess.Popen | None = None
        self._log_path: str | None = None
        self._run_dir = ""

    def start(self, ctx) -> None:
        pid = (ctx.target_process or {}).get("pid")
        self._run_dir = ctx.run_dir
        self._log_path = os.path.join(ctx.run_dir, LOG_NAME)
        specs = with_scenario_tokenizer(self.specs, ctx.plan)
        argv = python_module("tailscope.faults.fault_agent", "--run-dir", ctx.run_dir,
                             "--faults", json.dumps([spec.as_dict() for spec in specs]),
                             "--run-id", run_id_of(ctx.run_dir), "--target-url", ctx.plan.target,
                             *(["--target-pid", str(pid)] if pid else []))
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
        answer = self._first_line(READY_TIMEOUT_S)
        if answer != "READY":
            code = self._end_agent()
            reason = answer[len("ERROR "):] if answer.startswith("ERROR ") else (
                answer or f"the fault agent did not get ready; see {self._log_path}")
            leftovers = self._put_back_leftovers(code)[1:] if code not in (0, None) else []
            raise FaultSetupError("; ".join([f"fault injection cannot start: {reason}", *leftovers]))
        assert self._process.stdin is not None
        self._process.stdin.write(f"GO {time.time_ns()}\n".encode())
        self._process.stdin.flush()

    def on_progress(self, progress) -> None:
        pass

    def stop(self) -> None:
        if self._process is None:
            return
        code = self._end_agent()
        self._process = None
        problems = self._cleanup_errors()
        if code not in (0, None):
            problems += self._put_back_leftovers(code)
        if problems:
            raise FaultCleanupError("; ".join(problems))

    def _put_back_leftovers(self, code: int) -> list[str]:
        """After an agent that did not end cleanly (killed, or cleanup errors): replay its undo journal.
        Returns the lines for ``cleanup_errors``: how the agent ended, what was put back, what was not."""
        how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        put_back, failed = undo_leftovers(os.path.join(self._run_dir, JOURNAL_NAME))
        lines = [f"the fault agent {how}; see {self._log_path}"]
        if put_back:
            lines.append("put back from its undo journal: " + ", ".join(put_back))
        return lines + [f"left behind: {line}" for line in failed]

    def _first_line(self, timeout_s: float) -> str:
        assert self._process is not None and self._process.stdout is not None
        result: dict = {}
        stdout = self._process.stdout

        def reader() -> None:
            result["line"] = stdout.readline().decode(errors="replace").strip()

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        thread.join(timeout_s)
        return result.get("line", "")

    def _end_agent(self) -> int | None:
        process = self._process
        if process is None:
            return None
        stop_process(process, grace_s=STOP_TIMEOUT_S)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        return process.returncode

    def _cleanup_errors(self) -> list[str]:
        try:
            with open(self._log_path or "", encoding="utf-8", errors="replace") as fh:
                return [line.split(" ", 1)[1].strip() for line in fh if line.startswith("CLEANUP-ERROR ")]
        except OSError:
            return []
