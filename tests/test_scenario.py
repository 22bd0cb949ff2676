"""Scenario files: valid ones load; every bad one fails with file, line and field."""

import textwrap

import pytest

from tailscope.scenario_model.scenario import ScenarioError, load_scenario, parse_scenario
from tailscope.support.units import parse_duration_s

GOOD = textwrap.dedent("""\
    name: t
    target: http://127.0.0.1:8000
    duration: 30s
    arrival:
      process: poisson
      rate: 50
    classes:
      - name: short
        weight: 3
        path: /v1/infer/text
        payload:
          kind: json_text
          size: {dist: lognormal, median: 100, sigma: 0.5, max: 4000}
      - name: image
        path: /v1/infer/image
        payload: {kind: random_bytes, size: 1024}
    slo:
      - p99 < 250ms
      - error_rate < 1%
    """)


def bad(text_or_edit, **kw):
    text = text_or_edit if "\n" in text_or_edit else GOOD
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, "bad.yaml", **kw)
    return info.value


def test_good_scenario_loads_with_typed_values():
    s = parse_scenario(GOOD, "good.yaml")
    assert s.target == "http://127.0.0.1:8000"
    assert s.duration_s == 30.0
    assert s.arrival.process == "poisson" and s.arrival.rate == 50
    assert [c.name for c in s.classes] == ["short", "image"]
    assert s.classes[0].payload.size.dist == "lognormal"
    assert s.classes[1].payload.size.value == 1024
    assert s.slos == ["p99 < 250ms", "error_rate < 1%"]
    plan = s.load_plan(duration_s=5)
    assert plan.duration_s == 5 and plan.target == "http://127.0.0.1:8000"


def test_unknown_field_names_file_line_and_field():
    err = bad(GOOD.replace("    weight: 3\n", "    weight: 3\n    wieght: 4\n"))
    assert err.file == "bad.yaml" and err.line == 10 and err.field == "classes[0].wieght"
    assert str(err).startswith("bad.yaml:10: classes[0].wieght: unknown field")


def test_wrong_type_is_named():
    err = bad(GOOD.replace("rate: 50", "rate: fast"))
    assert (err.line, err.field) == (6, "arrival.rate")
    assert "expected a number" in err.message


def test_bad_rate_is_named():
    err = bad(GOOD.replace("rate: 50", "rate: -5"))
    assert (err.line, err.field) == (6, "arrival.rate")
    assert "positive" in err.message


def test_trace_sample_rate_reaches_the_plan_and_a_bad_one_is_named():
    plan = parse_scenario(GOOD.replace("duration: 30s\n", "duration: 30s\ntrace_sample_rate: 0.25\n"),
                          "good.yaml").load_plan()
    assert plan.trace_sample_rate == 0.25
    assert parse_scenario(GOOD, "good.yaml").load_plan().trace_sample_rate == 1.0
    err = bad(GOOD.replace("duration: 30s\n", "duration: 30s\ntrace_sample_rate: 1.5\n"))
    assert (err.line, err.field) == (4, "trace_sample_rate") and "between 0 and 1" in err.message
    err = bad(GOOD.replace("duration: 30s\n", "duration: 30s\ntrace_sample_rate: half\n"))
    assert (err.line, err.field) == (4, "trace_sample_rate") and "expected a number" in err.message


def test_missing_target_is_named():
    err = bad(GOOD.replace("target: http://127.0.0.1:8000\n", ""))
    assert err.field == "(top level)" and "target: missing" in err.message and err.line == 1


def test_missing_target_given_on_command_line_is_fine():
    s = parse_scenario(GOOD.replace("target: http://127.0.0.1:8000\n", ""), "x.yaml",
                       target_override="http://localhost:9000")
    assert s.target == "http://localhost:9000"


def test_bad_slo_is_named():
    err = bad(GOOD.replace("p99 < 250ms", "p99 < fast"))
    assert (err.line, err.field) == (18, "slo[0]")


def test_bad_weight_and_size_distribution():
    assert bad(GOOD.replace("weight: 3", "weight: 0")).field == "classes[0].weight"
    err = bad(GOOD.replace("dist: lognormal", "dist: zipf"))
    assert err.field == "classes[0].payload.size.dist" and err.line == 13


def test_yaml_syntax_error_has_line():
    err = bad("name: x\narrival: [\n")
    assert err.field == "(syntax)" and err.line >= 2


def test_duplicate_key_is_an_error():
    err = bad(GOOD.replace("duration: 30s", "duration: 30s\nduration: 40s"))
    assert err.line == 4 and "duplicate" in err.message


def test_unreadable_file(tmp_path):
    with pytest.raises(ScenarioError) as info:
        load_scenario(tmp_path / "nope.yaml")
    assert "cannot read scenario" in str(info.value)


@pytest.mark.parametrize("text,seconds", [("60s", 60), ("2m", 120), ("250ms", 0.25), (5, 5), ("1.5h", 5400)])
def test_durations(text, seconds):
    assert parse_duration_s(text) == seconds


def test_shipped_scenarios_are_valid():
    from importlib import resources

    files = [f for f in resources.files("tailscope.scenarios").iterdir() if f.name.endswith(".yaml")]
    assert files
    for f in files:
        with resources.as_file(f) as path:
            load_scenario(path, require_target=False)


def test_the_late_span_wait_is_read_and_a_bad_one_is_named():
    tracing = "duration: 30s\ntracing:\n  late_span_wait: 20s\n  export_interval: 10s\n"
    scenario = parse_scenario(GOOD.replace("duration: 30s\n", tracing), "good.yaml")
    assert scenario.tracing == {"late_span_wait_s": 20.0, "export_interval_s": 10.0}
    assert parse_scenario(GOOD, "good.yaml").tracing == {}
    err = bad(GOOD.replace("duration: 30s\n", "duration: 30s\ntracing:\n  late_span_wait: soon\n"))
    assert (err.line, err.field) == (5, "tracing.late_span_wait") and "expected a duration" in err.message
    err = bad(GOOD.replace("duration: 30s\n", "duration: 30s\ntracing:\n  late_span_wait: 1h\n"))
    assert (err.line, err.field) == (5, "tracing.late_span_wait") and "between 0s and 10m" in err.message
    err = bad(GOOD.replace("duration: 30s\n", "duration: 30s\ntracing:\n  wait: 5s\n"))
    assert (err.line, err.field) == (5, "tracing.wait") and "unknown field" in err.message


def test_concurrency_mode_and_max_concurrency_are_read_and_bad_ones_named():
    arrival = "arrival:\n  process: poisson\n  rate: 50\n"
    concurrency = parse_scenario(GOOD.replace(arrival, "arrival: {concurrency: 16}\n"), "good.yaml")
    assert (concurrency.arrival.process, concurrency.arrival.users, concurrency.arrival.think_time_s) == ("closed", 16, 0)
    capped = parse_scenario(GOOD.replace("  rate: 50\n", "  rate: 50\n  max_concurrency: 8\n"), "good.yaml")
    assert capped.arrival.max_concurrency == 8 and capped.load_plan().max_in_flight == 8
    assert capped.arrival.describe()["max_concurrency"] == 8
    for replacement, field, words in [
        ("arrival: {concurrency: 16, rate: 5}\n", "arrival.rate", "not with concurrency"),
        ("arrival: {process: poisson, concurrency: 16}\n", "arrival.concurrency", "max_concurrency"),
        ("arrival: {concurrency: 0}\n", "arrival.concurrency", ">= 1"),
        ("arrival: {process: closed, users: 4, max_concurrency: 2}\n", "arrival.max_concurrency", "number of users"),
        ("arrival: {process: poisson, rate: 5, max_concurrency: 0}\n", "arrival.max_concurrency", ">= 1"),
    ]:
        err = bad(GOOD.replace(arrival, replacement))
        assert (err.line, err.field) == (4, field) and words in err.message, str(err)


def test_the_verdict_policy_is_read_and_a_bad_one_is_named():
    assert parse_scenario(GOOD, "good.yaml").sections.get("verdict") is None
    s = parse_scenario(GOOD + "verdict: {unclaimed: pass}\n", "good.yaml")
    assert s.sections["verdict"] == {"unclaimed": "pass"}
    err = bad(GOOD + "verdict:\n  unclaimed: maybe\n")
    assert (err.file, err.line, err.field) == ("bad.yaml", 21, "verdict.unclaimed")
    assert "expected one of pass, inconclusive, fail" in err.message
    err = bad(GOOD + "verdict:\n  claimed: pass\n")
    assert (err.line, err.field) == (21, "verdict.claimed") and "unknown field" in err.message
