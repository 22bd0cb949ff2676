"""sweep.json's types (analysis_model/sweep.py): docs/sweep.md's key table names exactly their fields,
a sweep reads back what it wrote, an older sweep.json still renders, a malformed one is refused
naming the place; and the analysis's own optional ``sweep`` key reads with every key optional."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import typing

import pytest

from tailscope.analysis_model import sweep as sweep_model
from tailscope.analysis_model.codec import AnalysisShapeError, encode, field_types, is_section
from tailscope.analysis_model.sweep import (
    AnalysisSweep,
    Search,
    SearchTry,
    StepLlm,
    StepPercentile,
    StepPercentiles,
    Stopped,
    Sweep,
    SweepStep,
)
from tailscope.analyzers.patterns.load_sweep import saturation_stop, summarize_sweep
from tailscope.reports.sweep_report import render_sweep_html, sweep_report_data
from tailscope.reports.upgrade import analysis_sweep_of, sweep_of

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "sweep.md")


def _types_under(tp) -> set[type]:
    """Every section type reachable from ``tp`` through its fields."""
    found: set[type] = set()

    def walk(t):
        if is_section(t):
            if t in found:
                return
            found.add(t)
            for field_tp in field_types(t).values():
                walk(field_tp)
        for arg in typing.get_args(t):
            walk(arg)

    walk(tp)
    return found


def _docs_table() -> dict[str, list[str]]:
    """docs/sweep.md's key table: type name -> the keys its row names."""
    rows = {}
    with open(DOCS, encoding="utf-8") as fh:
        for line in fh:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 4 and (name := re.fullmatch(r"`(\w+)`", cells[1])):
                assert name.group(1) not in rows, f"{name.group(1)} has two rows"
                rows[name.group(1)] = re.findall(r"`(\w+)`", cells[2])
    return rows


def test_the_docs_key_table_names_exactly_the_fields_of_each_type():
    table = _docs_table()
    types = {t.__name__: t for t in _types_under(Sweep)}
    assert sorted(table) == sorted(types)
    for name, keys in table.items():
        assert keys == [f.name for f in dataclasses.fields(types[name])], name  # and in the order written


def _pct(value, n=1000):
    return StepPercentile(value, None if value is None else value * 0.9, None if value is None else value * 1.2,
                          n, value is not None)


def _step(index, users, achieved, p99, passed, tokens=None) -> SweepStep:
    llm = None if tokens is None else StepLlm(requests=100, completed=99, output_tokens_per_s=tokens,
                                              ttft_ms=StepPercentiles(_pct(p99 / 4), _pct(p99 / 2)),
                                              tpot_ms=StepPercentiles(_pct(3.0), _pct(4.0)))
    return SweepStep(index=index, rate=None, concurrency=users, run_dir=f"/runs/s/{index}", status="complete",
                     duration_s=5.0, requests=1000, errors=1, error_rate=0.001, offered_rps=None,
                     achieved_rps=achieved, p50=_pct(p99 / 3), p99=_pct(p99), passed=passed,
                     outcome={True: "passed", False: "failed", None: None}[passed],
                     failed_slos=[] if passed is not False else ["p99 < 100ms"], generator_limited=False, llm=llm)


def _concurrency_sweep() -> Sweep:
    steps = [_step(0, 1, 20, 50, True, 800.0), _step(1, 2, 40, 52, True, 1500.0), _step(2, 4, 41, 100, False, 1550.0),
             _step(3, 8, 40, 200, False, 1500.0)]
    stopped = Stopped(reason="saturation", message="saturated at 2 in flight", levels_not_run=[16, 32],
                      saturation=saturation_stop(steps, 2))
    return summarize_sweep("s", "concurrency", ["p99 < 100ms"], steps, variable="concurrency", stopped=stopped,
                           path="/runs/s", step_duration_s=5.0, interrupted=False)


def _rate_sweep() -> Sweep:
    steps = [dataclasses.replace(_step(i, None, r * share, p99, p99 < 100), rate=r, offered_rps=r)
             for i, (r, share, p99) in enumerate([(50, 1.0, 20), (100, 1.0, 22), (150, 0.99, 25), (200, 0.8, 400)])]
    search = Search(low=50, high=200, tolerance_rps=5, steps=4, max_steps=8, passing_rate=150, failing_rate=200,
                    history=[SearchTry(50, True), SearchTry(200, False), SearchTry(100, True), SearchTry(150, True)])
    return summarize_sweep("r", "search", ["p99 < 100ms"], steps, search, path="/runs/r", step_duration_s=5.0,
                           interrupted=True)


@pytest.mark.parametrize("build", [_concurrency_sweep, _rate_sweep])
def test_a_sweep_reads_back_what_it_wrote(build):
    sweep = build()
    written = json.loads(json.dumps(encode(sweep)))
    assert sweep_of(written) == sweep
    assert json.loads(json.dumps(encode(sweep_of(written)))) == written


def _older(written: dict, version: str) -> dict:
    """``written`` as an older tailscope wrote it: 1.1 without ``stopped`` and the steps' outcome,
    1.0 also without the concurrency, LLM and frontier keys (its knee without concurrency and level)."""
    old = {k: v for k, v in written.items() if k != "stopped"}
    old["format_version"] = version
    old["steps"] = [{k: v for k, v in s.items() if k != "outcome"} for s in written["steps"]]
    if version == "1.0":
        for key in ("variable", "max_concurrency_under_slo", "frontier"):
            del old[key]
        old["steps"] = [{k: v for k, v in s.items() if k not in ("concurrency", "llm")} for s in old["steps"]]
        old["knee"] = {k: v for k, v in old["knee"].items() if k not in ("concurrency", "level")}
    return old


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_an_older_sweep_json_still_renders(version):
    current = _rate_sweep()
    written = json.loads(json.dumps(encode(current)))
    old = sweep_of(_older(written, version))
    assert old.stopped is None and all(s.outcome is None for s in old.steps)
    assert old.knee.level == current.knee.level == current.knee.rate
    if version == "1.0":
        assert old.variable == "rate" and old.frontier is None and old.max_concurrency_under_slo is None
    data, now = sweep_report_data(old), sweep_report_data(current)
    assert data == now  # the page reads the same: a rate sweep never had what later formats added
    html = render_sweep_html(old)
    assert 'id="sweep-chart"' in html and "150.00 req/s" in html and 'id="stopped"' not in html


@pytest.mark.parametrize("change, where", [
    (lambda d: d["steps"][1]["p99"].pop("value_ms"), "sweep.steps[1].p99.value_ms: missing"),
    (lambda d: d.update(mode="sideways"), "sweep.mode: 'sideways' is not one of"),
    (lambda d: d["stopped"].update(levels_not_run="16"), "sweep.stopped.levels_not_run: expected an array"),
    (lambda d: d["frontier"]["points"][0].update(pareto="yes"), "sweep.frontier.points[0].pareto: expected bool"),
    (lambda d: d.pop("steps"), "sweep.steps: missing"),
])
def test_a_malformed_sweep_json_is_refused_naming_the_place(change, where):
    written = json.loads(json.dumps(encode(_concurrency_sweep())))
    change(written)
    with pytest.raises(AnalysisShapeError, match=re.escape(where)):
        sweep_of(written)


def test_a_concurrency_sweep_page_shows_the_frontier_and_the_stop():
    data = sweep_report_data(_concurrency_sweep())
    assert data["max_rate"] == "2 in flight" and data["stopped"] == {"reason": "saturation",
                                                                     "message": "saturated at 2 in flight"}
    assert [r["pareto"] for r in data["frontier_rows"]] == ["on the frontier", "on the frontier", "on the frontier", ""]
    assert data["best_point"].startswith("2 in flight: ")


def test_the_analysis_own_sweep_key_reads_with_every_key_optional():
    assert analysis_sweep_of({}) is None
    section = analysis_sweep_of({"sweep": {"steps": [{"offered_rps": 10, "p99_ms": 20}], "knee_rps": 10}})
    assert section == AnalysisSweep(steps=[sweep_model.AnalysisSweepStep(offered_rps=10.0, p99_ms=20.0)],
                                    knee_rps=10.0)
    with pytest.raises(AnalysisShapeError, match=re.escape("sweep.steps[0].passed: expected bool")):
        analysis_sweep_of({"sweep": {"steps": [{"passed": "yes"}]}})
