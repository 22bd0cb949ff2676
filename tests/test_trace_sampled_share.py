"""The share of requests sent for tracing is counted, not assumed: under head sampling the
stage statistics, ``partial_join`` and ``spans_shed`` are judged against the requests whose
trace id the sampling rule actually picked (a binomial draw around ``trace_sample_rate``)."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.inputs.trace_join import sampled_mask
from tailscope.rundir import load_run
from tailscope.rundir.retention_policy import trace_sampled
from tailscope.testkit.synthetic import write_synthetic_run

RATE = 0.3
#: A seed whose run drew fewer sampled trace ids than 0.9 × RATE (checked below).
LOW_DRAW_SEED = 12


def _ids(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.getrandbits(128):032x}" for _ in range(n)]


@pytest.mark.parametrize("rate", [0.0, 1e-3, 0.3, 0.5, 1 - 1e-9, 1.0])
def test_the_column_wise_rule_is_the_per_id_rule(rate):
    ids = _ids(5000, 3) + ["0" * 16 + "f" * 16, "0" * 32, "0" * 16 + "A" * 16, "f" * 32]
    chunked = pa.chunked_array([pa.array(ids[:7]), pa.array(ids[7:])])
    expected = np.array([trace_sampled(t, rate) for t in ids])
    assert np.array_equal(sampled_mask(chunked, rate), expected)
    assert np.array_equal(sampled_mask(pa.array(ids).slice(5, 100), rate), expected[5:105]), "sliced views"


def test_malformed_and_missing_ids_are_not_sampled_below_rate_one():
    ids = ["0" * 16 + "g" + "0" * 15, "0" * 16 + "z" * 16, None, "f" * 31, "0" * 32]
    assert sampled_mask(pa.array(ids), 0.5).tolist() == [False, False, False, False, True]
    assert sampled_mask(pa.array(ids), 0.5).tolist() == [trace_sampled(t, 0.5) for t in ids]
    assert sampled_mask(pa.array(ids), 1.0).all()


def test_a_low_draw_of_sampled_requests_is_no_partial_join(tmp_path):
    write_synthetic_run(tmp_path / "r", duration_s=6, seed=LOW_DRAW_SEED, trace_sample_rate=RATE,
                        with_signals=False)
    run = load_run(tmp_path / "r")
    requests = run.requests.to_pydict()
    ok = [t for t, s in zip(requests["trace_id"], requests["status"]) if 200 <= s < 400]
    drawn = sum(trace_sampled(t, RATE) for t in ok) / len(ok)
    assert drawn < 0.9 * RATE, "the seed must draw a low sampled share for this test to mean anything"

    analysis = analyze_run(tmp_path / "r")
    stages = analysis["stages"]
    assert stages["traced_fraction"] == pytest.approx(drawn)
    assert stages["joined_fraction"] == pytest.approx(drawn), "every sampled request has its spans"
    codes = {w["code"] for w in analysis["warnings"]}
    assert "traces_sampled" in codes and "partial_join" not in codes
    sampling = next(w for w in analysis["warnings"] if w["code"] == "traces_sampled")
    assert f"{drawn:.1%} of the successful ones" in sampling["message"]


def test_sampled_requests_that_lost_their_spans_are_a_partial_join(tmp_path):
    write_synthetic_run(tmp_path / "r", duration_s=10, seed=2, trace_sample_rate=RATE, span_loss=0.3,
                        with_signals=False)
    analysis = analyze_run(tmp_path / "r")
    stages = analysis["stages"]
    assert stages["joined_fraction"] < 0.8 * stages["traced_fraction"]
    assert "partial_join" in {w["code"] for w in analysis["warnings"]}


def test_at_full_tracing_every_successful_request_was_sent_for_tracing(tmp_path):
    write_synthetic_run(tmp_path / "r", duration_s=5, seed=1, with_signals=False)
    assert analyze_run(tmp_path / "r")["stages"]["traced_fraction"] == 1.0
