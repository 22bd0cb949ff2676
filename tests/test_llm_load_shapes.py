"""The load shapes LLM users run, through the real `tailscope` command against the real LLM
reference server (``python -m tailscope.targets.llm``, continuous batching, two tokens per
SSE chunk) on loopback, with short runs:

- concurrency mode (``arrival: {concurrency: N}``): N streams kept busy, a new request as
  soon as one ends, labelled a closed loop, latency from the send;
- a rate with ``max_concurrency``: the open-loop schedule kept, never more than N in flight,
  the wait for a slot recorded as lateness (also split over ``--workers``, whose chunk and
  token records merge into one run);
- a concurrency sweep: the throughput–latency frontier (output tokens/s against TTFT and
  TPOT) and its best point under the SLOs;
- concurrency mode and its sweep over ``--workers`` (Locust master and worker processes):
  N split over the workers, N in flight in all as the server counts them, the workers'
  request, chunk and token records merged into one run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import textwrap
import threading
import urllib.request

import numpy as np
import pyarrow.compute as pc
import pytest
from cli_helpers import load_analysis, only_run_dir, run_tailscope
from test_llm_server import LlmServer

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.sweep import SweepStep
from tailscope.analyzers.patterns.load_sweep import frontier
from tailscope.loadgen.distributed import cap_share, split_description
from tailscope.loadgen.spec import ArrivalSpec
from tailscope.rundir import read_stream, schema

MS = 1_000_000


@pytest.fixture(scope="module")
def llm_server():
    server = LlmServer(["--max-num-seqs", "16", "--step-extra-delay-ms", "3", "--tokens-per-chunk", "2"])
    try:
        yield server
    finally:
        server.close()


def _scenario(tmp_path, arrival: str, slo: str = '["error_rate < 5%"]', output: str = "{dist: uniform, min: 8, max: 16}",
              verdict: str = "{unclaimed: inconclusive}"):
    path = tmp_path / "llm.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: shapes
        duration: 3s
        seed: 5
        timeout: 20s
        arrival: {arrival}
        classes:
          - name: chat
            api: openai-chat
            model: tailscope-llm
            prompt_tokens: {{dist: uniform, min: 10, max: 40}}
            output_tokens: {output}
        slo: {slo}
        verdict: {verdict}
        """))
    return str(path)


def _run(tmp_path, server: LlmServer, arrival: str, *extra: str, slo: str = '["error_rate < 5%"]'
         ) -> tuple[str, dict, dict]:
    out = tmp_path / "runs"
    proc = run_tailscope("run", _scenario(tmp_path, arrival, slo), "--target", f"http://127.0.0.1:{server.port}",
                         "--out", str(out), "--receiver-port", "0", *extra, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(out)
    with open(os.path.join(run_dir, "manifest.json"), encoding="utf-8") as fh:
        manifest = json.load(fh)
    return run_dir, manifest, load_analysis(run_dir)


def _requests(run_dir: str):
    return read_stream(os.path.join(run_dir, schema.REQUESTS), schema.REQUESTS_SCHEMA).table


def _in_flight(sent_ns: np.ndarray, end_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times, requests in flight from each time to the next), from the [sent, end) intervals."""
    times = np.concatenate([sent_ns, end_ns])
    steps = np.concatenate([np.ones(len(sent_ns), dtype=np.int64), -np.ones(len(end_ns), dtype=np.int64)])
    order = np.lexsort((steps, times))  # at a tie an end comes before a send
    return times[order], np.cumsum(steps[order])


def test_concurrency_mode_keeps_n_streams_busy_and_is_a_closed_loop(tmp_path, llm_server):
    run_dir, manifest, analysis = _run(tmp_path, llm_server, "{concurrency: 4}")
    assert manifest["arrival"] == {"loop": "closed", "process": "closed", "users": 4, "think_time_s": 0.0}
    assert analysis["summary"]["load_model"] == "closed"
    table = _requests(run_dir)
    assert table.num_rows > 12 and pc.sum(pc.is_valid(table.column("error_kind"))).as_py() == 0
    sent = table.column("sent_ns").to_numpy()
    end = table.column("end_ns").to_numpy()
    # no schedule: latency is measured from the send
    assert np.array_equal(table.column("scheduled_ns").to_numpy(), sent)
    times, in_flight = _in_flight(sent, end)
    assert in_flight.max() == 4
    # busy: from the first send to the run's end (when no new request starts), four in flight
    # but for the moments between one request's end and the next one's send
    halt_ns = analysis["run"]["load_start_ns"] + int(3e9)
    inside = (times[:-1] >= sent.min()) & (times[1:] <= min(halt_ns, sent.max()))
    widths = np.diff(times)[inside]
    assert np.sum(in_flight[:-1][inside] * widths) / np.sum(widths) > 3.6
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as fh:
        html = fh.read()
    assert "closed loop (concurrency mode): 4 requests kept in flight" in html
    assert 'id="loop-label"' in html and "closed loop (concurrency mode, 4 in flight)" in html
    assert any(w["code"] == "closed_loop" for w in analysis["warnings"])


def _sent(table):
    """The rows of requests that were sent (a request still waiting for a slot at the halt was not)."""
    return table.filter(pc.is_valid(table.column("sent_ns")))


def test_max_concurrency_caps_an_open_loop_and_the_wait_is_lateness(tmp_path, llm_server):
    run_dir, manifest, analysis = _run(tmp_path, llm_server, "{process: poisson, rate: 60, max_concurrency: 2}",
                                       slo="[]")
    assert manifest["arrival"]["loop"] == "open" and manifest["arrival"]["max_concurrency"] == 2
    assert manifest["options"]["max_in_flight"] == 2
    table = _sent(_requests(run_dir))
    sent, scheduled, end = (table.column(c).to_numpy() for c in ("sent_ns", "scheduled_ns", "end_ns"))
    _, in_flight = _in_flight(sent, end)
    assert in_flight.max() == 2
    # 60 req/s of streams lasting tens of ms need more than two slots: requests waited, and the
    # wait (sent − scheduled) is part of their latency (end − scheduled), not hidden
    lateness_ms = (sent - scheduled) / MS
    assert np.percentile(lateness_ms, 90) > 50
    assert analysis["summary"]["lateness_ms"]["p99_ms"] > 50
    assert np.all(end - scheduled >= sent - scheduled)
    assert analysis["summary"]["latency_ms"]["p99"]["value_ms"] >= np.percentile(lateness_ms, 99) * 0.99
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as fh:
        assert "at most 2 in flight (max_concurrency" in fh.read()


def test_workers_split_max_concurrency_and_merge_chunk_and_token_records(tmp_path, llm_server):
    run_dir, manifest, _ = _run(tmp_path, llm_server, "{process: poisson, rate: 20, max_concurrency: 4}",
                                "--workers", "2")
    table = _requests(run_dir)
    ok = pc.is_null(table.column("error_kind")).to_numpy(zero_copy_only=False)
    assert ok.sum() > 20 and set(table.column("worker").to_pylist()) == {0, 1}
    assert manifest["options"]["max_in_flight"] == 4
    sent = _sent(table)
    _, in_flight = _in_flight(sent.column("sent_ns").to_numpy(), sent.column("end_ns").to_numpy())
    assert in_flight.max() <= 4  # two workers, two slots each
    chunks = read_stream(os.path.join(run_dir, schema.CHUNKS), schema.CHUNKS_SCHEMA).table
    tokens_by_trace: dict[str, list[int]] = {}
    for trace, tokens in zip(chunks.column("trace_id").to_pylist(), chunks.column("tokens").to_pylist()):
        tokens_by_trace.setdefault(trace, []).append(tokens)
    with urllib.request.urlopen(f"http://127.0.0.1:{llm_server.port}/debug/requests", timeout=30) as reply:
        served = {r["request_id"]: r for r in json.load(reply)["requests"]}
    rows = table.filter(pc.is_null(table.column("error_kind"))).to_pylist()
    for row in rows:
        carried = tokens_by_trace[row["trace_id"]]
        assert len(carried) == row["chunks"] and None not in carried
        assert sum(carried) == row["output_tokens"] and row["token_count_source"] == "usage"
        server_side = next(r for rid, r in served.items() if row["trace_id"] in rid)
        assert row["output_tokens"] == server_side["attributes"]["gen_ai.usage.completion_tokens"]


def test_concurrency_sweep_plots_the_token_frontier_and_names_the_best_point(tmp_path, llm_server):
    out = tmp_path / "runs"
    # 2-s steps hold too few requests to claim a TTFT P99: the scenario lets unclaimed SLOs pass
    scenario = _scenario(tmp_path, "{process: poisson, rate: 5}", slo='["error_rate < 5%", "ttft p99 < 20s"]',
                         verdict="{unclaimed: pass}")
    proc = run_tailscope("sweep", scenario, "--target", f"http://127.0.0.1:{llm_server.port}", "--concurrency", "1,4",
                         "--step-duration", "2s", "--receiver-port", "0", "--out", str(out), timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sweep_dir,) = [os.path.join(out, d) for d in os.listdir(out)]
    with open(os.path.join(sweep_dir, "sweep.json"), encoding="utf-8") as fh:
        sweep = json.load(fh)
    assert sweep["variable"] == "concurrency" and [s["concurrency"] for s in sweep["steps"]] == [1, 4]
    for step in sweep["steps"]:
        with open(os.path.join(step["run_dir"], "manifest.json"), encoding="utf-8") as fh:
            manifest = json.load(fh)
        assert manifest["scenario"]["arrival"] == {"concurrency": step["concurrency"]}
        assert manifest["arrival"]["users"] == step["concurrency"] == manifest["sweep"]["concurrency"]
        # the step's output tokens/s is its records' output tokens over the load period
        table = _requests(step["run_dir"])
        output = pc.sum(table.filter(pc.is_null(table.column("error_kind"))).column("output_tokens")).as_py()
        analysis = load_analysis(step["run_dir"])
        assert step["llm"]["output_tokens_per_s"] == pytest.approx(output / analysis["summary"]["duration_s"])
        assert step["llm"]["ttft_ms"]["p99"]["value_ms"] > 0 and step["llm"]["tpot_ms"]["p50"]["value_ms"] > 0
        assert step["passed"] is True
    one, four = sweep["steps"]
    assert four["llm"]["output_tokens_per_s"] > 1.5 * one["llm"]["output_tokens_per_s"]  # the server batches
    front = sweep["frontier"]
    assert [p["level"] for p in front["points"]] == [1, 4]
    assert front["best_under_slo"]["index"] == four["index"] and sweep["max_concurrency_under_slo"] == 4
    assert "best point under SLO: 4 in flight" in proc.stdout.replace("\n", " ")
    printed = " ".join(proc.stdout.split())  # rich wraps lines at the terminal width
    assert "highest concurrency under the SLOs: 4 in flight" in printed and "→" not in printed
    assert "no maximum rate" not in printed and "; SLOs met" in printed
    with open(os.path.join(sweep_dir, "sweep.html"), encoding="utf-8") as fh:
        html = fh.read()
    assert 'id="frontier-chart"' in html and "best under SLO" in html


def _point(index: int, level: int, tokens: float, ttft: float, tpot: float, passed) -> SweepStep:
    def pct(v):
        return {"value_ms": v, "ci_low_ms": v, "ci_high_ms": v, "n": 100, "claimed": True}

    return decode(SweepStep, {
        "index": index, "rate": None, "concurrency": level, "run_dir": f"/r/{index}", "status": "complete",
        "duration_s": 10.0, "requests": 100, "errors": 0, "error_rate": 0.0, "offered_rps": None,
        "achieved_rps": tokens / 10, "p50": pct(ttft), "p99": pct(ttft), "passed": passed, "failed_slos": [],
        "generator_limited": False,
        "llm": {"requests": 100, "completed": 100, "output_tokens_per_s": tokens,
                "ttft_ms": {"p50": pct(ttft / 2), "p99": pct(ttft)}, "tpot_ms": {"p50": pct(tpot / 2), "p99": pct(tpot)}}},
        "step")


def test_frontier_marks_pareto_points_and_the_best_passing_throughput():
    steps = [_point(0, 1, 100, 50, 10, True), _point(1, 2, 180, 60, 12, True), _point(2, 4, 170, 90, 20, True),
             _point(3, 8, 300, 400, 30, False)]
    front = frontier(steps, has_slos=True)
    assert [p.pareto for p in front.points] == [True, True, False, True]  # 4 in flight: beaten by 2
    assert front.best_under_slo.index == 1  # the most tokens/s among the passing steps
    assert frontier(steps, has_slos=False).best_under_slo is None
    assert frontier([_point(0, 1, 100, 50, 10, False)], has_slos=True).best_under_slo is None
    assert frontier([dataclasses.replace(steps[0], llm=None)], has_slos=True) is None  # no LLM figures: no frontier


def test_a_max_concurrency_cap_is_split_over_the_workers_and_must_cover_them(tmp_path):
    for cap in (2, 5, 9, 64):
        for count in range(1, cap + 1):
            parts = [cap_share(cap, index, count) for index in range(count)]
            assert sum(parts) == cap and max(parts) - min(parts) <= 1 and min(parts) >= 1
    scenario = tmp_path / "capped.yaml"
    scenario.write_text("target: http://127.0.0.1:9\nduration: 1s\narrival: {process: poisson, rate: 5, max_concurrency: 2}\n"
                        "classes: [{name: a, path: /a}]\n")
    proc = run_tailscope("run", str(scenario), "--workers", "3", "--out", str(tmp_path / "runs"))
    assert proc.returncode == 2 and "max_concurrency (2)" in proc.stderr and "--workers (3)" in proc.stderr
    # concurrency mode's N is split the same way, and must cover the workers too
    scenario.write_text("target: http://127.0.0.1:9\nduration: 1s\narrival: {concurrency: 2}\n"
                        "classes: [{name: a, path: /a}]\n")
    proc = run_tailscope("run", str(scenario), "--workers", "3", "--out", str(tmp_path / "runs"))
    assert proc.returncode == 2 and "arrival.concurrency (2)" in proc.stderr and "--workers (3)" in proc.stderr


class _ServerLoadProbe:
    """Samples the server's own count of requests it holds (``vllm:num_requests_running`` +
    ``waiting`` on /metrics) every :attr:`PERIOD_S` in a thread, until :meth:`stop`."""

    PERIOD_S = 0.02

    def __init__(self, port: int):
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.PERIOD_S):
            with urllib.request.urlopen(self.url, timeout=10) as reply:
                text = reply.read().decode()
            self.samples.append(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                                    if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{"))))

    def stop(self) -> np.ndarray:
        self._stop.set()
        self._thread.join(timeout=15)
        return np.array(self.samples)


def _tokens_by_trace(run_dir: str) -> dict[str, list[int]]:
    chunks = read_stream(os.path.join(run_dir, schema.CHUNKS), schema.CHUNKS_SCHEMA).table
    out: dict[str, list[int]] = {}
    for trace, tokens in zip(chunks.column("trace_id").to_pylist(), chunks.column("tokens").to_pylist()):
        out.setdefault(trace, []).append(tokens)
    return out


def _assert_merged_closed_loop(run_dir: str, manifest: dict, level: int, workers: int) -> None:
    """Both workers' rows in one run, each worker holding its part of ``level``, every request's
    chunks and tokens merged with it."""
    assert manifest["arrival"]["users"] == level and manifest["arrival"]["workers"] == workers
    parts = manifest["arrival"]["users_per_worker"]
    assert sum(parts) == level and max(parts) - min(parts) <= 1
    table = _requests(run_dir)
    assert pc.sum(pc.is_valid(table.column("error_kind"))).as_py() == 0
    worker = np.array(table.column("worker").to_pylist())
    assert set(worker) == set(range(workers))
    sent, end = table.column("sent_ns").to_numpy(), table.column("end_ns").to_numpy()
    assert np.array_equal(table.column("scheduled_ns").to_numpy(), sent)  # closed loop: no schedule
    for index, part in enumerate(parts):
        assert _in_flight(sent[worker == index], end[worker == index])[1].max() == part
    assert _in_flight(sent, end)[1].max() == level
    assert manifest["load"]["scheduled"] == table.num_rows
    tokens = _tokens_by_trace(run_dir)
    for row in table.to_pylist():
        carried = tokens[row["trace_id"]]
        assert len(carried) == row["chunks"] and sum(carried) == row["output_tokens"] > 0
        assert row["token_count_source"] == "usage"
    assert len(tokens) == table.num_rows


def test_workers_split_concurrency_mode_and_merge_its_records(tmp_path, llm_server):
    probe = _ServerLoadProbe(llm_server.port)
    try:
        run_dir, manifest, analysis = _run(tmp_path, llm_server, "{concurrency: 5}", "--workers", "2")
    finally:
        held = probe.stop()
    assert manifest["arrival"] == {"loop": "closed", "process": "closed", "users": 5, "think_time_s": 0.0,
                                   "workers": 2, "users_per_worker": [3, 2]}
    assert analysis["summary"]["load_model"] == "closed"
    assert analysis["generator"]["load_model"]["users"] == 5
    _assert_merged_closed_loop(run_dir, manifest, 5, 2)
    # the server's own count: from its first to its last busy sample, it held five requests
    # but for the moments between one request's end and the next one's send
    busy = np.flatnonzero(held > 0)
    assert len(busy) > 20, held
    during = held[busy[0]:busy[-1] + 1]
    assert during.max() == 5 and np.median(during) == 5 and during.mean() > 4.3, during
    # the generator's in-flight gauges, summed over the two workers, say the same
    gauges = [w["in_flight"] for w in analysis["generator"]["windows"] if w["in_flight"]]
    assert max(gauges) == pytest.approx(5, abs=0.5)
    # no schedule, so nothing is late, and both workers' processes are listed
    assert analysis["summary"]["lateness_ms"]["late_share"] == 0.0
    assert {p["worker"] for p in analysis["generator"]["processes"]} == {0, 1}
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as fh:
        assert "closed loop (concurrency mode): 5 requests kept in flight" in fh.read()


@pytest.mark.skipif(os.environ.get("TAILSCOPE_LONG_TESTS") != "1",
                    reason="18 s; set TAILSCOPE_LONG_TESTS=1 (the split itself is tested by the workers run above)")
def test_concurrency_sweep_over_workers(tmp_path, llm_server):
    out = tmp_path / "runs"
    scenario = _scenario(tmp_path, "{process: poisson, rate: 5}")
    proc = run_tailscope("sweep", scenario, "--target", f"http://127.0.0.1:{llm_server.port}", "--concurrency", "2,4",
                         "--workers", "2", "--step-duration", "1.5s", "--receiver-port", "0", "--out", str(out),
                         timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sweep_dir,) = [os.path.join(out, d) for d in os.listdir(out)]
    with open(os.path.join(sweep_dir, "sweep.json"), encoding="utf-8") as fh:
        sweep = json.load(fh)
    assert [s["concurrency"] for s in sweep["steps"]] == [2, 4]
    for step in sweep["steps"]:
        with open(os.path.join(step["run_dir"], "manifest.json"), encoding="utf-8") as fh:
            manifest = json.load(fh)
        assert manifest["arrival"]["users_per_worker"] == [step["concurrency"] // 2] * 2
        _assert_merged_closed_loop(step["run_dir"], manifest, step["concurrency"], 2)
        assert step["passed"] is True and step["llm"]["output_tokens_per_s"] > 0


def test_the_split_of_a_closed_loop_is_described_for_the_manifest():
    assert split_description(ArrivalSpec(process="closed", users=7), 3) == {"workers": 3, "users_per_worker": [3, 2, 2]}
    assert split_description(ArrivalSpec(process="poisson", rate=5, max_concurrency=5), 2) == {
        "workers": 2, "max_concurrency_per_worker": [3, 2]}
    assert split_description(ArrivalSpec(process="constant", rate=5), 4) == {"workers": 4}


def test_concurrency_sweep_usage_errors(tmp_path):
    closed = _scenario(tmp_path, "{concurrency: 2}")
    target = ("--target", "http://127.0.0.1:9")
    for args, words in [
        (("--concurrency", "1,2", "--search"), "--search looks for a peak rate"),
        (("--rates", "1,2"), "--concurrency sweeps a closed loop"),
        (("--concurrency", "1.5"), "a concurrency is a whole number"),
        (("--concurrency", "1,4", "--workers", "2"), "every level must be at least --workers (2)"),
    ]:
        proc = run_tailscope("sweep", closed, *target, *args, "--out", str(tmp_path / "runs"))
        assert proc.returncode == 2 and words in proc.stderr, (args, proc.stderr)
