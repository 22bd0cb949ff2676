"""Sweeps stop at saturation: the rule on step records, the scenario's ``sweep`` section, and a
concurrency sweep against a deliberately slow reference target on 127.0.0.1 that must stop two
steps past its knee (issue 29 item 9; docs/sweep.md "Stopping at saturation")."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import pytest
from cli_helpers import run_tailscope

from tailscope.analysis_model.codec import decode, encode
from tailscope.analysis_model.sweep import StepLlm, Stopped, SweepStep
from tailscope.analyzers.patterns.load_sweep import saturation_stop, summarize_sweep
from tailscope.reports.sweep_report import render_sweep_html
from tailscope.scenario_model.scenario import ScenarioError, load_scenario


def _pct(v):
    return {"value_ms": v, "ci_low_ms": v, "ci_high_ms": v, "n": 100, "claimed": True}


def _step(index: int, users: int, achieved: float, p99: float) -> SweepStep:
    return decode(SweepStep, {
        "index": index, "rate": None, "concurrency": users, "run_dir": f"/r/{index}", "status": "complete",
        "duration_s": 10.0, "requests": 100, "errors": 0, "error_rate": 0.0, "offered_rps": None,
        "achieved_rps": achieved, "p50": _pct(p99 / 2), "p99": _pct(p99), "passed": None, "outcome": None,
        "failed_slos": [], "generator_limited": False, "llm": None}, "step")


def _llm(tokens: float) -> StepLlm:
    """LLM figures with ``tokens`` output tokens/s (their TTFT and TPOT do not enter the rule)."""
    return decode(StepLlm, {"requests": 100, "completed": 100, "output_tokens_per_s": tokens,
                            "ttft_ms": {"p50": _pct(50), "p99": _pct(90)}, "tpot_ms": {"p50": _pct(5), "p99": _pct(9)}})


def _summary(*args, **kwargs):
    """summarize_sweep with the facts the sweep loop adds (its folder, step length, no Ctrl-C)."""
    return summarize_sweep(*args, path="/r", step_duration_s=10.0, interrupted=False, **kwargs)


def test_flat_throughput_with_rising_latency_is_saturation_and_growth_is_not():
    growing = [_step(0, 1, 20, 50), _step(1, 2, 40, 52), _step(2, 4, 78, 55), _step(3, 8, 150, 60)]
    assert saturation_stop(growing, 2) is None
    flat = [_step(0, 1, 20, 50), _step(1, 2, 40, 52), _step(2, 4, 41, 100), _step(3, 8, 40, 200)]
    found = saturation_stop(flat, 2)
    assert found.knee.index == 1 and found.knee.level == 2 and found.unit == "req/s"
    assert [a.index for a in found.after] == [2, 3]
    assert found.after[0].throughput_gain == pytest.approx(0.025)
    assert saturation_stop(flat[:3], 2) is None  # one step past the knee is not yet two
    assert saturation_stop(flat[:3], 1).knee.index == 1
    # throughput flat but latency not rising (a noisy plateau): not saturation
    plateau = [_step(0, 1, 20, 50), _step(1, 2, 40, 52), _step(2, 4, 41, 100), _step(3, 8, 40, 90)]
    assert saturation_stop(plateau, 2) is None
    # half the level's growth is the line: 4 -> 8 in flight (+100%) with +40% throughput is saturating
    assert saturation_stop([_step(0, 4, 100, 10), _step(1, 8, 140, 20)], 1) is not None
    assert saturation_stop([_step(0, 4, 100, 10), _step(1, 8, 160, 20)], 1) is None
    with pytest.raises(ValueError):
        saturation_stop(flat, 0)


def test_rate_steps_and_llm_steps_are_judged_by_what_they_deliver():
    def rate_step(index, rate, achieved, p50):
        return dataclasses.replace(_step(index, 0, achieved, 2 * p50), concurrency=None, rate=rate, offered_rps=rate)

    # an open loop past capacity: achieved stays at ~120 req/s while the queue grows
    rates = [rate_step(0, 50, 50, 10), rate_step(1, 100, 99, 12), rate_step(2, 150, 121, 400), rate_step(3, 200, 119, 900)]
    found = saturation_stop(rates, 2)
    assert found.knee.level == 100 and found.unit == "req/s"
    # LLM steps: output tokens/s decides, not requests/s (longer answers at the same request rate still grow)
    llm = [dataclasses.replace(step, llm=_llm(tokens)) for step, tokens in
           zip([_step(0, 1, 10, 50), _step(1, 2, 10, 60), _step(2, 4, 10, 70)], (400.0, 790.0, 1560.0))]
    assert saturation_stop(llm, 1) is None
    llm[2] = dataclasses.replace(llm[2], llm=_llm(800.0))
    assert saturation_stop(llm, 1).unit == "output tokens/s"


def test_the_stop_is_in_sweep_json_and_the_sweep_report():
    flat = [_step(0, 1, 20, 50), _step(1, 2, 40, 52), _step(2, 4, 41, 100), _step(3, 8, 40, 200)]
    stopped = Stopped(reason="saturation", message="saturated at 2 in flight <b>", levels_not_run=[16, 32],
                      saturation=saturation_stop(flat, 2))
    sweep = _summary("s", "concurrency", [], flat, variable="concurrency", stopped=stopped)
    written = encode(sweep)  # as sweep.json holds it
    assert written["format_version"] == "1.2" and written["stopped"]["levels_not_run"] == [16, 32]
    html = render_sweep_html(sweep)
    assert 'id="stopped"' in html and "Stopped early (saturation)" in html and "&lt;b&gt;" in html
    assert 'id="stopped"' not in render_sweep_html(_summary("s", "concurrency", [], flat,
                                                            variable="concurrency"))


def _scenario(tmp_path, extra: str = "") -> str:
    path = tmp_path / "saturating.yaml"
    path.write_text(textwrap.dedent("""
        name: saturating
        duration: 30s
        seed: 5
        timeout: 5s
        arrival: {process: poisson, rate: 10}
        classes:
          - {name: text, path: /v1/infer/text, payload: {kind: json_text, size: 20}}
    """) + extra)
    return str(path)


def test_the_sweep_section_is_checked(tmp_path):
    scenario = load_scenario(_scenario(tmp_path, "sweep: {stop_at_saturation: false, steps_past_knee: 3}\n"),
                             target_override="http://127.0.0.1:9")
    policy = scenario.sections["sweep"]
    assert policy.stop_at_saturation is False and policy.steps_past_knee == 3
    for bad, words in (("sweep: {steps_past_knee: 0}\n", "sweep.steps_past_knee: expected a whole number >= 1"),
                       ("sweep: {stop_at_saturation: 2}\n", "expected true or false"),
                       ("sweep: {knee: 2}\n", "unknown field 'knee'")):
        with pytest.raises(ScenarioError, match=words):
            load_scenario(_scenario(tmp_path, bad), target_override="http://127.0.0.1:9")


@pytest.fixture
def slow_target():
    """The reference target made to saturate at 10 req/s: batches of one request, one model worker,
    each batch held 100 ms (like an accelerator; no CPU spent), so that more than a request or two
    in flight only queues, however busy this machine's CPUs are."""
    proc = subprocess.Popen([sys.executable, "-m", "tailscope.targets.reference", "--port", "0", "--no-tracing",
                             "--max-batch-size", "1", "--model-workers", "1", "--model-extra-delay-ms", "100"],
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


@pytest.mark.timeout(300)
def test_a_concurrency_sweep_stops_two_steps_past_the_knee(tmp_path, slow_target):
    out = tmp_path / "runs"
    proc = run_tailscope("sweep", _scenario(tmp_path), "--target", slow_target, "--concurrency", "1,2,4,8,16,32,64",
                         "--step-duration", "2s", "--receiver-port", "0", "--late-span-wait", "1s",
                         "--out", str(out), timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sweep_dir,) = [os.path.join(out, d) for d in os.listdir(out)]
    with open(os.path.join(sweep_dir, "sweep.json"), encoding="utf-8") as fh:
        sweep = json.load(fh)
    # one batch of one at a time: 1 in flight is all it serves, more only queues. On a loaded
    # machine the client's own overhead rivals the 100 ms (load 12 on 2 cores: 2.8 req/s at 1 in
    # flight, 7.5 at 4): the knee moves up, but not past 8 in flight, and the knee plus two steps
    # are run, the rest are not
    stopped, levels = sweep["stopped"], [1, 2, 4, 8, 16, 32, 64]
    assert stopped is not None and stopped["reason"] == "saturation", proc.stdout[-3000:]
    found = stopped["saturation"]
    knee = found["knee"]["level"]
    assert knee <= 8 and found["steps_past_knee"] == 2 and found["unit"] == "req/s"
    ran = levels[:levels.index(knee) + 3]
    assert [s["concurrency"] for s in sweep["steps"]] == ran and stopped["levels_not_run"] == levels[len(ran):]
    assert all(a["throughput_gain"] < 0.5 * a["level_gain"] for a in found["after"])
    assert found["knee"]["latency_ms"] < found["after"][0]["latency_ms"] < found["after"][1]["latency_ms"]
    assert f"saturated at {knee} in flight" in proc.stdout
    assert f"{len(levels) - len(ran)} remaining concurrency levels not run" in proc.stdout
    with open(os.path.join(sweep_dir, "sweep.html"), encoding="utf-8") as fh:
        assert "Stopped early (saturation)" in fh.read()


@pytest.mark.timeout(120)
def test_the_scenario_can_turn_the_stop_off(tmp_path, slow_target):
    scenario = _scenario(tmp_path, "sweep: {stop_at_saturation: false}\n")
    proc = run_tailscope("sweep", scenario, "--target", slow_target, "--concurrency", "1,2,4,8",
                         "--step-duration", "1s", "--receiver-port", "0", "--late-span-wait", "1s",
                         "--out", str(tmp_path / "runs"), timeout=110)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sweep_dir,) = [os.path.join(tmp_path / "runs", d) for d in os.listdir(tmp_path / "runs")]
    with open(os.path.join(sweep_dir, "sweep.json"), encoding="utf-8") as fh:
        sweep = json.load(fh)
    assert [s["concurrency"] for s in sweep["steps"]] == [1, 2, 4, 8] and sweep["stopped"] is None
    assert "saturated" not in proc.stdout
