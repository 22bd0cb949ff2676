"""The ``llm`` analysis on seeded synthetic runs with known token timings
(tailscope.testkit.synthetic_llm): TTFT, TPOT, per-token ITL, e2e, token
counts and rates against the ground truth computed here from the generator's
own values, DistServe goodput, the SLOs on ttft/tpot/itl/e2e/output_tokens_per_s,
a TTFT spike found where it was injected, and the report's LLM section drawn
in a real headless Chromium."""

from __future__ import annotations

import json
import math
import os

import jsonschema
import numpy as np
import pytest

from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.stats.slo import SloSources, evaluate, parse_slo
from tailscope.reports.data import build_report_data
from tailscope.reports.writer import write_outputs
from tailscope.testkit.synthetic import write_synthetic_run
from tailscope.testkit.synthetic_llm import write_synthetic_llm_run

SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "..", "analyzers", "analysis.schema.json")
TOKENS_PER_CHUNK = 3
CHROMIUM = "/usr/bin/chromium"


def nearest(values, p: float) -> float:
    """Nearest-rank p-quantile, computed here (not with the analyzers' code)."""
    ordered = np.sort(np.asarray(values, dtype=float))
    return float(ordered[max(1, math.ceil(len(ordered) * p - 1e-9)) - 1])


@pytest.fixture(scope="module")
def steady(tmp_path_factory):
    path = tmp_path_factory.mktemp("llm") / "run"
    truth = write_synthetic_llm_run(path, duration_s=40, rate=20, seed=5, classes=("chat", "code"),
                                    error_share=0.03, tokens_per_chunk=TOKENS_PER_CHUNK)
    ok = truth["ok"]
    slos = [f"ttft p99 < {nearest(truth['ttft_ms'][ok], 0.9):.3f}ms",
            f"tpot p99 < {nearest(truth['tpot_ms'][ok], 0.8):.3f}ms",
            f"e2e p99 < {nearest(truth['latency_ms'][ok], 0.85):.3f}ms",
            "ttft p50 < 1ms",  # a typical-request objective: not judged per request
            "itl p50 < 100ms", "output_tokens_per_s >= 100", f"chat: ttft p50 < {nearest(truth['ttft_ms'][ok], 0.5):.3f}ms"]
    truth = write_synthetic_llm_run(path, duration_s=40, rate=20, seed=5, classes=("chat", "code"),
                                    error_share=0.03, tokens_per_chunk=TOKENS_PER_CHUNK, slo=slos)
    return truth, analyze_run(path)


def test_the_llm_section_matches_the_ground_truth(steady):
    truth, analysis = steady
    llm, ok = analysis["llm"], truth["ok"]
    assert (llm["requests"], llm["completed"], llm["errors"]) == (truth["requests"], ok.sum(), (~ok).sum())
    assert llm["streamed"] == ok.sum() and (~ok).sum() > 0
    for key, values in (("ttft_ms", truth["ttft_ms"][ok]), ("e2e_ms", truth["latency_ms"][ok]),
                        ("tpot_ms", truth["tpot_ms"][ok])):
        for name, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            assert llm[key][name]["value_ms"] == pytest.approx(nearest(values, p), abs=1e-6), (key, name)
        assert llm[key]["p50"]["n"] == ok.sum()
        low, high = llm[key]["p99"]["ci_low_ms"], llm[key]["p99"]["ci_high_ms"]
        assert low <= llm[key]["p99"]["value_ms"] <= high
    # every per-token ITL sample of a request is its decode time, whatever its chunks carried
    k0 = np.minimum(TOKENS_PER_CHUNK, truth["output_tokens"][ok])
    pooled = np.repeat(truth["decode_ms"][ok], truth["output_tokens"][ok] - k0)
    assert llm["itl_ms"]["p50"]["n"] == len(pooled)
    for name, p in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999)):
        assert llm["itl_ms"][name]["value_ms"] == pytest.approx(nearest(pooled, p), abs=1e-5)
    # TPOT is biased low by (k0 - 1) / (n - 1) against the true decode time per token; ITL is not
    assert llm["tpot_ms"]["p50"]["value_ms"] < nearest(truth["decode_ms"][ok], 0.5)
    assert llm["prompt_tokens"]["sum"] == truth["prompt_tokens"][ok].sum()
    assert llm["output_tokens"]["sum"] == truth["output_tokens"][ok].sum()
    assert llm["output_tokens"]["p99"] == nearest(truth["output_tokens"][ok], 0.99)
    assert llm["output_tokens"]["mean"] == pytest.approx(truth["output_tokens"][ok].mean())
    assert llm["token_counts_from"] == {"usage": int(ok.sum())} and llm["finish_reasons"] == {"length": int(ok.sum())}
    duration_s = analysis["run"]["duration_s"]
    assert llm["output_tokens_per_s"]["aggregate"] == pytest.approx(truth["output_tokens"][ok].sum() / duration_s)
    per_request = truth["output_tokens"][ok] / (truth["latency_ms"][ok] / 1000)
    assert llm["output_tokens_per_s"]["per_request"]["p10"] == pytest.approx(nearest(per_request, 0.1))
    assert set(llm["classes"]) == {"chat", "code"}
    chat = truth["cls"] == "chat"
    assert llm["classes"]["chat"]["api"] == "openai-chat" and llm["classes"]["chat"]["model"]
    assert llm["classes"]["chat"]["ttft_ms"]["p50"]["value_ms"] == pytest.approx(
        nearest(truth["ttft_ms"][ok & chat], 0.5), abs=1e-6)
    assert llm["classes"]["chat"]["requests"] + llm["classes"]["code"]["requests"] == truth["requests"]
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        jsonschema.validate(analysis, json.load(fh))


def test_goodput_is_the_share_meeting_every_ttft_tpot_and_latency_slo(steady):
    truth, analysis = steady
    slos = [parse_slo(line) for line in analysis["run"]["scenario"]["slo"]]
    limit = {slo.metric: slo.threshold for slo in slos if slo.cls is None}
    # DistServe: no error, TTFT, TPOT and end-to-end each within their objective (the P50 one is not per request;
    # every request's own ITL P50 is far below 100 ms)
    good = (truth["ok"] & (truth["ttft_ms"] < limit["ttft_p99"]) & (truth["tpot_ms"] < limit["tpot_p99"])
            & (truth["latency_ms"] < limit["e2e_p99"]))
    chat = truth["cls"] == "chat"
    good_chat = good & (truth["ttft_ms"] < next(s.threshold for s in slos if s.cls == "chat"))
    expected = np.where(chat, good_chat, good)
    goodput = analysis["llm"]["goodput"]
    assert 0.3 < expected.mean() < 0.8  # every objective excludes some requests
    assert goodput["good"] == expected.sum() and goodput["total"] == truth["requests"]
    assert goodput["share"] == pytest.approx(expected.mean())
    assert "ttft p50 < 1ms" not in goodput["criteria"] and "itl p50 < 100ms" in goodput["criteria"]
    assert analysis["llm"]["classes"]["code"]["goodput"]["share"] == pytest.approx(expected[~chat].mean())
    assert analysis["summary"]["goodput"]["share"] == pytest.approx(expected.mean())  # every request is an LLM one


def test_slos_on_ttft_tpot_itl_e2e_and_output_rate_read_the_llm_section(steady):
    _, analysis = steady
    llm = analysis["llm"]
    rows = {row["slo"]: row for row in analysis["verdict"]["slos"]}
    for text, row in rows.items():
        slo = parse_slo(text)
        if slo.metric == "output_tokens_per_s":
            assert row["observed"] == llm["output_tokens_per_s"]["aggregate"] and row["passed"]
            continue
        kind, percentile = slo.metric.split("_")
        scope = llm if slo.cls is None else llm["classes"][slo.cls]
        assert row["observed"] == scope[f"{kind}_ms"][percentile]["value_ms"], text
        assert row["passed"] == (row["observed"] < slo.threshold), text
    assert not rows["ttft p50 < 1ms"]["passed"] and rows["itl p50 < 100ms"]["passed"]
    # without an llm section there is nothing to observe: the SLO fails rather than passes
    bare = {**analysis, "llm": None}
    verdict = evaluate([parse_slo("tpot p99 < 1s"), parse_slo("output_tokens_per_s >= 1")], SloSources.of(bare))
    assert not verdict.passed and [row.observed for row in verdict.slos] == [None, None]


@pytest.mark.parametrize("text, metric, threshold, cls", [
    ("ttft p99 < 200ms", "ttft_p99", 200.0, None),
    ("TPOT p90 <= 0.04s", "tpot_p90", 40.0, None),
    ("chat: itl_p50 < 500us", "itl_p50", 0.5, "chat"),
    ("e2e p999 < 8s", "e2e_p999", 8000.0, None),
    ("code: output_tokens_per_s >= 250", "output_tokens_per_s", 250.0, "code"),
])
def test_llm_slos_parse(text, metric, threshold, cls):
    slo = parse_slo(text)
    assert (slo.metric, slo.threshold, slo.cls) == (metric, pytest.approx(threshold), cls)


@pytest.mark.parametrize("text, message", [
    ("tpot < 50ms", "tpot needs a percentile"),
    ("e2e p99 < 8", "needs a time unit"),
    ("output_tokens_per_s >= 5ms", "plain number of output tokens/s"),
    ("tpot p98 < 5ms", "unknown metric"),
])
def test_bad_llm_slos_are_named(text, message):
    with pytest.raises(ValueError, match=message):
        parse_slo(text)


def test_a_ttft_spike_is_found_where_it_was_injected_and_not_in_tpot(tmp_path):
    truth = write_synthetic_llm_run(tmp_path / "run", duration_s=50, rate=25, seed=9,
                                    ttft_spike={"at_s": 25, "duration_s": 5, "extra_ms": 400})
    analysis = analyze_run(tmp_path / "run")
    spikes, start = analysis["llm"]["spikes"], truth["start_ns"]
    assert spikes["tpot"] == []
    found = [s for s in spikes["ttft"] if s["start_ns"] < start + 30e9 and s["end_ns"] > start + 25e9]
    assert len(found) == 1
    spike = found[0]
    assert spike["start_ns"] <= start + 26e9 and spike["end_ns"] >= start + 29e9
    assert spike["end_ns"] - spike["start_ns"] <= 10e9 and spike["p99_ms"] > spike["baseline_p99_ms"] + 300
    # a window beside it may join at a larger test scale (the latency test's rule): never a large excess
    assert all(s["excess_ms"] < spike["excess_ms"] / 5 for s in spikes["ttft"] if s is not spike)
    assert analysis["llm"]["spike_detection"]["ttft"]["performed"]
    # the per-window view carries TTFT and TPOT where claimed, and the tokens that arrived
    inside = [w for w in analysis["windows"] if start + 26e9 <= w["start_ns"] < start + 29e9]
    outside = [w for w in analysis["windows"] if w["start_ns"] >= start + 35e9]
    assert all(w["ttft_p50_ms"] > 300 for w in inside if w["ttft_p50_ms"] is not None)
    assert all(w["ttft_p50_ms"] < 300 for w in outside if w["ttft_p50_ms"] is not None)
    assert any(w["ttft_p50_ms"] is not None for w in inside) and any("tpot_p99_ms" in w for w in outside)
    assert sum(w["output_tokens"] for w in analysis["windows"]) == truth["output_tokens"].sum()
    steady = write_synthetic_llm_run(tmp_path / "steady", duration_s=50, rate=25, seed=9)
    assert steady["requests"] > 1000
    assert analyze_run(tmp_path / "steady")["llm"]["spikes"] == {"ttft": [], "tpot": []}


def _restream(path, seed: int) -> dict:
    """Rewrite a synthetic run's chunks.arrow as a server that decodes each token after an
    uneven gap (2 ms, or a 30 ms stall on 3% of tokens) and flushes 2–4 tokens per chunk:
    a chunk arrives with its last token. Returns the ground truth: the recorded chunk gaps
    and token counts (after each request's first chunk), and the server's per-token gaps."""
    from tailscope.rundir import read_stream
    from tailscope.rundir import schema as fmt
    from tailscope.testkit.synthetic import StreamFile

    rng = np.random.default_rng(seed)
    old = read_stream(path / fmt.CHUNKS, fmt.CHUNKS_SCHEMA).table
    firsts = {}
    for trace, index, t_ns in zip(*(old.column(c).to_pylist() for c in ("trace_id", "index", "t_ns"))):
        if index == 0:
            firsts[trace] = t_ns
    rows = {"trace_id": [], "index": [], "t_ns": [], "tokens": []}
    chunk_gaps, chunk_sizes, token_gaps, all_sizes = [], [], [], []
    for trace, first_ns in firsts.items():
        sizes = [1] + list(rng.integers(2, 5, size=8))
        gaps_ns = np.where(rng.random(sum(sizes) - 1) < 0.03, 30_000_000, 2_000_000)
        token_gaps.extend(gaps_ns / 1e6)
        arrival, taken = first_ns, 0
        for index, size in enumerate(sizes):
            if index:
                gap = int(gaps_ns[taken - 1:taken - 1 + size].sum())
                arrival += gap
                chunk_gaps.append(gap / 1e6)
                chunk_sizes.append(size)
            taken += size
            all_sizes.append(size)
            for key, value in (("trace_id", trace), ("index", index), ("t_ns", arrival), ("tokens", size)):
                rows[key].append(value)
    chunks = StreamFile(str(path / fmt.CHUNKS), fmt.CHUNKS_SCHEMA)
    try:
        chunks.write(rows)
    finally:
        chunks.close()
    return {"chunk_gap_ms": np.array(chunk_gaps), "chunk_tokens": np.array(chunk_sizes),
            "token_gap_ms": np.array(token_gaps), "tokens_per_chunk": np.array(all_sizes, dtype=float)}


def test_itl_and_the_chunk_level_tail_are_what_they_claim_on_multi_token_chunks(tmp_path):
    """ITL divides each chunk's arrival gap over its tokens (so a stall inside a chunk is
    averaged away: its P99 is below the server's true per-token P99); chunk_gap_ms is the
    recorded gaps themselves and tokens_per_chunk the recorded counts."""
    write_synthetic_llm_run(tmp_path / "run", duration_s=20, rate=10, seed=11)
    truth = _restream(tmp_path / "run", seed=11)
    llm = analyze_run(tmp_path / "run")["llm"]
    assert llm["chunk_gap_ms"]["p50"]["n"] == len(truth["chunk_gap_ms"])
    for name, p in (("p50", 0.5), ("p99", 0.99)):
        assert llm["chunk_gap_ms"][name]["value_ms"] == pytest.approx(nearest(truth["chunk_gap_ms"], p), abs=1e-6)
    per_token = np.repeat(truth["chunk_gap_ms"] / truth["chunk_tokens"], truth["chunk_tokens"])
    assert llm["itl_ms"]["p50"]["n"] == len(per_token) == len(truth["token_gap_ms"])
    assert llm["itl_ms"]["p99"]["value_ms"] == pytest.approx(nearest(per_token, 0.99), abs=1e-6)
    assert llm["itl_ms"]["p99"]["value_ms"] < nearest(truth["token_gap_ms"], 0.99) == 30.0
    assert llm["chunk_gap_ms"]["p99"]["value_ms"] >= 30.0
    assert np.mean(per_token) == pytest.approx(np.mean(truth["token_gap_ms"]))  # the mean is honest
    sizes = truth["tokens_per_chunk"]
    assert llm["tokens_per_chunk"] == {"chunks": len(sizes), "mean": pytest.approx(sizes.mean()),
                                       "p50": nearest(sizes, 0.5), "p99": nearest(sizes, 0.99)}


def test_a_run_without_openai_requests_has_no_llm_section(tmp_path):
    write_synthetic_run(tmp_path / "plain", duration_s=5, rate=40, seed=1, with_signals=False)
    analysis = analyze_run(tmp_path / "plain")
    assert analysis["llm"] is None and "ttft_p99_ms" not in analysis["windows"][0]
    assert build_report_data(analysis)["llm"] is None


def test_the_report_shows_the_llm_section_and_draws_its_charts(steady, tmp_path):
    truth, analysis = steady
    data = build_report_data(analysis)["llm"]
    assert [row["metric"] for row in data["rows"]] == ["TTFT", "TPOT", "ITL (per token)", "chunk gap", "end-to-end"]
    assert data["tokens"][2]["what"] == "per content chunk" and "chunk arrivals" in data["tpot_note"]
    assert data["goodput"]["good"] == f"{analysis['llm']['goodput']['good']:,}" and len(data["classes"]) == 2
    paths = write_outputs(tmp_path, analysis)
    html = open(paths["html"], encoding="utf-8").read()
    assert html.index('id="spikes"') < html.index('id="llm-ttft-chart"') < html.index('id="llm"')  # answer first, then detail
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}: the charts were not drawn")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            problems = []
            page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto("file://" + os.path.abspath(paths["html"]))
            page.wait_for_function("document.body.dataset.charts === 'ready'", timeout=60_000)
            drawn = page.evaluate("""() => ['llm-ttft-chart', 'llm-tpot-chart', 'llm-tokens-chart'].map(id => {
                const d = document.getElementById(id);
                return {id, traces: d.data.map(t => t.name), points: d.data[0].x.length}; })""")
        finally:
            browser.close()
    assert problems == []
    ttft, tpot, tokens = drawn
    assert ttft["points"] == tpot["points"] == truth["ok"].sum()  # under 2,000: every request is a point
    assert {"requests", "P50"} <= set(ttft["traces"]) and tokens["points"] == len(analysis["windows"])
