"""The outcome word: failed over incomplete over unclaimed (by policy) over passed."""

import pytest

from tailscope.analysis_model.codec import encode
from tailscope.analyzers.health.outcome import conclusive_hint, cut_short, outcome_verdict, policy_from
from tailscope.analyzers.stats.slo import evaluate, parse_slo


def _analysis(p99_ms, claimed, n):
    entry = {"value_ms": p99_ms, "ci_low_ms": p99_ms * 0.9, "ci_high_ms": p99_ms * 1.1, "n": n, "claimed": claimed}
    summary = {"requests": n, "error_rate": 0.0, "achieved_rps": n / 60.0,
               "latency_ms": {k: entry for k in ("p50", "p90", "p95", "p99", "p999")}}
    return {"summary": summary, "classes": {}}


COMPLETE = {"status": "complete", "options": {"duration_s": 60.0}, "load": {"stop_reason": "duration"}}
RUN = {"duration_s": 60.0}


def _outcome(slos, analysis, manifest=COMPLETE, run=RUN, policy=None):
    return encode(outcome_verdict(evaluate([parse_slo(s) for s in slos], analysis), run, manifest, policy))


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
    verdict = _outcome(["p99 < 250ms"], _analysis(100.0, True, 1000), manifest=killed, run={"duration_s": 40.2})
    assert (verdict["outcome"], verdict["passed"]) == ("incomplete", False)
    assert verdict["incomplete"]["span"] == "covered 0–40 s of 60 s planned"
    assert "killed" in verdict["detail"] and "covered 0–40 s of 60 s planned" in verdict["detail"]


def test_a_breach_beats_incomplete_and_incomplete_beats_unclaimed():
    interrupted = {**COMPLETE, "status": "interrupted", "load": {"stop_reason": "stopped"}}
    assert _outcome(["p99 < 50ms"], _analysis(100.0, True, 1000), manifest=interrupted)["outcome"] == "failed"
    assert _outcome(["p99 < 250ms"], _analysis(100.0, False, 10), manifest=interrupted)["outcome"] == "incomplete"
    aborted = {**COMPLETE, "status": "aborted", "abort_reasons": ["p99 > 2s over 10s"]}
    assert cut_short(RUN, aborted) is None  # an abort is a failure (abort_verdict), not a cut


def test_a_complete_run_that_stopped_for_another_reason_is_incomplete():
    stopped = {**COMPLETE, "load": {"stop_reason": "stopped"}}
    assert cut_short(RUN, stopped)["reason"] == "stopped early (stop reason: stopped)"
    assert cut_short(RUN, {**COMPLETE, "load": {"stop_reason": "max_requests"}}) is None
    assert cut_short(RUN, {"status": "complete"}) is None  # a run written without a load summary


def test_hints_name_the_metric_and_its_unit_of_rate():
    row = {"metric": "ttft_p99", "cls": None, "needed_samples": 459, "samples": 30}
    assert conclusive_hint(row, 60.0) == "TTFT P99 needs ≥ 459 samples (has 30): run ≥ 16 min at this rate (0.5 req/s)"
    row = {"metric": "itl_p999", "cls": "chat", "needed_samples": 4603, "samples": 3000}
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
    from tailscope.cli.commands.sweep import outcome_line

    sweep = {"max_rate_under_slo": None, "max_concurrency_under_slo": None, "passed": False,
             "steps": [{"outcome": "inconclusive"}, {"outcome": "incomplete"}]}
    assert outcome_line(sweep, False).startswith("[yellow]INCONCLUSIVE: no rate met the SLOs")
    sweep["steps"].append({"outcome": "failed"})
    assert outcome_line(sweep, False) == "[red]FAILED: no rate met the SLOs[/]"
