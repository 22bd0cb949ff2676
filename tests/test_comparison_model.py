"""comparison.json as types (analysis_model/comparison.py): a real comparison reads back to the same
value, an older one (format 1.0, before the later keys) still renders everywhere it is shown, a
malformed one is refused naming the place, and docs/analyzers/compare.md names exactly the types'
fields."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import os
import re
import types
import typing

import pytest
from rich.console import Console

from tailscope.analysis_model.codec import AnalysisShapeError, decode, encode, field_types, is_section
from tailscope.analysis_model.comparison import Comparison
from tailscope.analyzers.comparison.baseline import CompareRules, compare, compare_runs
from tailscope.conductor.terminal import print_comparison
from tailscope.reports.compare_html import build_comparison_data, render_comparison
from tailscope.reports.junit import render_comparison_junit
from tailscope.reports.markdown import render_comparison_markdown
from tailscope.reports.upgrade import comparison_of
from tailscope.testkit.synthetic import write_synthetic_run

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "analyzers", "compare.md")
#: Cheap rules: the shape, not the intervals' precision, is under test.
RULES = CompareRules(resamples=200)


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """A regressing comparison of two synthetic runs (inference slower throughout): typed and as JSON."""
    root = tmp_path_factory.mktemp("typed-compare")
    write_synthetic_run(str(root / "base"), duration_s=20, rate=60, seed=1, name="base", with_signals=False)
    write_synthetic_run(str(root / "new"), duration_s=20, rate=60, seed=2, name="new", with_signals=False,
                        spikes=[{"kind": "gpu", "at_s": 0, "duration_s": 20, "extra_ms": 9, "stage": "inference"}])
    typed = compare(str(root / "new"), str(root / "base"), RULES)
    return typed, json.loads(json.dumps(encode(typed), allow_nan=False))


def test_a_real_comparison_reads_back_to_the_same_value(compared):
    typed, data = compared
    assert typed.verdict.regressed and typed.percentiles and typed.stages and typed.changed_stage is not None
    assert decode(Comparison, data, "comparison") == typed
    assert comparison_of(data) == typed
    assert list(data) == [f.name for f in dataclasses.fields(Comparison)]


def test_compare_runs_writes_the_encoded_comparison(compared):
    typed, data = compared
    again = compare_runs(typed.current.path, typed.baseline.path, RULES)
    assert json.loads(json.dumps(again)) == data


def _as_format_1_0(data: dict) -> dict:
    """``data`` as tailscope wrote comparisons before format 1.1: no title, gate, method, LLM
    figures, environment or host load; each side one run without its start; rows without a gate interval."""
    old = copy.deepcopy(data)
    old["format_version"] = "1.0"
    for key in ("title", "gate_confidence", "checks_judged_together", "method", "llm", "environment", "host_load"):
        old.pop(key, None)
    del old["verdict"]["inconclusive"]
    for role in ("baseline", "current"):
        for key in ("started", "run_count", "runs"):
            del old[role][key]
    for row in old["percentiles"]:
        del row["gate_ci_ms"]
    return old


def test_an_older_comparison_renders_everywhere(compared):
    typed, data = compared
    old = _as_format_1_0(data)
    read = comparison_of(old)
    assert read.title == "new vs base" and read.method is None and read.environment is None and read.llm is None
    assert read.current.run_count == 1 and read.current.runs == () and read.percentiles[0].gate_ci_ms is None
    page = build_comparison_data(old)
    assert page["title"] == "tailscope comparison — new vs base" and page["method"] == "" and page["environment"] is None
    assert page["verdict"]["label"] == "REGRESSION" and page["percentiles"] == build_comparison_data(data)["percentiles"]
    assert "tailscope comparison — new vs base" in render_comparison(old, compress_plotly=False)
    assert render_comparison_markdown(page).startswith("## tailscope comparison — new vs base: **REGRESSION**")
    assert render_comparison_junit(old) == render_comparison_junit(data)
    out = io.StringIO()
    print_comparison(Console(file=out, width=160), comparison_of(old), {})
    assert "compare: new vs base" in out.getvalue() and "REGRESSION" in out.getvalue()


@pytest.mark.parametrize("edit, where", [
    (lambda d: d.pop("verdict"), "comparison.verdict: missing"),
    (lambda d: d["percentiles"][1].update(baseline_ms="fast"), "comparison.percentiles[1].baseline_ms: expected float"),
    (lambda d: d["checks"][0].pop("passed"), "comparison.checks[0].passed: missing"),
    (lambda d: d["method"].update(run_to_run_noise="small"), "comparison.method.run_to_run_noise: 'small' is not one of"),
    (lambda d: d["distributions"].update(current=[]), "comparison.distributions.current: expected an object"),
])
def test_a_malformed_comparison_is_refused_naming_the_place(compared, edit, where):
    data = copy.deepcopy(compared[1])
    edit(data)
    for reader in (build_comparison_data, render_comparison_junit,
                   lambda d: print_comparison(Console(file=io.StringIO()), comparison_of(d), {})):
        with pytest.raises(AnalysisShapeError, match=re.escape(where)):
            reader(data)


# --------------------------------------------------------------------------- the doc names the fields


def _split_top(text: str) -> list[str]:
    """``text`` (inside one pair of braces) split at its commas outside (), [] and {}."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def _braced(text: str) -> str | None:
    """The contents of the first ``{…}`` in ``text`` (None without one)."""
    start = text.find("{")
    if start < 0:
        return None
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1:i]
    raise AssertionError(f"unbalanced braces in {text!r}")


def _section_of(tp) -> type | None:
    """The section type a field holds (through ``X | None``, lists and tuples), else None."""
    if is_section(tp):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType, list, tuple):
        for arg in typing.get_args(tp):
            if arg is not type(None) and arg is not Ellipsis and (found := _section_of(arg)) is not None:
                return found
    return None


def _documented_mismatches(cls: type, shape: str, where: str) -> list[str]:
    """Where the ``{…}`` object ``shape`` names other fields than ``cls`` has (and, within it,
    every nested ``{…}``)."""
    entries = {}
    for part in _split_top(shape):
        name = re.match(r"\s*([a-z_0-9]+)", part)
        assert name, f"{where}: cannot read a field name in {part!r}"
        entries[name.group(1)] = part
    declared = [f.name for f in dataclasses.fields(cls)]
    problems = [f"{where}: the doc names {sorted(set(entries) - set(declared))}, the type "
                f"{sorted(set(declared) - set(entries))}"] if set(entries) != set(declared) else []
    for name, part in entries.items():
        nested = _braced(part)
        inner = _section_of(field_types(cls).get(name))
        if nested is not None and inner is not None:
            problems += _documented_mismatches(inner, nested, f"{where}.{name}")
    return problems


def _doc_rows() -> dict[str, str]:
    """The key table of docs/analyzers/compare.md: ``{key: shape cell}``."""
    with open(DOC, encoding="utf-8") as fh:
        text = fh.read()
    rows = {}
    for line in text.split("## ", 1)[0].splitlines():
        cells = re.split(r"(?<!\\)\|", line)
        if len(cells) < 4 or not cells[1].strip().startswith("`"):
            continue
        for key in re.findall(r"`([a-z_]+)(?:\[\])?`", cells[1]):
            rows[key] = cells[2]
    return rows


def test_the_docs_key_table_names_exactly_the_types_fields():
    rows = _doc_rows()
    assert set(rows) == {f.name for f in dataclasses.fields(Comparison)}
    problems = []
    for key, shape in rows.items():
        section = _section_of(field_types(Comparison)[key])
        braced = _braced(shape)
        if section is None:
            continue
        assert braced is not None, f"{key}: the doc gives no {{…}} shape for {section.__name__}"
        problems += _documented_mismatches(section, braced, key)
    assert not problems, "\n".join(problems)
