"""Prometheus /metrics scraping: the parser on real prometheus_client output, and the
sampler against a real exposition served on loopback (a fast one, and a slow one that
must stall neither the sampling loop nor its end)."""

from __future__ import annotations

import http.server
import signal
import subprocess
import sys
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest, start_http_server
from signals_helpers import read_series, read_signals_meta

from tailscope.signals.config import SamplerConfig
from tailscope.signals.host import HostCpuSampler
from tailscope.signals.prometheus import PrometheusSampler, parse_exposition
from tailscope.signals.sampling_loop import run_sampling, sample_loop


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
    # one scrape per period on the scraper's own schedule (the probe's first; the last may end after the last tick)
    assert depth[0] <= 2 and max(depth) >= 8 and abs(len(depth) - summary.ticks) <= 2
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
    rows = {series: value for batch in sampler.scrape_all() for series, value in batch.rows}
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


class _SlowMetrics(http.server.BaseHTTPRequestHandler):
    """/metrics over kept-alive HTTP/1.1: request n (from 1) answers after ``delay_s(n)`` seconds, its
    body sent in ``pieces`` parts spread over ``trickle_s``; the page's gauge ``served`` is n."""

    protocol_version = "HTTP/1.1"
    delay_s = staticmethod(lambda n: 0.0)
    pieces = 1
    trickle_s = 0.0

    def do_GET(self):
        server = self.server
        with server.lock:
            server.count += 1
            n = server.count
        received_ns = time.time_ns()
        server.arrived.set()
        server.release.wait(self.delay_s(n))
        body = f"# TYPE served gauge\nserved {n}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        step = -(-len(body) // self.pieces)
        for i in range(0, len(body), step):
            if i:
                server.release.wait(self.trickle_s / (self.pieces - 1))
            last_sent_ns = time.time_ns()  # taken before the write: the scraper cannot have the byte earlier
            try:
                self.wfile.write(body[i:i + step])
                self.wfile.flush()
            except OSError:
                return  # the scraper gave up on this answer
        server.answers[n] = (received_ns, last_sent_ns)

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_metrics():
    """Start a :class:`_SlowMetrics` server on 127.0.0.1 with the given behaviour; yields a starter that
    returns (url, server); ``server.answers[n]`` = (received, last piece sent) epoch ns of request n."""
    servers = []

    def start(delay_s=lambda n: 0.0, pieces=1, trickle_s=0.0):
        handler = type("Handler", (_SlowMetrics,), {"delay_s": staticmethod(delay_s), "pieces": pieces,
                                                    "trickle_s": trickle_s})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.lock, server.count, server.answers = threading.Lock(), 0, {}
        server.arrived, server.release = threading.Event(), threading.Event()
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.server_address[1]}/metrics", server

    yield start
    for server, thread in servers:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class _ListSink:
    """A SignalSink keeping every write: [(t_ns, rows)]."""

    def __init__(self):
        self.writes = []

    def write(self, t_ns, rows):
        self.writes.append((t_ns, list(rows)))

    def describe(self, metadata):
        pass

    def failure(self):
        return None


def _scrape_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tailscope-scrape-") and t.is_alive()]


def test_a_hanging_endpoint_stalls_neither_the_host_samplers_nor_the_loop(slow_metrics):
    # after the probe, every scrape hangs 1.5 s: past its 1-s deadline (old behaviour: the loop waited each time)
    url, server = slow_metrics(delay_s=lambda n: 0.0 if n == 1 else 1.5)
    rate_hz = 10.0
    stop = threading.Event()
    timer = threading.Timer(3.5, stop.set)
    timer.start()
    sink = _ListSink()
    try:
        summary = sample_loop([HostCpuSampler(), PrometheusSampler([url], timeout_s=1.0, rate_hz=rate_hz)],
                              rate_hz, stop, sink)
    finally:
        timer.cancel()
    period_ns = 1e9 / rate_hz
    host_times = [t for t, rows in sink.writes if any(name.startswith("host.cpu") for name, _ in rows)]
    gaps = [b - a for a, b in zip(host_times, host_times[1:])]
    assert summary.ticks >= 30 and summary.missed_ticks <= 2
    assert len(host_times) == summary.ticks and max(gaps) <= 2 * period_ns
    ups = [(t, v) for t, rows in sink.writes for name, v in rows if name == "prom.up"]
    assert ups[0][1] == 1.0 and [v for _, v in ups[1:]] == [0.0] * (len(ups) - 1)  # every hung scrape failed
    assert 2 <= len(ups) - 1 <= 4  # one scrape at a time: ~1 s each (deadline), not one per tick
    assert not _scrape_threads()  # the loop closed the sampler: its thread is joined


def test_a_late_answer_is_a_reading_stamped_with_its_answer_time(slow_metrics):
    url, server = slow_metrics(delay_s=lambda n: 0.0 if n == 1 else 1.5)
    sampler = PrometheusSampler([url], timeout_s=3.0, rate_hz=10.0)
    assert sampler.probe() is None
    try:
        started = time.monotonic()
        (probed,) = sampler.read(time.time_ns())  # the probe's scrape; starts the scraping thread
        assert dict(probed.rows)["prom.served"] == 1.0
        assert time.monotonic() - started < 0.1  # read() never waits on the network
        batches = []
        while not batches and time.monotonic() - started < 3.0:
            time.sleep(0.05)
            batches = sampler.read(time.time_ns())
            assert time.monotonic() - started < 3.0
    finally:
        sampler.close()
    rows = dict(batches[0].rows)
    received_ns, sent_ns = server.answers[int(rows["prom.served"])]
    assert rows["prom.up"] == 1.0 and rows["prom.scrape_duration_s"] >= 1.4
    assert sent_ns <= batches[0].t_ns < sent_ns + 200_000_000  # stamped at the answer, not the request
    assert batches[0].t_ns - received_ns >= 1_400_000_000


def test_the_timeout_is_a_deadline_on_the_whole_scrape(slow_metrics):
    # after the probe, the answer's body trickles in 4 pieces over 1.2 s: each socket read is quick,
    # the scrape is not (a per-operation timeout of 0.5 s let such a scrape take 2.77 s against vLLM)
    url, server = slow_metrics(pieces=4, trickle_s=1.2)
    sampler = PrometheusSampler([url], timeout_s=3.0)
    assert sampler.probe() is None
    sampler.timeout_s = 0.5
    try:
        started_ns = time.time_ns()
        (batch,) = sampler.scrape_all()
        took_ns = time.time_ns() - started_ns
        sampler.timeout_s = 3.0  # the abandoned connection is replaced: the next scrape, given time, succeeds
        (answered,) = sampler.scrape_all()
    finally:
        sampler.close()
    assert batch.rows == [("prom.up", 0.0)]
    assert 500_000_000 <= took_ns < 800_000_000
    assert 500_000_000 <= batch.t_ns - started_ns < 800_000_000  # a failed scrape is stamped when it failed
    assert dict(answered.rows)["prom.up"] == 1.0


def test_close_wakes_a_scrape_blocked_on_a_hung_endpoint(slow_metrics):
    url, server = slow_metrics(delay_s=lambda n: 0.0 if n == 1 else 60.0)
    sampler = PrometheusSampler([url], timeout_s=30.0, rate_hz=10.0)
    assert sampler.probe() is None
    server.arrived.clear()
    sampler.read(time.time_ns())
    assert server.arrived.wait(2.0)  # the thread's scrape is in flight, its server silent
    time.sleep(0.1)
    started = time.monotonic()
    sampler.close()
    assert time.monotonic() - started < 1.0
    assert not _scrape_threads()
    assert sampler.read(time.time_ns()) == []  # a scrape cut short by close() is no reading


def test_the_sampler_process_exits_promptly_on_sigterm_while_its_endpoint_hangs(tmp_path, slow_metrics):
    url, server = slow_metrics(delay_s=lambda n: 0.0 if n == 1 else 60.0)
    process = subprocess.Popen([sys.executable, "-m", "tailscope.signals", "--run-dir", str(tmp_path),
                                "--prometheus", url, "--rate", "10"])
    try:
        deadline = time.monotonic() + 20
        while server.count < 2 and time.monotonic() < deadline:  # probed, then a scrape hangs
            time.sleep(0.05)
        assert server.count >= 2
        time.sleep(0.5)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert time.monotonic() - started < 2.0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    sampling = read_signals_meta(str(tmp_path))["sampling"]
    assert sampling["ticks"] >= 5 and sampling["missed_ticks"] <= 2
