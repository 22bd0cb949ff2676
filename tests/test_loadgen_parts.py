"""Payloads, trace context, request mix and recorder (in-process, no Locust)."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys

import numpy as np
import pytest

from tailscope.loadgen.mix import RequestMix
from tailscope.loadgen.payloads import PayloadMaker
from tailscope.loadgen.recorder import Recorder, WindowedStats, bucket_value_ms, latency_bucket
from tailscope.loadgen.spec import PayloadSpec, RequestClass, SizeSpec
from tailscope.loadgen.tracecontext import new_traceparent
from tailscope.rundir import Appender, read_stream, schema
from tailscope.rundir import histograms as hist
from tailscope.rundir.request_record import RequestRecord
from tailscope.rundir.retention_policy import trace_sampled

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")


def test_no_locust_or_gevent_in_the_shared_modules():
    """These modules run in the receiver, samplers and tests: no monkey-patching. Checked in a
    fresh interpreter, so a test that ran Locust in this process earlier cannot hide or fake it."""
    shared = ("loadgen.mix", "loadgen.payloads", "loadgen.recorder", "loadgen.spec", "loadgen.tracecontext",
              "rundir", "rundir.histograms", "rundir.request_record", "rundir.retention_policy")
    code = ("import sys\n" + "".join(f"import tailscope.{name}\n" for name in shared)
            + "print(sorted(m for m in ('locust', 'gevent') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _sizes(spec: PayloadSpec, n: int = 3000, seed: int = 3) -> np.ndarray:
    maker = PayloadMaker(spec, np.random.default_rng(seed))
    return np.array([len(maker.make()) for _ in range(n)])


def test_fixed_and_none_payloads():
    assert PayloadMaker(PayloadSpec(kind="none"), np.random.default_rng(1)).make() == b""
    fixed = PayloadMaker(PayloadSpec(kind="fixed", body='{"a": "é"}'), np.random.default_rng(1))
    assert fixed.make() == '{"a": "é"}'.encode()


def test_uniform_text_sizes_cover_the_range():
    sizes = _sizes(PayloadSpec(kind="random_text", size=SizeSpec(dist="uniform", min=10, max=20)))
    assert sizes.min() == 10 and sizes.max() == 20
    assert len(set(sizes.tolist())) == 11


def test_lognormal_sizes_have_the_median_and_are_clipped():
    spec = PayloadSpec(kind="random_bytes",
                       size=SizeSpec(dist="lognormal", median=500, sigma=1.0, min=50, max=4000))
    sizes = _sizes(spec, n=5000)
    assert np.median(sizes) == pytest.approx(500, rel=0.08)
    assert sizes.min() == 50 and sizes.max() == 4000


def test_random_text_is_words_and_varies_between_requests():
    maker = PayloadMaker(PayloadSpec(kind="random_text", size=SizeSpec(value=400)),
                         np.random.default_rng(5))
    bodies = [maker.make() for _ in range(50)]
    assert all(len(b) == 400 and re.fullmatch(rb"[a-z ]+", b) for b in bodies)
    assert len(set(bodies)) == 50
    assert maker.content_type.startswith("text/plain")


def test_json_text_is_valid_json_with_the_field():
    maker = PayloadMaker(PayloadSpec(kind="json_text", field='pro"mpt', size=SizeSpec(value=64)),
                         np.random.default_rng(5))
    document = json.loads(maker.make())
    assert list(document) == ['pro"mpt'] and len(document['pro"mpt']) == 64
    assert maker.content_type == "application/json"


def test_same_seed_same_bodies():
    spec = PayloadSpec(kind="random_bytes", size=SizeSpec(dist="uniform", min=1, max=100))
    first = PayloadMaker(spec, np.random.default_rng(9))
    again = PayloadMaker(spec, np.random.default_rng(9))
    assert [first.make() for _ in range(20)] == [again.make() for _ in range(20)]


def test_traceparent_is_valid_sampled_and_random():
    rng = random.Random(1)
    seen = set()
    for _ in range(1000):
        header, trace_id = new_traceparent(rng)
        match = TRACEPARENT.match(header)
        assert match and match.group(1) == trace_id
        assert set(trace_id) != {"0"} and set(match.group(2)) != {"0"}
        seen.add(trace_id)
    assert len(seen) == 1000


@pytest.mark.parametrize("rate", [0.0, 0.1, 0.5])
def test_head_sampling_flags_the_retention_rules_share_of_traces(rate):
    rng = random.Random(3)
    drawn = [new_traceparent(rng, rate) for _ in range(20_000)]
    flags = [header.rsplit("-", 1)[1] for header, _ in drawn]
    assert set(flags) <= {"00", "01"}
    assert [f == "01" for f in flags] == [trace_sampled(trace_id, rate) for _, trace_id in drawn]
    assert flags.count("01") / len(flags) == pytest.approx(rate, abs=0.015)
    assert all(new_traceparent(rng, 1.0)[0].endswith("-01") for _ in range(100))


class _ZeroFirst(random.Random):
    """Returns 0 for the first draw of each size, to exercise the non-zero rule."""

    def __init__(self):
        super().__init__(2)
        self._zeroed: set[int] = set()

    def getrandbits(self, k):
        if k not in self._zeroed:
            self._zeroed.add(k)
            return 0
        return super().getrandbits(k)


def test_traceparent_never_uses_all_zero_ids():
    header, trace_id = new_traceparent(_ZeroFirst())
    assert trace_id != "0" * 32
    assert "-0000000000000000-" not in header


def test_request_mix_follows_the_weights_and_injects_traceparent():
    classes = (
        RequestClass(name="small", path="/s", weight=3.0,
                     payload=PayloadSpec(kind="json_text", size=SizeSpec(value=10))),
        RequestClass(name="large", path="/l", weight=1.0, headers={"content-type": "x/y"},
                     payload=PayloadSpec(kind="random_text", size=SizeSpec(value=100))),
    )
    mix = RequestMix(classes, seed=4)
    drawn = [mix.draw_class() for _ in range(8000)]
    assert drawn.count(0) / len(drawn) == pytest.approx(0.75, abs=0.02)
    small, large = mix.prepare(0), mix.prepare(1)
    assert small.headers["Content-Type"] == "application/json"
    assert large.headers == {"content-type": "x/y", "traceparent": large.headers["traceparent"]}
    assert TRACEPARENT.match(small.headers["traceparent"]).group(1) == small.trace_id
    assert len(large.body) == 100 and large.cls.name == "large"
    again = RequestMix(classes, seed=4)
    assert [again.draw_class() for _ in range(100)] == drawn[:100]


def test_histogram_accuracy_is_the_one_stated_in_rundir_histograms():
    """The live recorder and the run files share one layout, and every duration in range
    reads back within ``RELATIVE_ERROR`` (±1 %), which is no wider than it needs to be."""
    assert hist.RELATIVE_ERROR == pytest.approx(0.00995, abs=1e-5)
    durations = np.unique(np.random.default_rng(3).integers(1_001, 10**13, 20_000))
    values_ms = np.array([bucket_value_ms(latency_bucket(int(d))) for d in durations])
    assert np.array_equal([latency_bucket(int(d)) for d in durations], hist.buckets_of(durations))
    error = np.abs(values_ms / (durations / 1e6) - 1)
    assert error.max() <= hist.RELATIVE_ERROR + 1e-12
    assert error.max() > 0.9 * hist.RELATIVE_ERROR  # the bound is reached, so it is the true width


def test_windowed_stats_percentiles_rate_and_lateness():
    stats = WindowedStats(window_s=5)
    base_s = 1_700_000_000
    latencies_ms = np.arange(1, 101)  # P50 = 50 ms, P99 = 99 ms
    for i, latency_ms in enumerate(latencies_ms):
        stats.add_due((base_s + 3) * 10**9 + i - int(latency_ms * 1e6), late=i < 10)
        stats.add((base_s + 3) * 10**9 + i, int(latency_ms * 1e6), error=i < 3)
    for i in range(7):
        stats.add_due((base_s + 4) * 10**9 + i - 1_000_000, late=False)
        stats.add((base_s + 4) * 10**9 + i, 1_000_000, error=False)
    live = stats.snapshot((base_s + 4) * 10**9 + 500_000_000)
    assert live.count == 107 and live.errors == 3
    assert live.rate_last_s == 100.0
    assert live.p99_ms == pytest.approx(99, rel=0.02)
    assert live.late_share == pytest.approx(10 / 107) and live.due == 107
    later = stats.snapshot((base_s + 8) * 10**9)  # the busy second left the window
    assert later.count == 7 and later.p50_ms == pytest.approx(1.0, rel=0.02)
    assert stats.snapshot((base_s + 20) * 10**9).p99_ms is None


def test_live_late_share_covers_the_requests_due_not_the_few_that_ended():
    """Long streams: in the first second 300 requests are due and sent on time, one 5 ms
    late; 3 have ended, the late one among them. The share is 1 of 300 due, not 1 of 3 ended."""
    stats = WindowedStats(window_s=10)
    t0 = 1_700_000_000 * 10**9
    for i in range(300):
        due = t0 + i * 3_000_000
        stats.add_due(due, late=i == 0)
    for i in range(3):
        stats.add(t0 + 900_000_000 + i, 900_000_000, error=False)
    live = stats.snapshot(t0 + 950_000_000)
    assert live.count == 3 and live.due == 300
    assert live.late_share == pytest.approx(1 / 300)


def test_recorder_writes_schema_rows_and_counts(tmp_path):
    path = tmp_path / schema.REQUESTS
    sink = Appender(path, schema.REQUESTS_SCHEMA)
    recorder = Recorder(sink, worker=3)
    t0 = 1_700_000_000 * 10**9
    recorder.record(RequestRecord(t0, t0 + 2_000_000, t0 + 9_000_000, t0 + 8_000_000, "a", 200, 10, 20,
                                  "ab" * 16, None, None))
    recorder.record(RequestRecord(t0 + 10**6, None, t0 + 50_000_000, None, "a", 0, 0, 0, None,
                                  "dropped", "not sent"))
    sink.close()
    table = read_stream(path, schema.REQUESTS_SCHEMA).table.to_pylist()
    assert [row["error_kind"] for row in table] == [None, "dropped"]
    assert table[0]["worker"] == 3 and table[0]["chunks"] == 0 and table[0]["max_gap_ns"] is None
    assert table[1]["sent_ns"] is None
    assert (recorder.recorded, recorder.completed, recorder.dropped, recorder.errors) == (2, 1, 1, 1)
    live = recorder.snapshot(t0 + 100_000_000)
    assert live.late_share == 1.0 and live.due == 1  # a dropped request (the sent one was never reported sent)
    recorder.sent(t0, t0 + 2_000_000)
    assert recorder.snapshot(t0 + 100_000_000).late_share == 1.0  # 2 ms late, and the dropped one
    assert live.p50_ms == pytest.approx(9.0, rel=0.02)
