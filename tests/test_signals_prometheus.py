"""Prometheus /metrics scraping: the parser on real prometheus_client output, and the
sampler against a real exposition served on loopback."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest, start_http_server
from signals_helpers import read_series, read_signals_meta

from tailscope.signals.config import SamplerConfig
from tailscope.signals.prometheus import PrometheusSampler, parse_exposition
from tailscope.signals.sampling_loop import run_sampling


def _registry():
    registry = CollectorRegistry()
    waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to be processed", ("model_name",), registry=registry)
    pending = Gauge("nv_inference_pending_request_count", "Pending requests", ("model", "version"), registry=registry)
    done = Counter("inference_requests", "Requests answered", registry=registry)
    latency = Histogram("request_latency_seconds", "Latency", registry=registry, buckets=(0.01, 0.1, 1.0))
    sizes = Summary("batch_size", "Batch sizes", registry=registry)
    return registry, waiting, pending, done, latency, sizes


def test_parser_maps_real_exposition_to_gauges_and_cumulative_counters():
    registry, waiting, pending, done, latency, sizes = _registry()
    waiting.labels(model_name='llama "3"').set(7)
    pending.labels(model="resnet", version="1").set(3)
    done.inc(41)
    for value in (0.005, 0.05, 0.5):
        latency.observe(value)
    sizes.observe(4)
    samples = {(s.name, s.labels): s for s in parse_exposition(generate_latest(registry).decode())}
    vllm = samples[("vllm:num_requests_waiting", (("model_name", 'llama "3"'),))]
    assert (vllm.value, vllm.kind, vllm.help) == (7.0, "gauge", "Requests waiting to be processed")
    assert samples[("nv_inference_pending_request_count", (("model", "resnet"), ("version", "1")))].value == 3.0
    total = samples[("inference_requests_total", ())]
    assert (total.value, total.kind) == (41.0, "counter")
    assert samples[("request_latency_seconds_sum", ())].value == pytest.approx(0.555)
    assert samples[("request_latency_seconds_sum", ())].unit == "s"
    count = samples[("request_latency_seconds_count", ())]
    assert (count.value, count.kind, count.unit) == (3.0, "counter", "count")
    assert samples[("batch_size_count", ())].kind == "counter"
    names = {name for name, _ in samples}
    assert not any(n.endswith(("_bucket", "_created")) for n in names)  # buckets and creation stamps skipped


def test_parser_skips_malformed_and_non_finite_lines_and_reads_openmetrics_units():
    text = (
        "# TYPE queue_seconds gauge\n# UNIT queue_seconds seconds\n"
        "queue_seconds 0.25 1700000000000\n"
        "broken{a=\"1\" 3\n"
        "nan_metric NaN\n"
        "plain_untyped 12\n"
        "# EOF\n"
    )
    samples = parse_exposition(text)
    assert [(s.name, s.value, s.kind, s.unit) for s in samples] == [
        ("queue_seconds", 0.25, "gauge", "seconds"), ("plain_untyped", 12.0, "gauge", "count")]


@pytest.fixture
def exposition():
    """A real prometheus_client HTTP exposition on 127.0.0.1, shut down afterwards."""
    registry, waiting, pending, done, latency, sizes = _registry()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics", waiting, done
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_sampler_scrapes_a_real_endpoint_every_tick(tmp_path, exposition):
    url, waiting, done = exposition
    waiting.labels(model_name="m").set(1)
    stop = threading.Event()

    meta_path = tmp_path / "signals.json"

    def load():  # the queue grows and requests complete while we sample
        while not meta_path.exists() and not stop.wait(0.01):
            pass  # the sampler has probed (scraped once) before the queue grows
        for depth in range(2, 12):
            if stop.wait(0.05):
                return
            waiting.labels(model_name="m").set(depth)
            done.inc(5)

    def stop_after_load():
        worker.join()
        stop.wait(0.3)
        stop.set()

    worker = threading.Thread(target=load)
    stopper = threading.Thread(target=stop_after_load)
    worker.start()
    stopper.start()
    try:
        summary = run_sampling(str(tmp_path), None, 20.0, stop, config=SamplerConfig(prometheus_urls=[url]))
    finally:
        stop.set()
        worker.join()
        stopper.join()
    assert summary.ticks >= 8
    series = read_series(str(tmp_path))
    depth = [v for _, v in series['prom.vllm:num_requests_waiting{model_name="m"}']]
    assert depth[0] <= 2 and max(depth) >= 8 and len(depth) == summary.ticks  # one point per tick
    done_total = [v for _, v in series["prom.inference_requests_total"]]
    assert done_total == sorted(done_total) and done_total[-1] >= 40  # stored cumulative
    assert all(v == 1.0 for _, v in series["prom.up"])
    meta = read_signals_meta(str(tmp_path))
    assert meta["sources"]["prometheus"] == {"available": True, "reason": None}
    assert meta["series"]["prom.inference_requests_total"]["kind"] == "counter"
    assert meta["series"]['prom.vllm:num_requests_waiting{model_name="m"}']["kind"] == "gauge"


def test_new_label_sets_are_described_and_down_endpoints_reported(exposition):
    url, waiting, _ = exposition
    sampler = PrometheusSampler([url, "http://127.0.0.1:9/metrics"], timeout_s=0.5)
    assert sampler.probe() is None  # one of two endpoints answers
    version = sampler.series_version
    waiting.labels(model_name="new").set(3)
    rows = dict(sampler.read(0))
    instance = url.split("/")[2]
    assert rows[f'prom.vllm:num_requests_waiting{{instance="{instance}",model_name="new"}}'] == 3.0
    assert rows[f'prom.up{{instance="{instance}"}}'] == 1.0
    assert rows['prom.up{instance="127.0.0.1:9"}'] == 0.0
    assert sampler.series_version > version
    assert f'prom.vllm:num_requests_waiting{{instance="{instance}",model_name="new"}}' in sampler.series()


def test_sampler_without_endpoints_or_with_none_answering_says_why():
    assert "no Prometheus endpoint configured" in PrometheusSampler([]).probe()
    reason = PrometheusSampler(["http://127.0.0.1:9/metrics"], timeout_s=0.3).probe()
    assert reason.startswith("no Prometheus endpoint answered (http://127.0.0.1:9/metrics:")
    assert "not an http(s) URL" in PrometheusSampler(["ftp://127.0.0.1/metrics"]).probe()
