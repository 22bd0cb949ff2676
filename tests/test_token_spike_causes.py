"""TTFT and TPOT spikes get causes, from detectors told which metric rose (issue 28, "what to build" 2).

Seeded synthetic LLM runs that stream (``testkit/synthetic.py`` ``stream=True``: the first token as
decode starts, the rest at its end): KV-cache pressure and a queue burst raise TTFT (queue wait),
other prompts' prefill raises TPOT (decode) and, where it slows the new requests' own way to their
first token (``prefill_ttft``: the time before decode), TTFT; a stopped process raises TTFT. Before,
each such card read "TTFT spike: no cause attributed".
"""

from __future__ import annotations

import numpy as np
import pytest
from report_fixtures import token_cards_of

from tailscope.analysis_model.spikes import Decomposition
from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.causes.protocol import OFF_METRIC_CAP, DetectorRegistry, Finding, SpikeContext
from tailscope.testkit.synthetic import write_synthetic_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for name in ("kv_cache", "prefill", "prefill_ttft", "queue", "stall"):
        path = tmp_path_factory.mktemp("token") / name
        kind, *stage = name.split("_ttft")
        spike = {"kind": kind, "at_s": 18, "duration_s": 6, "extra_ms": 300, **({"stage": "preprocess"} if stage else {})}
        write_synthetic_run(path, duration_s=40, rate=20, seed=4, llm=True, stream=True, gc_events=kind != "stall",
                            spikes=[spike])
        out[name] = analyze_run(path)
    return out


@pytest.mark.parametrize("kind, metric, cause", [("kv_cache", "ttft", "kv_cache_pressure"),
                                                 ("queue", "ttft", "queue_saturation"),
                                                 ("stall", "ttft", "process_stall"),
                                                 ("prefill", "tpot", "prefill_interference"),
                                                 ("prefill_ttft", "ttft", "prefill_interference")])
def test_the_metric_that_rose_is_explained_by_the_cause_that_raises_it(runs, kind, metric, cause):
    spikes = runs[kind]["llm"]["spikes"]
    other = "tpot" if metric == "ttft" else "ttft"
    assert spikes[other] == []
    (spike,) = spikes[metric]
    assert spike["p99_ms"] > 5 * spike["baseline_p99_ms"]
    assert [c["kind"] for c in spike["causes"]] == [cause]
    assert spike["causes"][0]["confidence"] >= 0.9
    assert spike["decomposition"]["available"]


def test_the_card_names_the_metric_how_far_it_rose_and_why(runs):
    card = token_cards_of(runs["kv_cache"])["cards"][0]
    assert card["top_title"] == "TTFT spike: KV-cache pressure (LLM server)"
    assert card["top_sentence"].startswith("TTFT P99 rose to ")
    assert "baseline (" in card["top_sentence"] and "×) in " in card["top_sentence"]
    assert "why: KV cache 99% in use" in card["top_sentence"]
    card = token_cards_of(runs["prefill"])["cards"][0]
    assert card["top_title"] == "TPOT spike: prefill interference (long prompts, LLM server)"
    assert "why: the slow streams' time per output token" in card["top_sentence"]
    card = token_cards_of(runs["prefill_ttft"])["cards"][0]
    assert card["top_title"] == "TTFT spike: prefill interference (long prompts, LLM server)"
    assert "why: the slow requests' time to first token" in card["top_sentence"]
    assert "prompt tokens being prefilled" in card["top_sentence"]


class _Fixed:
    """A detector that always finds its cause at 0.9 and declares which metrics the cause raises."""

    def __init__(self, name, raises):
        self.name, self.needs, self.raises = name, (), raises

    def score(self, ctx):
        return Finding(self.name, 0.9, {"summary": f"{self.name} found"})


@pytest.mark.parametrize("metric, named", [("latency", ["queueing", "stop"]), ("ttft", ["queueing", "stop"]),
                                           ("tpot", ["stop"])])
def test_a_cause_that_does_not_raise_the_metric_is_weak_at_most_and_says_why(metric, named):
    registry = DetectorRegistry()
    registry.register(_Fixed("queueing", ("latency", "ttft")))
    registry.register(_Fixed("stop", ("latency", "ttft", "tpot")))
    empty = np.zeros(0, np.int64)
    nothing = Decomposition(0, 0, 0, 0, {}, None, None, False, "no spans joined to the slow or normal requests")
    ctx = SpikeContext(None, 0, 1, 0, empty, empty, nothing, frozenset(), metric=metric)
    causes = registry.attribute(ctx)
    assert [c.kind for c in causes] == named
    if metric == "tpot":
        lone = DetectorRegistry()
        lone.register(_Fixed("queueing", ("latency", "ttft")))
        (cause,) = lone.attribute(ctx)
        assert cause.kind == "unexplained"
        (weak,) = cause.evidence["weak_findings"]
        assert weak["confidence"] == OFF_METRIC_CAP
        assert weak["evidence"]["off_metric"] == "queueing raises latency and TTFT, not TPOT"
