"""Run vs baseline: bootstrap intervals (checked by simulation), regressions, stage attribution, CLI."""

from __future__ import annotations

import contextlib
import json
import os

import numpy as np
import pytest
from cli_helpers import run_tailscope

from tailscope.analyzers.comparison.baseline import CompareRules, _interval, bootstrap_quantiles, compare_runs
from tailscope.testkit.synthetic import write_synthetic_run


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


# --------------------------------------------------------------------------- runs on each side (issue 26)

NS = 10**9
T0_S = 1_800_000_000  # 2027-01-15 08:00:00 UTC


def _built_run(path, seed: int, scale: float, t0_s: int, duration_s: int = 30, rate: int = 100) -> str:
    """A run of ``duration_s`` seconds at ``rate`` requests/s whose latencies are lognormal (median
    10 ms) times ``scale`` (the run's own level: machine state, warm-up)."""
    from run_builders import write_requests_run

    rng = np.random.default_rng(seed)
    n = duration_s * rate
    sent = (t0_s * NS + np.sort(rng.uniform(0, duration_s, n)) * NS).astype(np.int64)
    latency_ms = rng.lognormal(np.log(10), 0.3, n) * scale
    return write_requests_run(str(path), [{"trace_id": f"{seed:08x}{i:024x}", "sent_ns": int(s),
                                           "end_ns": int(s + ms * 1e6)} for i, (s, ms) in enumerate(zip(sent, latency_ms))])


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    """Six runs of one service whose levels differ from run to run (factors drawn from a
    run-to-run distribution, lognormal σ = 0.12, seed 2: 1.02 0.94 0.95 | 0.75 1.24 1.15), and
    three runs of a service twice as slow, each side a folder of runs."""
    root = tmp_path_factory.mktemp("repeated")
    factors = np.random.default_rng(2).lognormal(0.0, 0.12, 6)
    paths = {"base": [], "new": [], "slow": []}
    for i, factor in enumerate(factors):
        side = "base" if i < 3 else "new"
        paths[side].append(_built_run(root / side / f"run-{i % 3 + 1}", 20 + i, factor, T0_S + 3600 * (i >= 3) + 60 * (i % 3)))
    for i in range(3):
        paths["slow"].append(_built_run(root / "slow" / f"run-{i + 1}", 40 + i, 2.0 * factors[3 + i], T0_S + 7200 + 60 * i))
    return {**paths, "root": root}


def test_a_run_level_shift_between_aa_runs_is_no_regression(repeated):
    """The per-request bootstrap treats the 9,000 requests of a side as independent and calls the
    sides' run-to-run difference a regression; resampling runs, then time blocks, does not."""
    old = compare_runs(repeated["new"], repeated["base"], CompareRules(method="request"))
    assert old["verdict"]["regressed"] is True  # what tailscope said before
    new = compare_runs(repeated["new"], repeated["base"])
    assert new["verdict"]["regressed"] is False, new["verdict"]["summary"]
    assert new["method"]["name"] == "hierarchical block bootstrap"
    assert new["method"]["baseline_runs"] == 3 and new["method"]["current_runs"] == 3
    assert new["method"]["block_s"] == 5.0 and new["method"]["run_to_run_noise"] == "resampled"
    assert "run-to-run noise unknown" not in new["verdict"]["summary"]
    assert new["current"]["run_count"] == 3 and len(new["current"]["runs"]) == 3


def test_a_real_regression_across_all_runs_is_still_detected(repeated):
    comparison = compare_runs(repeated["slow"], repeated["base"])
    assert comparison["verdict"]["regressed"] is True
    p99 = next(r for r in comparison["percentiles"]
               if r["cls"] is None and r["metric"] == "latency_ms" and r["percentile"] == "p99")
    assert p99["regressed"] and p99["gate_ci_ms"][0] > 0 and p99["relative_change"] > 0.5
    assert "all latency P99" in comparison["verdict"]["summary"]


def test_one_run_per_side_says_the_run_to_run_noise_is_unknown(repeated):
    comparison = compare_runs(repeated["new"][0], repeated["base"][0])
    assert comparison["method"]["name"] == "time-block bootstrap"
    assert comparison["method"]["run_to_run_noise"] == "unknown" and comparison["method"]["block_s"] == 5.0
    assert "run-to-run noise unknown" in comparison["verdict"]["summary"]
    # titled by the runs' start times when a scenario is compared with itself
    assert comparison["title"] == "built 2027-01-15 09:00 vs built 2027-01-15 08:00"


def test_block_bootstrap_widens_the_interval_of_correlated_seconds(tmp_path):
    """Latency that moves in 10-s phases: resampling 5-s blocks gives a wider P50 interval than
    treating each request as independent (which understates the run's own noise)."""
    from run_builders import write_requests_run

    rng = np.random.default_rng(5)
    requests = []
    for phase in range(6):
        level = rng.lognormal(0.0, 0.2)
        for i in range(1000):
            sent = T0_S * NS + phase * 10 * NS + int(i * 10 * NS / 1000)
            requests.append({"trace_id": f"{phase:08x}{i:024x}", "sent_ns": sent,
                             "end_ns": sent + int(rng.lognormal(np.log(10), 0.2) * level * 1e6)})
    path = write_requests_run(str(tmp_path / "phases"), requests)
    blocks = compare_runs(path, path)
    per_request = compare_runs(path, path, CompareRules(method="request"))

    def width(c):
        row = next(r for r in c["percentiles"] if r["cls"] is None and r["metric"] == "latency_ms"
                   and r["percentile"] == "p50")
        return row["change_ci_ms"][1] - row["change_ci_ms"][0]
    assert width(blocks) > 2 * width(per_request)


def test_compare_cli_takes_runs_on_each_side_and_folders(repeated, tmp_path):
    out = tmp_path / "sides"
    listed = run_tailscope("compare", *repeated["new"], "--", *repeated["base"], "--out", str(out), timeout=120)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "hierarchical block bootstrap, 3 baseline run(s) and 3 new run(s)" in listed.stdout
    assert "latency P99" in listed.stdout
    data = json.loads((out / "comparison.json").read_text())
    assert data["method"]["current_runs"] == 3 and data["title"].startswith("3 runs of built from 2027-01-15 09:00")
    markdown = (out / "comparison.md").read_text()
    assert markdown.startswith("## tailscope comparison — 3 runs of built from 2027-01-15 09:00 vs 3 runs of built "
                               "from 2027-01-15 08:00: **NO REGRESSION**")
    assert "| all | latency P50 |" in markdown and "| all | service time P50 |" in markdown
    junit = (out / "junit-compare.xml").read_text()
    assert 'name="all latency P99"' in junit

    folders = run_tailscope("compare", str(repeated["root"] / "slow"), str(repeated["root"] / "base"), timeout=120)
    assert folders.returncode == 1, folders.stdout + folders.stderr
    assert "REGRESSION" in folders.stdout and (repeated["root"] / "slow" / "comparison.md").exists()
    three = run_tailscope("compare", *repeated["new"], timeout=60)
    assert three.returncode == 2 and "without `--`" in three.stderr


@contextlib.contextmanager
def started_reference_target():
    """A fresh reference target (no tracing) on a free loopback port, stopped by PID on exit."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "tailscope.targets.reference", "--host", "127.0.0.1", "--port", "0",
                             "--no-tracing"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("LISTENING"), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.timeout(240)
def test_three_vs_three_aa_runs_of_the_reference_target_are_no_regression(tmp_path):
    """Real runs: `tailscope run --repeat 3` twice, each side against a freshly started reference
    target (7 s each, the demo scenario), then `tailscope compare NEWDIR BASEDIR`: no regression,
    judged against the runs' spread. One target for both sides is no A/A: in a quiet CI run its P95
    went 12.4, 12.0, 12.0 → 13.2, 13.4, 13.7 ms over the six runs (P50 8.2–8.5 → 8.6–8.7 ms), the
    target itself slower by the second side, and compare rightly called that a regression."""
    scenario = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scenarios", "demo.yaml")
    folders = []
    for side in ("base", "new"):
        with started_reference_target() as target:
            proc = run_tailscope("run", scenario, "--target", target, "--duration", "7s", "--repeat", "3",
                                 "--out", str(tmp_path / side), "--receiver-port", "0", "--late-span-wait", "1s",
                                 timeout=150)
        assert proc.returncode in (0, 1, 3), proc.stderr[-2000:]  # the demo's SLOs may fail on a busy host
        [folder] = list((tmp_path / side).iterdir())
        assert folder.name.startswith("demo-") and folder.name.endswith("-x3")
        assert sorted(p.name for p in folder.iterdir()) == ["run-1", "run-2", "run-3"]
        assert all((folder / f"run-{i}" / "report.html").exists() for i in (1, 2, 3))
        assert "run 3 of 3:" in proc.stdout and f"3 of 3 runs of demo in {folder}" in proc.stdout
        word = {0: "passed", 1: "failed", 3: "inconclusive or incomplete"}[proc.returncode]
        assert proc.stdout.rstrip().endswith(f"exit {proc.returncode} ({word})")
        folders.append(folder)
    compared = run_tailscope("compare", str(folders[1]), str(folders[0]), timeout=120)
    assert "3 runs of demo from" in compared.stdout
    if compared.returncode == 3:  # other processes took more CPU while the new side ran: said, not a REGRESSION
        assert "INCONCLUSIVE" in compared.stdout and "the current runs' host was busier" in compared.stdout
    else:
        assert compared.returncode == 0, compared.stdout[-3000:]
        assert "NO REGRESSION" in compared.stdout
