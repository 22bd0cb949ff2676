"""A regression measured on a busier host is INCONCLUSIVE, not REGRESSION (analyzers/comparison/host_load.py).

In CI an A/A comparison of the reference target (3 runs per side, the same build) said REGRESSION,
image P95 +13%, while a demo and a headless browser ran beside the current side's runs. Each side's
other processes' CPU (host busy − target − generator) is now compared: the current side's host busier
by ≥ 0.3 cores turns a regression into INCONCLUSIVE (exit 3) with both figures; a slower target on an
equally quiet host stays a REGRESSION (exit 1). Seeded synthetic runs, compared by the real CLI.
"""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_tailscope

from tailscope.testkit.synthetic import write_synthetic_run

DURATION_S, RATE = 30, 40
#: The whole current run slowed: ``cpu`` (another process takes a core: host CPU +1 core) or
#: ``postprocess`` (the target's own code slower; the host as quiet as the baseline's).
WHOLE_RUN = {"at_s": 0, "duration_s": DURATION_S, "extra_ms": 12}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("host_load")
    paths = {}
    for name, seed, spikes in (("baseline", 1, []), ("busier_host", 2, [{"kind": "cpu", **WHOLE_RUN}]),
                               ("slower_target", 3, [{"kind": "postprocess", **WHOLE_RUN}])):
        paths[name] = str(root / name)
        write_synthetic_run(paths[name], duration_s=DURATION_S, rate=RATE, seed=seed, spikes=spikes)
    return paths


def _compare(runs, current, tmp_path):
    out = tmp_path / current
    proc = run_tailscope("compare", runs[current], runs["baseline"], "--out", str(out), timeout=180)
    with open(out / "comparison.json") as fh:
        return proc, json.load(fh)


def test_a_regression_on_a_busier_host_is_inconclusive(runs, tmp_path):
    proc, comparison = _compare(runs, "busier_host", tmp_path)
    assert proc.returncode == 3, proc.stdout[-3000:]
    verdict, host = comparison["verdict"], comparison["host_load"]
    assert verdict["regressed"] and verdict["inconclusive"]
    assert host["busier"] == "current" and host["current_cores"] - host["baseline_cores"] >= 0.9
    assert "the current runs' host was busier: other processes used" in verdict["summary"]
    assert "rerun both sides on a quiet host" in verdict["summary"]
    assert "INCONCLUSIVE" in proc.stdout and "NO REGRESSION" not in proc.stdout
    with open(tmp_path / "busier_host" / "comparison.md") as fh:
        assert "**INCONCLUSIVE**" in fh.read()
    with open(tmp_path / "busier_host" / "comparison.html") as fh:
        page = fh.read()
    assert 'class="banner inconclusive"' in page and "other processes&#39; CPU" in page


def test_a_slower_target_on_an_equally_quiet_host_is_a_regression(runs, tmp_path):
    proc, comparison = _compare(runs, "slower_target", tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:]
    verdict, host = comparison["verdict"], comparison["host_load"]
    assert verdict["regressed"] and not verdict["inconclusive"] and host["busier"] is None
    assert abs(host["current_cores"] - host["baseline_cores"]) < 0.1
    assert "REGRESSION" in proc.stdout and "host was busier" not in verdict["summary"]
