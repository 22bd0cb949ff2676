"""SLO parsing (accepted forms, precise errors) and evaluation."""

import pytest
from slo_fixtures import entry, request_summary, sources

from tailscope.analyzers.stats.slo import SloJudgement, evaluate, parse_slo


@pytest.mark.parametrize("text, metric, op, threshold, cls", [
    ("p99 < 250ms", "p99", "<", 250.0, None),
    ("p50<=0.1s", "p50", "<=", 100.0, None),
    ("p999 < 900us", "p999", "<", 0.9, None),
    ("short: p95 <= 100ms", "p95", "<=", 100.0, "short"),
    ("error_rate < 1%", "error_rate", "<", 0.01, None),
    ("error_rate < 0.01", "error_rate", "<", 0.01, None),
    ("achieved_rps >= 45", "achieved_rps", ">=", 45.0, None),
    ("long: p90 > 2ms", "p90", ">", 2.0, "long"),
])
def test_accepted_forms(text, metric, op, threshold, cls):
    slo = parse_slo(text)
    assert (slo.metric, slo.op, slo.cls) == (metric, op, cls)
    assert slo.threshold == pytest.approx(threshold)


@pytest.mark.parametrize("text, message", [
    ("", "non-empty"),
    ("p98 < 10ms", "unknown metric 'p98'"),
    ("p99 250ms", "missing comparison"),
    ("p99 = 250ms", "unsupported comparison '='"),
    ("p99 < 250", "needs a time unit"),
    ("p99 < 250min", "needs a time unit"),
    ("p99 < fast", "expected a non-negative number"),
    ("error_rate < 5", "fraction must be in [0, 1]"),
    ("error_rate < 150%", "above 100%"),
    ("error_rate < 1ms", "takes '%' or a fraction"),
    ("achieved_rps >= 40ms", "plain number"),
])
def test_errors_name_the_problem(text, message):
    with pytest.raises(ValueError, match=__import__("re").escape(message)):
        parse_slo(text)


def _sources(p99_ms, claimed=True, error_rate=0.0, achieved=50.0, requests=1000, **percentiles):
    summary = request_summary(entry(p99_ms, claimed, requests), requests=requests, error_rate=error_rate,
                              achieved_rps=achieved, **percentiles)
    return sources(summary, {"short": summary})


def test_evaluate_pass_and_fail():
    slos = [parse_slo("p99 < 250ms"), parse_slo("error_rate < 1%"), parse_slo("short: achieved_rps >= 60")]
    verdict = evaluate(slos, _sources(300.0, error_rate=0.001))
    assert verdict.passed is False
    assert verdict.failed == ("p99 < 250ms", "short: achieved_rps >= 60")
    assert [row.passed for row in verdict.slos] == [False, True, False]
    assert verdict.slos[0].observed == 300.0 and verdict.slos[0].threshold == 250.0


def test_unclaimed_percentile_is_not_a_pass_and_missing_class_fails():
    verdict = evaluate([parse_slo("p99 < 250ms"), parse_slo("other: p99 < 1s")], _sources(100.0, claimed=False))
    row = verdict.slos[0]
    assert (row.status, row.passed, row.claimed, row.needed_samples) == ("unclaimed", False, False, 459)
    assert verdict.slos[1].observed is None and verdict.slos[1].status == "fail"
    assert verdict.passed is False
    assert verdict.failed == ("other: p99 < 1s",) and verdict.unclaimed == ("p99 < 250ms",)


def _entry(value_ms, ci_low_ms, ci_high_ms, n=100):
    return entry(value_ms, False, n, ci_low_ms, ci_high_ms)


@pytest.mark.parametrize("text, entry_, status", [
    # unclaimed and holding: unclaimed, whatever the margin
    ("p99 < 250ms", _entry(10.0, 9.0, 11.0), "unclaimed"),
    # breached, but the CI's near end holds: the breach is not claimed either
    ("p99 < 250ms", _entry(300.0, 200.0, 400.0), "unclaimed"),
    # breached with the whole CI beyond the threshold: a claimed breach
    ("p99 < 250ms", _entry(300.0, 260.0, 400.0), "fail"),
    ("p99 > 250ms", _entry(100.0, 50.0, 240.0), "fail"),
    ("p99 > 250ms", _entry(100.0, 50.0, 300.0), "unclaimed"),
])
def test_an_unclaimed_percentile_fails_only_when_its_ci_claims_the_breach(text, entry_, status):
    row = evaluate([parse_slo(text)], _sources(1.0, p99=entry_)).slos[0]
    assert (row.status, row.samples, row.needed_samples) == (status, 100, 459)


def test_rates_and_shares_are_always_claimed():
    row = evaluate([parse_slo("error_rate < 1%")], _sources(1.0, claimed=False, error_rate=0.5)).slos[0]
    assert (row.status, row.claimed, row.samples, row.needed_samples) == ("fail", True, None, None)


def test_no_slos_pass():
    assert evaluate([], _sources(1.0)) == SloJudgement(passed=True, slos=(), failed=(), unclaimed=())
