"""Abort thresholds: rule parsing, the monitor's judgement on live progress,
and a real `tailscope run` that aborts against a failing loopback server."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from cli_helpers import load_analysis, only_run_dir, run_tailscope
from test_loadgen_runner import serve  # noqa: F401  (fixture)

from tailscope.conductor.abort import AbortMonitor
from tailscope.loadgen.recorder import LiveStats
from tailscope.loadgen.spec import ArrivalSpec
from tailscope.scenario_model.abort_rules import parse_rule
from tailscope.scenario_model.scenario import ScenarioError, parse_scenario


@pytest.mark.parametrize("text, metric, op, threshold, window", [
    ("error_rate > 50% over 10s", "error_rate", ">", 0.5, 10),
    ("error_rate >= 0.2", "error_rate", ">=", 0.2, 10),
    ("p99 > 2s over 1m", "p99", ">", 2000.0, 60),
    ("p50>=250ms over 5s", "p50", ">=", 250.0, 5),
    ("achieved_ratio < 0.5 over 20s", "achieved_ratio", "<", 0.5, 20),
])
def test_rules_parse(text, metric, op, threshold, window):
    rule = parse_rule(text)
    assert (rule.metric, rule.op, rule.threshold, rule.window_s) == (metric, op, threshold, window)


@pytest.mark.parametrize("text, message", [
    ("latency > 1s", "unknown metric 'latency'"),
    ("p99 > 2", "needs a time unit"),
    ("error_rate > 150%", "between 0 and 1"),
    ("p99 > 1s over 0.5s", "whole number of seconds"),
    ("p99 > 1s over 10m", "1..300"),
    ("p99 is high", "METRIC OP VALUE"),
])
def test_bad_rules_say_why(text, message):
    with pytest.raises(ValueError, match=message):
        parse_rule(text)


def test_scenario_abort_on_errors_are_located():
    text = ("target: http://127.0.0.1:9\nduration: 5s\narrival: {rate: 5}\nclasses: [{name: a, path: /}]\n"
            "abort_on:\n  - p99 > 1s\n  - errors > 3\n")
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(text, "s.yaml")
    assert str(exc.value).startswith("s.yaml:7: abort_on[1]: 'errors > 3': unknown metric")


def stats(count=100, errors=0, p50=10.0, p99=50.0, window=10) -> LiveStats:
    return LiveStats(window_s=window, count=count, errors=errors, rate_last_s=count / window,
                     p50_ms=p50, p99_ms=p99, late_share=0.0)


def progress(elapsed, completed=0, **window_stats):
    return SimpleNamespace(elapsed_s=elapsed, completed=completed, errors=0, dropped=0,
                           windows={10: stats(**window_stats)})


class FakeContext:
    def __init__(self, arrival=ArrivalSpec("constant", rate=100)):
        self.plan = SimpleNamespace(arrival=arrival)
        self.reasons = []

    def abort(self, reason):
        self.reasons.append(reason)


def test_monitor_trips_on_the_first_rule_that_holds_once_its_window_is_full():
    ctx = FakeContext()
    monitor = AbortMonitor((parse_rule("p99 > 1s over 10s"), parse_rule("error_rate > 50% over 10s")))
    assert monitor.stat_windows_s == (10,)
    monitor.start(ctx)
    monitor.on_progress(progress(5, errors=90))  # window not full yet: not judged
    monitor.on_progress(progress(10, errors=10, p99=900))  # below both thresholds
    monitor.on_progress(progress(11, count=10, errors=9))  # too few requests in the window
    assert ctx.reasons == []
    monitor.on_progress(progress(12, errors=60, p99=1200))
    assert len(ctx.reasons) == 1 and ctx.reasons[0].startswith("p99 > 1s over 10s (observed 1200 ms at 12 s)")
    monitor.on_progress(progress(13, errors=99))
    assert len(ctx.reasons) == 1  # one abort per run


def test_achieved_ratio_compares_completions_with_the_schedule():
    ctx = FakeContext(ArrivalSpec("constant", rate=100))
    monitor = AbortMonitor((parse_rule("achieved_ratio < 0.5 over 10s"),))
    monitor.start(ctx)
    for second in range(0, 21):
        completed = 100 * second if second <= 10 else 1000 + 30 * (second - 10)  # falls to 30 % after 10 s
        monitor.on_progress(progress(second, completed=completed))
        if ctx.reasons:
            break
    assert ctx.reasons and "achieved_ratio < 0.5" in ctx.reasons[0]
    assert 15 <= second <= 18  # the 10 s window's ratio crosses 0.5 about 7 s after the drop
    closed = FakeContext(ArrivalSpec("closed", users=2))
    monitor = AbortMonitor((parse_rule("achieved_ratio < 0.5 over 10s"),))
    monitor.start(closed)
    for second in range(0, 30):
        monitor.on_progress(progress(second, completed=0))
    assert closed.reasons == []  # no schedule, no offered rate: never judged


def test_without_live_windows_the_error_rate_comes_from_the_totals():
    ctx = FakeContext()
    monitor = AbortMonitor((parse_rule("error_rate > 50% over 5s"),))
    monitor.start(ctx)
    for second in range(0, 12):
        errors = 0 if second <= 5 else 80 * (second - 5)  # 100 req/s ended, 80% failing after 5 s
        monitor.on_progress(SimpleNamespace(elapsed_s=second, completed=100 * second, errors=errors,
                                            dropped=0, windows={}))
        if ctx.reasons:
            break
    assert ctx.reasons and 8 <= second <= 10


SCENARIO = """\
name: abort-me
duration: 30s
seed: 1
timeout: 2s
arrival: {process: constant, rate: 40}
classes:
  - {name: ok, path: /ok, method: GET, weight: 1}
  - {name: broken, path: /fail, method: GET, weight: 3}
slo: ["p99 < 1s"]
abort_on:
  - error_rate > 50% over 2s
"""


def test_a_run_aborts_is_marked_and_still_reported(serve, tmp_path):  # noqa: F811
    server = serve(service_s=0.001)
    scenario = tmp_path / "abort.yaml"
    scenario.write_text(SCENARIO)
    proc = run_tailscope("run", str(scenario), "--target", server.url, "--out", str(tmp_path / "runs"),
                         "--receiver-port", "0", "--abort-on", "p99 > 20s over 5s", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "aborted: error_rate > 50% over 2s" in proc.stdout
    run_dir = only_run_dir(tmp_path / "runs")
    with open(os.path.join(run_dir, "manifest.json"), encoding="utf-8") as handle:
        manifest = json.load(handle)
    assert manifest["status"] == "aborted" and len(manifest["abort_reasons"]) == 1
    assert manifest["load"]["stop_reason"] == "stopped"
    assert (manifest["load"]["end_ns"] - manifest["load"]["start_ns"]) / 1e9 < 10  # not 30 s
    analysis = load_analysis(run_dir)
    assert analysis["run"]["status"] == "aborted" and analysis["run"]["abort_reasons"] == manifest["abort_reasons"]
    assert not analysis["verdict"]["passed"] and analysis["verdict"]["aborted"]
    assert any(f.startswith("aborted: error_rate > 50%") for f in analysis["verdict"]["failed"])
    assert any(w["code"] == "aborted" for w in analysis["warnings"])
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as handle:
        assert "run aborted early: error_rate &gt; 50% over 2s" in handle.read()
