"""Run vs baseline: bootstrap intervals (checked by simulation), regressions, stage attribution, CLI."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from cli_helpers import run_tailscope

from tailscope.analyzers.comparison.baseline import CompareRules, _interval, bootstrap_quantiles, compare_runs
from tailscope.testing.synthetic import write_synthetic_run


def test_beta_bootstrap_matches_resampling():
    """The Beta order-statistic shortcut has the distribution of a real resample's quantile."""
    rng = np.random.default_rng(4)
    x = np.sort(rng.lognormal(size=400))
    brute = np.array([np.sort(rng.choice(x, 400))[359] for _ in range(3000)])  # nearest rank of P90
    fast = bootstrap_quantiles(x, 0.9, 3000, rng)
    for q in (0.05, 0.25, 0.5, 0.75, 0.95):
        assert abs(np.quantile(fast, q) - np.quantile(brute, q)) <= 0.05 * np.quantile(brute, q)


@pytest.mark.parametrize("p", [0.5, 0.99])
def test_change_interval_coverage_is_nominal_by_simulation(p):
    """Two samples of 2,000 from one lognormal: the 95% interval of the change covers 0 in 95% ± 2."""
    rng = np.random.default_rng(21)
    reps, covered = 800, 0
    for _ in range(reps):
        a, b = np.sort(rng.lognormal(size=2000)), np.sort(rng.lognormal(size=2000))
        diff = bootstrap_quantiles(b, p, 1000, rng) - bootstrap_quantiles(a, p, 1000, rng)
        low, high = _interval(diff, 0.95)
        covered += low <= 0.0 <= high
    assert abs(covered / reps - 0.95) <= 0.02


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    paths = {}
    for name, seed, spikes in (
        ("baseline", 1, []),
        ("same", 2, []),
        # every request's inference +30%-ish (8 ms on a short, 30 ms on a long request's median)
        ("slower", 3, [{"kind": "gpu", "at_s": 0, "duration_s": 60, "extra_ms": 6, "stage": "inference"}]),
        ("slightly", 4, [{"kind": "postprocess", "at_s": 0, "duration_s": 60, "extra_ms": 0.4}]),
    ):
        paths[name] = str(root / name)
        write_synthetic_run(paths[name], duration_s=60, rate=100, seed=seed, spikes=spikes, with_signals=False)
    return paths


def test_same_distribution_is_no_regression(runs):
    comparison = compare_runs(runs["same"], runs["baseline"])
    assert comparison["verdict"]["regressed"] is False
    assert all(c["passed"] for c in comparison["checks"])
    overall = {r["percentile"]: r for r in comparison["percentiles"] if r["cls"] is None and r["metric"] == "latency_ms"}
    assert set(overall) == {"p50", "p90", "p95", "p99", "p999"}
    for row in overall.values():
        assert row["baseline_ci_ms"][0] <= row["baseline_ms"] <= row["baseline_ci_ms"][1]
        assert row["change_ci_ms"][0] <= row["change_ms"] <= row["change_ci_ms"][1]


def test_regression_is_flagged_per_percentile_and_class_with_the_stage(runs):
    comparison = compare_runs(runs["slower"], runs["baseline"])
    assert comparison["verdict"]["regressed"] is True
    regressed = {(r["cls"], r["percentile"]) for r in comparison["percentiles"]
                 if r["regressed"] and r["metric"] == "latency_ms"}
    assert (None, "p50") in regressed and ("short", "p50") in regressed
    assert comparison["changed_stage"]["stage"] == "inference"
    assert comparison["changed_stage"]["change_ms"] > 3
    assert "inference" in comparison["verdict"]["summary"]
    failed = [c for c in comparison["checks"] if not c["passed"]]
    assert failed and all("regression" in c["message"] for c in failed)
    assert comparison["classes_compared"] == ["long", "short"]


def test_significant_but_small_change_is_not_a_regression(runs):
    comparison = compare_runs(runs["slightly"], runs["baseline"], CompareRules(threshold=0.10))
    p50 = next(r for r in comparison["percentiles"] if r["cls"] is None and r["percentile"] == "p50"
               and r["metric"] == "latency_ms")
    assert p50["significant"] and 0 < p50["relative_change"] < 0.10 and not p50["regressed"]
    assert comparison["verdict"]["regressed"] is False
    strict = compare_runs(runs["slightly"], runs["baseline"], CompareRules(threshold=0.01))
    assert strict["verdict"]["regressed"] is True


def test_too_few_samples_never_regress(runs):
    comparison = compare_runs(runs["slower"], runs["baseline"])
    p999 = [r for r in comparison["percentiles"] if r["percentile"] == "p999" and r["cls"] == "long"]
    assert p999 and all(not r["claimable"] and not r["regressed"] for r in p999)


def test_compare_cli_exit_codes_and_files(runs, tmp_path):
    out = tmp_path / "cmp" / "new"  # --out need not exist yet
    regressed = run_tailscope("compare", runs["slower"], runs["baseline"], "--out", str(out), timeout=120)
    assert regressed.returncode == 1, regressed.stderr
    assert "REGRESSION" in regressed.stdout
    for name in ("comparison.json", "comparison.html", "junit-compare.xml", "comparison.md"):
        assert os.path.getsize(out / name) > 0
    data = json.loads((out / "comparison.json").read_text())
    assert data["verdict"]["regressed"] is True and data["distributions"]["current"]
    same = run_tailscope("compare", runs["same"], runs["baseline"], "--threshold", "10%", timeout=120)
    assert same.returncode == 0, same.stderr
    missing = run_tailscope("compare", str(tmp_path / "nope"), runs["baseline"], timeout=60)
    assert missing.returncode == 2 and "no such run directory" in missing.stderr
    bad = run_tailscope("compare", runs["same"], runs["baseline"], "--threshold", "ten", timeout=60)
    assert bad.returncode == 2


def test_stages_named_after_the_spans_are_compared_too(runs, tmp_path):
    """With no rule for them (preset none), the server span's children are stages under their own
    names (analyzers/stages/span_tree.py), and the comparison attributes the change to one of them."""
    import shutil

    copies = {}
    for name in ("baseline", "slower"):
        copies[name] = str(tmp_path / name)
        shutil.copytree(runs[name], copies[name])
        manifest_path = os.path.join(copies[name], "manifest.json")
        with open(manifest_path, encoding="utf-8") as fh:
            manifest = json.load(fh)
        manifest["scenario"] = {**(manifest.get("scenario") or {}), "stages": {"preset": "none"}}
        with open(manifest_path, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh)
    comparison = compare_runs(copies["slower"], copies["baseline"])
    compared = {row["stage"] for row in comparison["stages"]}
    assert {"queue_wait", "inference", "preprocess"} <= compared and "queue" not in compared
    assert comparison["changed_stage"]["stage"] == "inference" and comparison["changed_stage"]["change_ms"] > 3
