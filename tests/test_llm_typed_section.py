"""The ``llm`` section through its type (analysis_model/llm.py): what the analyzer writes is exactly
the type's shape (it reads back unchanged, key order included) and the schema's, and an LLM analysis
written before the fields older analyses lack (``prefix_cache``, ``sessions``, the output kinds,
``chunk_gap_ms``/``tokens_per_chunk``, token-spike causes, the spike tests' later facts) still
builds the report and renders."""

from __future__ import annotations

import copy
import json
import os

import jsonschema
import numpy as np
import pyarrow as pa
import pytest
from report_fixtures import token_cards_of

from tailscope.analysis_model.codec import decode, encode
from tailscope.analysis_model.llm import Llm
from tailscope.analyzers.analysis import analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.html import render_html
from tailscope.testkit.synthetic_llm import write_synthetic_llm_run

SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "..", "analyzers", "analysis.schema.json")
KIND_COUNTS = ("reasoning_tokens", "answer_tokens", "tool_calls", "images", "image_pixels", "bytes_out",
               "documents", "document_tokens")
KIND_TIMES = (("first_reasoning_ns", 1_000_000), ("last_reasoning_ns", 9_000_000), ("first_answer_ns", 10_000_000),
              ("last_answer_ns", 30_000_000), ("tool_call_ns", 20_000_000))
TURNS = 3


def _set_column(table: pa.Table, name: str, values) -> pa.Table:
    if name in table.column_names:
        table = table.drop_columns([name])
    return table.append_column(name, pa.array([int(v) for v in values], pa.int64()))


def _with_kinds_and_sessions(path) -> None:
    """Rewrite the run's requests.arrow with format-1.3 output-kind columns (about half the requests
    reasoned, called tools, sent images, ranked documents) and sessions of 3 turns."""
    file = os.path.join(path, "requests.arrow")
    with open(file, "rb") as stream:  # read into memory: the file is rewritten below (no mapping of it)
        table = pa.ipc.open_stream(stream).read_all()
    n, rng = len(table), np.random.default_rng(1)
    scheduled = table.column("scheduled_ns").to_numpy()
    for name in KIND_COUNTS:
        table = _set_column(table, name, rng.integers(1, 5, n) * (rng.random(n) < 0.5) + 3 * (name == "answer_tokens"))
    for name, after_ns in KIND_TIMES:
        table = _set_column(table, name, scheduled + after_ns + rng.integers(0, 1_000_000, n))
    for name, values in (("session_id", np.arange(n) // TURNS), ("turn", np.arange(n) % TURNS + 1),
                         ("session_turns", np.full(n, TURNS))):
        table = _set_column(table, name, values)
    with pa.ipc.new_stream(file, table.schema) as writer:
        writer.write_table(table)


@pytest.fixture(scope="module")
def analyses(tmp_path_factory):
    root = tmp_path_factory.mktemp("llm_typed")
    write_synthetic_llm_run(root / "spike", duration_s=40, rate=20, seed=5, classes=("chat", "code"),
                            error_share=0.03, ttft_spike={"at_s": 20, "duration_s": 5, "extra_ms": 400})
    write_synthetic_llm_run(root / "kinds", duration_s=20, rate=20, seed=7)
    _with_kinds_and_sessions(root / "kinds")
    return {"spike": analyze_run(root / "spike"), "kinds": analyze_run(root / "kinds")}


def test_the_written_section_is_the_types_shape_and_the_schemas(analyses):
    schema = json.load(open(SCHEMA_PATH))
    for name, analysis in analyses.items():
        section = analysis["llm"]
        typed = decode(Llm, section, "llm")
        assert json.dumps(encode(typed)) == json.dumps(section), name  # same keys, values and order
        jsonschema.validate(analysis, schema)
    spike = decode(Llm, analyses["spike"]["llm"])
    assert spike.spikes["ttft"] and all(s.causes and s.decomposition is not None for s in spike.spikes["ttft"])
    kinds = decode(Llm, analyses["kinds"]["llm"])
    assert kinds.sessions is not None and kinds.sessions.sessions > 0
    assert None not in (kinds.reasoning, kinds.tool_calls, kinds.images, kinds.ranking)
    assert spike.sessions is None and "sessions" not in analyses["spike"]["llm"]  # left out, not null


def _as_older(analysis: dict) -> dict:
    """The analysis as a tailscope before format 1.3 runs wrote it: no prefix_cache, sessions or
    output kinds, no chunk gap or tokens per chunk, token spikes without causes, spike tests
    without their later facts."""
    old = copy.deepcopy(analysis)
    llm = old["llm"]
    for scope in (llm, *llm["classes"].values()):
        for key in ("chunk_gap_ms", "tokens_per_chunk", "reasoning", "tool_calls", "images", "ranking"):
            scope.pop(key, None)
    for key in ("prefix_cache", "sessions"):
        llm.pop(key, None)
    for facts in llm["spike_detection"].values():
        for key in ("baseline_quantile", "baseline_samples", "expected_slow_share", "alpha", "iterations", "too_short"):
            facts.pop(key)
    for spikes in llm["spikes"].values():
        for spike in spikes:
            for key in ("causes", "decomposition", "baseline_quantile"):
                spike.pop(key, None)
    return old


@pytest.mark.parametrize("name", ["spike", "kinds"])
def test_an_older_llm_analysis_still_builds_the_report_and_renders(analyses, name):
    current = build_report_data(analyses[name])
    old = _as_older(analyses[name])
    data = build_report_data(old)
    llm = data["llm"]
    assert llm["prefix_cache"] is None and llm["sessions"] is None and llm["kinds"] is None
    assert [row["metric"] for row in llm["rows"]] == ["TTFT", "TPOT", "ITL (per token)", "end-to-end"]
    assert [row["what"] for row in llm["tokens"]] == ["prompt", "output"]
    assert llm["classes"] == current["llm"]["classes"] and llm["goodput"] == current["llm"]["goodput"]
    assert llm["spikes"] == current["llm"]["spikes"]
    if name == "kinds":
        assert current["llm"]["kinds"] is not None and current["llm"]["sessions"] is not None
    else:
        tokens = token_cards_of(old)
        titles = {card["top_title"] for card in tokens["cards"] + tokens["minor"]}
        assert titles == {"TTFT spike: no cause attributed"}
    html = render_html(data)
    assert "TTFT" in html and "LLM goodput" in html
