"""The outcome word: failed over incomplete over unclaimed (by policy) over passed."""

import pytest
from slo_fixtures import entry, request_summary, sources

from tailscope.analysis_model.codec import encode
from tailscope.analysis_model.verdict import SloRow
from tailscope.analyzers.health.load_checks import abort_verdict
from tailscope.analyzers.health.outcome import conclusive_hint, cut_short, outcome_verdict, policy_from
from tailscope.analyzers.stats.slo import evaluate, parse_slo


def _analysis(p99_ms, claimed, n):
    latency = entry(p99_ms, claimed, n, p99_ms * 0.9, p99_ms * 1.1)
    return sources(request_summary(latency, requests=n, achieved_rps=n / 60.0))


COMPLETE = {"status": "complete", "options": {"duration_s": 60.0}, "load": {"stop_reason": "duration"}}
LOAD_S = 60.0  # the run section's duration_s


def _outcome(slos, analysis, manifest=COMPLETE, load_s=LOAD_S, policy=None):
    return encode(outcome_verdict(evaluate([parse_slo(s) for s in slos], analysis), load_s, manifest, policy))


def test_passed_needs_every_slo_claimed():
    verdict = _outcome(["p99 < 250ms"], _analysis(100.0, True, 1000))
    assert (verdict["outcome"], verdict["label"], verdict["passed"], verdict["detail"]) == ("passed", "PASSED", True, "")


def test_unclaimed_is_inconclusive_and_says_what_would_make_it_conclusive():
    verdict = _outcome(["p99 < 250ms"], _analysis(100.0, False, 54))  # 54 requests in 60 s: 0.9 req/s
    assert (verdict["outcome"], verdict["passed"]) == ("inconclusive", False)
    # 459 samples at 0.9 req/s: 510 s, i.e. 9 minutes
    assert verdict["needs"] == ["latency P99 needs ≥ 459 samples (has 54): run ≥ 9 min at this rate (0.9 req/s)"]
    assert verdict["detail"] == verdict["needs"][0]


@pytest.mark.parametrize("policy, outcome, failed", [
    ("pass", "passed", []), ("inconclusive", "inconclusive", []), ("fail", "failed", ["p99 < 250ms (not claimed)"]),
])
def test_the_scenario_policy_decides_unclaimed(policy, outcome, failed):
    verdict = _outcome(["p99 < 250ms"], _analysis(100.0, False, 54), policy=policy_from({"unclaimed": policy}))
    assert (verdict["outcome"], verdict["failed"], verdict["passed"]) == (outcome, failed, outcome == "passed")


def test_a_killed_run_is_incomplete_with_its_covered_span():
    killed = {"status": "running", "options": {"duration_s": 60.0}, "load": None}
    verdict = _outcome(["p99 < 250ms"], _analysis(100.0, True, 1000), manifest=killed, load_s=40.2)
    assert (verdict["outcome"], verdict["passed"]) == ("incomplete", False)
    assert verdict["incomplete"]["span"] == "covered 0–40 s of 60 s planned"
    assert "killed" in verdict["detail"] and "covered 0–40 s of 60 s planned" in verdict["detail"]


def test_a_breach_beats_incomplete_and_incomplete_beats_unclaimed():
    interrupted = {**COMPLETE, "status": "interrupted", "load": {"stop_reason": "stopped"}}
    assert _outcome(["p99 < 50ms"], _analysis(100.0, True, 1000), manifest=interrupted)["outcome"] == "failed"
    assert _outcome(["p99 < 250ms"], _analysis(100.0, False, 10), manifest=interrupted)["outcome"] == "incomplete"
    aborted = {**COMPLETE, "status": "aborted", "abort_reasons": ["p99 > 2s over 10s"]}
    assert cut_short(LOAD_S, aborted) is None  # an abort is a failure (abort_verdict), not a cut


def test_an_aborted_run_fails_with_its_abort_reasons_whatever_its_slos_say():
    aborted = {**COMPLETE, "status": "aborted", "abort_reasons": ["p99 > 2s over 10s"]}
    judgement = abort_verdict(evaluate([parse_slo("p99 < 250ms")], _analysis(100.0, True, 1000)), aborted)
    assert (judgement.passed, judgement.failed, judgement.aborted) == (False, ("aborted: p99 > 2s over 10s",), True)
    verdict = encode(outcome_verdict(judgement, LOAD_S, aborted))
    assert (verdict["outcome"], verdict["aborted"], verdict["failed"]) == ("failed", True, ["aborted: p99 > 2s over 10s"])
    assert "aborted" not in _outcome(["p99 < 250ms"], _analysis(100.0, True, 1000))  # written only after an abort
    unaborted = {**COMPLETE, "abort_reasons": ["p99 > 2s over 10s"]}  # reasons, but the run was not stopped
    assert abort_verdict(evaluate([], _analysis(1.0, True, 1)), unaborted).aborted is False


def test_a_complete_run_that_stopped_for_another_reason_is_incomplete():
    stopped = {**COMPLETE, "load": {"stop_reason": "stopped"}}
    assert cut_short(LOAD_S, stopped).reason == "stopped early (stop reason: stopped)"
    assert cut_short(LOAD_S, {**COMPLETE, "load": {"stop_reason": "max_requests"}}) is None
    assert cut_short(LOAD_S, {"status": "complete"}) is None  # a run written without a load summary


def _row(metric, cls, **sizes):
    return SloRow(slo=f"{metric} < 1ms", metric=metric, cls=cls, op="<", observed=2.0, threshold=1.0,
                  status="unclaimed", passed=False, claimed=False, **sizes)


def test_hints_name_the_metric_and_its_unit_of_rate():
    row = _row("ttft_p99", None, needed_samples=459, samples=30)
    assert conclusive_hint(row, 60.0) == "TTFT P99 needs ≥ 459 samples (has 30): run ≥ 16 min at this rate (0.5 req/s)"
    row = _row("itl_p999", "chat", needed_samples=4603, samples=3000)
    assert conclusive_hint(row, 30.0) == ("ITL P99.9 of chat needs ≥ 4,603 samples (has 3,000): "
                                          "run ≥ 47 s at this rate (100.0 ITL samples/s)")


@pytest.mark.parametrize("raw, message", [
    ("fail", "expected a mapping"), ({"unclaimed": "maybe"}, "expected one of pass, inconclusive, fail"),
    ({"claimed": "pass"}, "unknown field 'claimed'"),
])
def test_bad_policies_are_named(raw, message):
    with pytest.raises(ValueError, match=message):
        policy_from(raw)


def test_each_outcome_has_one_exit_code_and_a_regression_is_not_hidden_by_an_inconclusive_run():
    from tailscope.cli.commands.common import worse_exit_code
    from tailscope.reports.upgrade import verdict_of

    def verdict_exit_code(verdict):
        return verdict_of({"verdict": verdict}).exit_code

    verdicts = [{**_outcome([], _analysis(1.0, True, 1)), "outcome": o} for o in ("passed", "failed", "inconclusive", "incomplete")]
    assert [verdict_exit_code(v) for v in verdicts] == [0, 1, 3, 3]
    assert verdict_exit_code({"passed": False}) == 1 and verdict_exit_code(None) == 0  # analyses before outcomes
    assert worse_exit_code(3, 1) == 1 and worse_exit_code(0, 3) == 3 and worse_exit_code(1, 2) == 2
    assert worse_exit_code(2, 4) == 4 and worse_exit_code(0, 0) == 0


def test_a_sweep_whose_steps_are_all_inconclusive_does_not_say_failed():
    from tailscope.analysis_model.codec import decode
    from tailscope.analysis_model.sweep import Sweep
    from tailscope.cli.commands.sweep import outcome_line

    def sweep_of_steps(*outcomes):
        unclaimed = {"value_ms": None, "ci_low_ms": None, "ci_high_ms": None, "n": 0, "claimed": False}
        steps = [{"index": i, "rate": 10.0 * (i + 1), "run_dir": f"/r/{i}", "status": "complete", "duration_s": 1.0,
                  "requests": 0, "errors": 0, "error_rate": 0.0, "offered_rps": None, "achieved_rps": None,
                  "p50": unclaimed, "p99": unclaimed, "passed": False, "outcome": outcome, "failed_slos": [],
                  "generator_limited": False} for i, outcome in enumerate(outcomes)]
        return decode(Sweep, {"format_version": "1.2", "name": "s", "mode": "rates", "slos": ["p99 < 1ms"],
                              "steps": steps, "max_rate_under_slo": None, "max_concurrency_under_slo": None,
                              "max_rate_step": None, "knee": None, "saturation": None, "search": None,
                              "passed": False, "warnings": [], "path": "/r", "step_duration_s": 1.0,
                              "interrupted": False}, "sweep")

    sweep = sweep_of_steps("inconclusive", "incomplete")
    assert outcome_line(sweep, False).startswith("[yellow]INCONCLUSIVE: no rate met the SLOs")
    sweep = sweep_of_steps("inconclusive", "incomplete", "failed")
    assert outcome_line(sweep, False) == "[red]FAILED: no rate met the SLOs[/]"
