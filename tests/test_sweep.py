"""Load sweeps: rate lists, the peak search, the knee, the sweep report, and a
real 3-step sweep against the reference target on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import pytest
from cli_helpers import run_tailscope

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.sweep import Search, StepLlm, StepPercentile, StepPercentiles, SweepStep
from tailscope.analyzers.patterns.load_sweep import find_knee, max_rate_under_slo, saturation, summarize_sweep
from tailscope.loadgen.sweep_rates import PeakSearch, parse_rates
from tailscope.reports.sweep_report import render_sweep_html, sweep_report_data


def test_parse_rates_ranges_and_lists():
    assert parse_rates("50:200:50") == [50, 100, 150, 200]
    assert parse_rates("50:190:50") == [50, 100, 150]
    assert parse_rates("0.5:1.5:0.5") == [0.5, 1.0, 1.5]
    assert parse_rates("300, 100,200") == [300, 100, 200]
    for bad in ("50:10:5", "a:b:c", "50:100", "0,10", "-5", "", "1:100000:1"):
        with pytest.raises(ValueError):
            parse_rates(bad)


def _run_search(low, high, tolerance, capacity, max_steps=20):
    search = PeakSearch(low, high, tolerance, max_steps)
    while (rate := search.next_rate()) is not None:
        search.record(rate, rate <= capacity)
    return search


@pytest.mark.parametrize("capacity", [73.0, 101.0, 399.0])
def test_peak_search_brackets_the_capacity_within_tolerance(capacity):
    search = _run_search(50, 400, 5, capacity)
    passing, failing = search.bracket
    assert passing <= capacity < failing and failing - passing <= 5
    assert search.best == passing
    assert search.history[0] == (50, True) and search.history[1] == (400, False)


def test_peak_search_ends_early_at_either_bound_and_respects_max_steps():
    assert _run_search(50, 400, 5, capacity=10).history == [(50, False)]
    top = _run_search(50, 400, 5, capacity=1000)
    assert top.history == [(50, True), (400, True)] and top.best == 400
    assert len(_run_search(50, 400, 0.001, capacity=123, max_steps=5).history) == 5
    with pytest.raises(ValueError):
        PeakSearch(100, 50, 1)


def _step(index, rate, achieved, p99, passed, limited=False, errors=0.0):
    def pct(value):
        return {"value_ms": value, "ci_low_ms": value * 0.9, "ci_high_ms": value * 1.2, "n": 1000, "claimed": True}

    return decode(SweepStep, {
        "index": index, "rate": rate, "run_dir": f"runs/s{index}", "status": "complete", "duration_s": 10.0,
        "requests": 1000, "errors": 0, "error_rate": errors, "offered_rps": rate, "achieved_rps": achieved,
        "p50": pct(p99 / 3), "p99": pct(p99), "passed": passed, "failed_slos": [] if passed else ["p99 < 100ms"],
        "generator_limited": limited}, "step")


def _summary(*args, **kwargs):
    """summarize_sweep with the facts the sweep loop adds (its folder, step length, no Ctrl-C)."""
    return summarize_sweep(*args, path="runs", step_duration_s=10.0, interrupted=False, **kwargs)


HOCKEY_STICK = [_step(0, 50, 50, 20, True), _step(1, 100, 100, 22, True), _step(2, 150, 150, 25, True),
                _step(3, 200, 199, 40, True), _step(4, 250, 230, 160, False), _step(5, 300, 240, 900, False)]


def test_knee_max_rate_and_saturation_of_a_hockey_stick_curve():
    assert max_rate_under_slo(HOCKEY_STICK) == (200, 3)
    knee = find_knee(HOCKEY_STICK)
    assert knee.rate in (200, 250) and knee.method == "kneedle"
    assert saturation(HOCKEY_STICK).rate == 300  # 240 < 0.9 * 300; 230 >= 0.9 * 250
    flat = [_step(i, 50 * (i + 1), 50 * (i + 1), 20 + i * 10, True) for i in range(5)]  # a straight line
    assert find_knee(flat) is None and find_knee(HOCKEY_STICK[:2]) is None


def test_sweep_summary_flags_noise_and_generator_limits():
    steps = [_step(0, 50, 50, 20, False), _step(1, 100, 100, 22, True, limited=True), _step(2, 150, 120, 300, False)]
    sweep = _summary("s", "rates", ["p99 < 100ms"], steps)
    assert sweep.max_rate_under_slo == 100 and sweep.passed is True
    codes = {w.code for w in sweep.warnings}
    assert codes == {"non_monotone", "generator_limited"}
    none_passed = _summary("s", "rates", ["p99 < 1ms"], [_step(0, 50, 50, 20, False)])
    assert none_passed.passed is False and none_passed.max_rate_under_slo is None
    no_slos = _summary("s", "rates", [], [_step(0, 50, 50, 20, None)])
    assert no_slos.passed is None and no_slos.warnings[0].code == "no_slos"


def _concurrency_step(index, users, achieved, p99, passed):
    ttft, tpot = StepPercentile(p99 / 2, None, None, 100, True), StepPercentile(4.0, None, None, 100, True)
    llm = StepLlm(requests=100, completed=100, output_tokens_per_s=40.0 * achieved,
                  ttft_ms=StepPercentiles(ttft, ttft), tpot_ms=StepPercentiles(tpot, tpot))
    return dataclasses.replace(_step(index, None, achieved, p99, passed), concurrency=users, offered_rps=None,
                               llm=llm)


def test_a_concurrency_sweep_speaks_of_concurrency_and_each_step_line_says_what_it_measured():
    from tailscope.cli.commands.sweep import _step_line, outcome_line

    steps = [_concurrency_step(0, 1, 90, 20, None), _concurrency_step(1, 4, 300, 30, None),
             _concurrency_step(2, 16, 800, 90, None)]
    no_slos = _summary("s", "concurrency", [], steps, variable="concurrency")
    assert "rate" not in no_slos.warnings[0].message
    assert "no highest concurrency under the SLOs" in no_slos.warnings[0].message
    assert "rate" not in outcome_line(no_slos, True)
    line = _step_line(no_slos.steps[2])
    assert line.startswith("step 3: 16 in flight: 800.0 req/s achieved, 32000 output tokens/s")
    assert "latency P99 90.0 ms" in line and line.endswith("; no SLOs")
    assert "—" not in line and "→" not in line
    steps = [dataclasses.replace(step, passed=passed, failed_slos=[] if passed else ["p99 < 50ms"])
             for step, passed in zip(steps, (True, True, False))]
    judged = _summary("s", "concurrency", ["p99 < 50ms"], steps, variable="concurrency")
    assert "highest concurrency under the SLOs: 16 in flight" not in outcome_line(judged, True)
    assert "highest concurrency under the SLOs: 4 in flight" in outcome_line(judged, True)
    assert _step_line(judged.steps[2]).endswith("SLOs failed[/]: p99 < 50ms")
    steps = [dataclasses.replace(step, passed=False) for step in steps]
    none_met = _summary("s", "concurrency", ["p99 < 1ms"], steps, variable="concurrency")
    assert "no concurrency level met the SLOs" in outcome_line(none_met, True)


def test_sweep_report_is_self_contained_and_escapes_names():
    sweep = _summary("<script>alert(1)</script>", "search", ["p99 < 100ms"], HOCKEY_STICK,
                     Search(low=50, high=300, tolerance_rps=5, steps=6, max_steps=8,
                            passing_rate=200, failing_rate=250, history=[]))
    data = sweep_report_data(sweep)
    assert data["max_rate"] == "200.00 req/s" and data["banner"]["label"] == "PASSED"
    assert [r["best"] for r in data["rows"]] == [False, False, False, True, False, False]
    assert data["charts"]["p99"]["plus"][0] == pytest.approx(4.0)  # ci_high − value
    assert "fails at 250.00 req/s" in data["search"]
    html = render_sweep_html(sweep)
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)" in html
    assert 'id="sweep-chart"' in html and "http://" not in html.split("<script", 1)[0]


@pytest.fixture
def reference_target():
    proc = subprocess.Popen([sys.executable, "-m", "tailscope.targets.reference", "--port", "0", "--no-tracing"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("LISTENING"), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _scenario(tmp_path, slo: str) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(textwrap.dedent(f"""
        name: sweep-test
        duration: 30s
        seed: 3
        timeout: 2s
        arrival: {{process: poisson, rate: 10}}
        classes:
          - {{name: text, path: /v1/infer/text, payload: {{kind: json_text, size: 100}}}}
        slo: ["{slo}"]
    """))
    return str(path)


def test_three_step_sweep_against_the_reference_target(tmp_path, reference_target):
    out = tmp_path / "runs"
    proc = run_tailscope("sweep", _scenario(tmp_path, "error_rate < 5%"), "--target", reference_target,
                         "--rates", "10:30:10", "--step-duration", "3s", "--receiver-port", "0",
                         "--out", str(out), timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sweep_dir,) = [os.path.join(out, d) for d in os.listdir(out)]
    with open(os.path.join(sweep_dir, "sweep.json"), encoding="utf-8") as fh:
        sweep = json.load(fh)
    assert [s["rate"] for s in sweep["steps"]] == [10, 20, 30]
    for step in sweep["steps"]:
        assert os.path.exists(os.path.join(step["run_dir"], "report.html"))
        with open(os.path.join(step["run_dir"], "manifest.json"), encoding="utf-8") as fh:
            manifest = json.load(fh)
        assert manifest["scenario"]["arrival"]["rate"] == step["rate"] == manifest["sweep"]["rate"]
        # Poisson arrivals over ~3 s: the achieved rate follows the offered one
        assert 0.4 * step["rate"] < step["achieved_rps"] < 1.8 * step["rate"]
        assert step["p99"]["value_ms"] is not None and step["passed"] is True
    assert sweep["max_rate_under_slo"] == 30 and sweep["passed"] is True
    assert os.path.exists(os.path.join(sweep_dir, "sweep.html"))
    assert "highest rate under the SLOs: 30 req/s" in proc.stdout


def test_sweep_exits_1_when_no_step_meets_the_slos(tmp_path, reference_target):
    proc = run_tailscope("sweep", _scenario(tmp_path, "p50 < 0.001ms"), "--target", reference_target,
                         "--rates", "10,20,30", "--step-duration", "2s", "--receiver-port", "0",
                         "--out", str(tmp_path / "runs"), timeout=240)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "no rate met the SLOs" in proc.stdout
    assert "2 steps in a row failed" in proc.stdout  # the third rate is spared


def test_sweep_usage_errors(tmp_path):
    scenario = _scenario(tmp_path, "p99 < 1s")
    proc = run_tailscope("sweep", scenario, "--target", "http://127.0.0.1:9", "--rates", "50:10:5")
    assert proc.returncode == 2 and "STOP" in proc.stderr
    proc = run_tailscope("sweep", scenario, "--target", "http://127.0.0.1:9", "--rates", "10,20", "--search")
    assert proc.returncode == 2 and "LOW:HIGH" in proc.stderr
