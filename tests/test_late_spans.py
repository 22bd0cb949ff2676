"""The wait for late spans (conductor/late_spans.py) on real run-directory files.

The request rows and the spans are real Arrow streams written by the run
directory's own Appender, as the harness and the receiver write them; the
target's later exports are appended while the wait polls (its ``sleep``), so
each ending — complete, quiet, cap, nothing expected, no spans — is met as in
a run, on a clock the test advances instead of the wall's.
"""

from __future__ import annotations

import os
import time

import pytest

from tailscope.conductor.late_spans import LateSpanPolicy, policy_from, wait_for_late_spans
from tailscope.rundir import schema
from tailscope.rundir.appender import Appender

SERVER, INTERNAL = 2, 1


class FakeTime:
    """A clock the wait's sleeps advance; ``at`` schedules appends at given times."""

    def __init__(self):
        self.now = 1000.0
        self.scheduled: list[tuple[float, callable]] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.01)
        due = [action for at, action in self.scheduled if at <= self.now]
        self.scheduled = [(at, action) for at, action in self.scheduled if at > self.now]
        for action in due:
            action()

    def at(self, delay_s: float, action) -> None:
        self.scheduled.append((self.now + delay_s, action))


def trace(i: int) -> str:
    return f"{i:032x}"


@pytest.fixture
def run_dir(tmp_path):
    path = str(tmp_path / "run")
    os.makedirs(path)
    return path


def write_requests(run_dir: str, ok: int, errors: int = 0) -> int:
    now = time.time_ns()
    requests = Appender(os.path.join(run_dir, schema.REQUESTS), schema.REQUESTS_SCHEMA)
    for i in range(ok + errors):
        failed = i >= ok
        requests.append_row({"scheduled_ns": now - 2_000_000_000, "sent_ns": now - 2_000_000_000,
                             "end_ns": now - 1_000_000_000, "cls": "a", "status": 500 if failed else 200,
                             "trace_id": trace(i), "error_kind": "http" if failed else None})
    requests.close()
    return ok + errors


class Spans:
    """The receiver's spans.arrow, appended batch by batch."""

    def __init__(self, run_dir: str):
        self.appender = Appender(os.path.join(run_dir, schema.SPANS), schema.SPANS_SCHEMA)

    def export(self, traces, kind: int = SERVER) -> None:
        for i in traces:
            self.appender.append_row({"trace_id": trace(i), "span_id": f"{i:016x}", "name": "POST /x",
                                      "kind": kind, "start_ns": 1, "end_ns": 2})
        self.appender.flush()


def wait(run_dir: str, fake: FakeTime, rows: int, *, load_age_s: float = 30.0, policy=LateSpanPolicy(),
         sample_rate: float = 1.0):
    return wait_for_late_spans(run_dir, load_start_ns=time.time_ns() - int(load_age_s * 1e9),
                               sample_rate=sample_rate, policy=policy, rows_written=lambda: rows,
                               clock=fake.clock, sleep=fake.sleep)


def test_the_wait_ends_one_export_interval_after_the_last_span_of_an_expected_trace(run_dir):
    rows, fake, spans = write_requests(run_dir, 50), FakeTime(), Spans(run_dir)
    spans.export(range(40))
    fake.at(4.0, lambda: spans.export(range(40, 48), kind=INTERNAL))  # children first: not yet complete
    fake.at(4.6, lambda: spans.export(range(40, 50)))  # the server's last batch, 4.6 s after the stop
    result = wait(run_dir, fake, rows)
    assert result.ended == "complete" and result.expected == 50 and result.missing == 0
    assert 4.6 + 5.0 <= result.waited_s <= 4.6 + 5.0 + 0.3  # and one export interval more
    assert result.spans_after_complete == 0


def test_a_second_exporters_batch_after_the_server_spans_is_waited_for_and_counted(run_dir):
    """PyTriton: Triton exports its spans, the Python proxy (another process) its own, each every 5 s."""
    rows, fake, spans = write_requests(run_dir, 30), FakeTime(), Spans(run_dir)
    spans.export(range(30))  # Triton's batch: every server span is in when the wait begins
    fake.at(4.5, lambda: spans.export(range(30), kind=INTERNAL))  # the proxy's batch, 3.5 s later
    fake.at(20.0, lambda: spans.export(range(30), kind=INTERNAL))  # past the cap: never waited for
    result = wait(run_dir, fake, rows)
    assert result.ended == "complete" and result.missing == 0
    assert result.spans_after_complete == 30
    assert 4.5 + 5.0 <= result.waited_s <= 4.5 + 5.0 + 0.3
    capped = wait(run_dir, FakeTime(), rows, policy=LateSpanPolicy(wait_s=3.0))  # all in already: the cap ends it
    assert capped.ended == "complete" and 3.0 <= capped.waited_s <= 3.3


def test_spans_that_never_come_end_the_wait_once_the_target_is_quiet(run_dir):
    rows, fake, spans = write_requests(run_dir, 20), FakeTime(), Spans(run_dir)
    spans.export(range(10))
    fake.at(3.0, lambda: spans.export(range(10, 18)))  # 18, 19: the target sampled them out
    result = wait(run_dir, fake, rows)
    assert result.ended == "quiet" and result.missing == 2
    assert 3.0 + 6.0 <= result.waited_s <= 3.0 + 6.0 + 0.3  # one export interval + 1 s after the last span


def test_the_cap_bounds_a_target_that_keeps_exporting_other_traces(run_dir):
    rows, fake, spans = write_requests(run_dir, 5), FakeTime(), Spans(run_dir)
    spans.export(range(4))
    for k in range(1, 40):
        fake.at(0.5 * k, lambda k=k: spans.export([1000 + k]))  # other traffic, never trace 4
    result = wait(run_dir, fake, rows, policy=LateSpanPolicy(wait_s=8.0))
    assert result.ended == "cap" and result.missing == 1 and 8.0 <= result.waited_s <= 8.3


def test_no_wait_for_a_target_that_never_sent_a_span(run_dir):
    rows, fake = write_requests(run_dir, 30), FakeTime()
    Spans(run_dir)  # the receiver's empty file
    result = wait(run_dir, fake, rows, load_age_s=30.0)
    assert result.ended == "no_spans" and result.waited_s == 0.0
    short = wait(run_dir, FakeTime(), rows, load_age_s=2.0)  # a short run: its first export may be due
    assert short.ended == "no_spans" and 4.0 <= short.waited_s <= 4.3


def test_no_wait_when_no_request_was_sent_for_tracing_and_succeeded(run_dir):
    rows, fake = write_requests(run_dir, 0, errors=5), FakeTime()
    assert wait(run_dir, fake, rows).ended == "nothing_expected"
    rows = write_requests(run_dir, 10)
    result = wait(run_dir, FakeTime(), rows, sample_rate=0.0)  # head sampling sent none for tracing
    assert result.ended == "nothing_expected" and result.waited_s == 0.0


def test_the_wait_reads_request_rows_the_harness_is_still_flushing(run_dir):
    rows, fake, spans = write_requests(run_dir, 10), FakeTime(), Spans(run_dir)
    spans.export(range(10))
    result = wait(run_dir, fake, rows + 5)  # five rows not on disk yet: read what there is, then stop
    assert result.ended == "complete" and result.expected == 10


def test_policy_from_the_command_line_over_the_scenario_over_the_defaults():
    assert policy_from(None, {}) == LateSpanPolicy(wait_s=15.0, export_interval_s=5.0)
    assert policy_from(None, {"late_span_wait_s": 30.0, "export_interval_s": 10.0}).quiet_s == 11.0
    assert policy_from(4.0, {"late_span_wait_s": 30.0}).wait_s == 4.0
    assert policy_from(2.0, {}).quiet_s == 2.0  # never beyond the cap


def test_the_analysis_splits_missing_spans_into_end_of_run_and_never(tmp_path):
    from run_builders import write_requests_run

    from tailscope.analyzers.analysis import analyze_run
    from tailscope.rundir.appender import Appender as SpanAppender

    ms = 1_000_000
    requests = [{"trace_id": trace(i), "sent_ns": 10_000 * ms + i * 100 * ms, "end_ns": 10_000 * ms + i * 100 * ms + 20 * ms}
                for i in range(30)]
    run_dir = write_requests_run(tmp_path / "run", requests)
    spans = SpanAppender(os.path.join(run_dir, schema.SPANS), schema.SPANS_SCHEMA)
    lost_midway, cut_at_the_end = {5, 12}, {27, 28, 29}
    for i, r in enumerate(requests):
        if i not in lost_midway | cut_at_the_end:
            spans.append_row({"trace_id": r["trace_id"], "span_id": f"{i + 1:016x}", "name": "POST /x", "kind": SERVER,
                              "start_ns": r["sent_ns"] + ms, "end_ns": r["end_ns"] - ms})
    spans.close()
    stages = analyze_run(run_dir)["stages"]
    assert stages["joined_requests"] == 25
    missing = stages["missing_spans"]
    assert (missing["end_of_run"], missing["never"]) == (3, 2)
    assert missing["last_joined_end_ns"] == requests[26]["end_ns"] and missing["wait"] is None
