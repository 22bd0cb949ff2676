"""The sampler process and loop against real processes and the real /proc."""

from __future__ import annotations

import threading

import pytest
from signals_helpers import (
    StateWatcher,
    read_series,
    read_signals_meta,
    run_sampler_process,
    start_burner,
    start_fsync_writer,
    stop_process,
)

from tailscope.signals import SeriesMeta, default_samplers, run_sampling
from tailscope.signals.sampler import GAUGE


def test_sampler_process_watches_a_cpu_burner(tmp_path):
    burner = start_burner()
    try:
        rc = run_sampler_process(str(tmp_path), burner.pid, rate_hz=20, duration_s=1.5)
    finally:
        stop_process(burner)
    assert rc == 0  # SIGTERM: flush, close, exit 0
    meta = read_signals_meta(str(tmp_path))
    series = read_series(str(tmp_path))
    assert meta["rate_hz"] == 20
    assert meta["sources"]["process"] == {"available": True, "reason": None}
    assert meta["sources"]["host_cpu"]["available"]
    gpu = meta["sources"]["gpu"]
    assert gpu["available"] or (gpu["reason"] and "\n" not in gpu["reason"])
    for name in ("host.cpu.user_s", "host.ctxt", "host.load.1m", "host.mem.available_bytes",
                 "proc.cpu.user_s", "proc.rss_bytes", "proc.threads", "proc.runqueue_wait_ns",
                 "proc.ctxt.nonvoluntary", "proc.connections"):
        assert name in series, name
        assert name in meta["series"], name
    assert set(series) <= set(meta["series"])  # every stored series is described
    # Counters never go backwards.
    for name, values in series.items():
        if meta["series"][name]["kind"] == "counter":
            numbers = [v for _, v in values]
            assert numbers == sorted(numbers), name
    # The burner used CPU: at least 0.3 s of user time in ~1.5 s (one core is ~1.5 s).
    burner_cpu = series["proc.cpu.user_s"]
    assert burner_cpu[-1][1] - burner_cpu[0][1] >= 0.3
    assert series["host.cpu.user_s"][-1][1] > series["host.cpu.user_s"][0][1]
    assert 1.0 <= series["proc.threads"][-1][1] <= 4.0
    assert series["proc.rss_bytes"][-1][1] > 1e6
    # 20 Hz for ~1.5 s, minus interpreter start-up.
    assert 10 <= len(series["host.load.1m"]) <= 40


def test_sampler_sees_a_process_blocked_in_fsync(tmp_path):
    writer = start_fsync_writer(str(tmp_path))  # the test's own directory: a disk, not tmpfs, here
    (tmp_path / "run").mkdir()
    try:
        with StateWatcher(writer.pid) as watcher:
            rc = run_sampler_process(str(tmp_path / "run"), writer.pid, rate_hz=20, duration_s=2.0)
    finally:
        stop_process(writer)
    assert rc == 0
    meta = read_signals_meta(str(tmp_path / "run"))
    series = read_series(str(tmp_path / "run"))
    written = series["proc.io.write_bytes"]
    assert written[-1][1] - written[0][1] >= 4 << 20  # at least one 4 MiB write reached the counter
    assert meta["series"]["proc.threads_blocked"]["kind"] == GAUGE
    if not meta["sources"]["host_disk"]["available"]:
        pytest.skip(f"no disk statistics here: {meta['sources']['host_disk']['reason']}")
    disk = series["host.disk.write_bytes"]
    assert disk[-1][1] - disk[0][1] >= 4 << 20  # the fsyncs reached a disk
    blocked = [v for _, v in series["proc.threads_blocked"]]
    # How long fsync blocks is the host's disk's doing (a VM disk with a write-back cache returns at once).
    # With the writer in D for >= 20% of the test's own 1 kHz polls, 40 samples all missing it is < 1e-3.
    share_d = watcher.share("D")
    if share_d < 0.2:
        pytest.skip(f"fsync barely blocks on this host: the writer was in state D in {share_d:.0%} of 1 kHz polls")
    assert max(blocked) >= 1, f"the writer was never seen in state D while it fsynced ({share_d:.0%} of 1 kHz polls saw D)"


def test_sampler_without_pid_reports_why_process_sources_are_off(tmp_path):
    rc = run_sampler_process(str(tmp_path), None, rate_hz=10, duration_s=1.0)
    assert rc == 0
    meta = read_signals_meta(str(tmp_path))
    for source in ("process", "process_connections"):
        assert meta["sources"][source] == {"available": False, "reason": "no target pid given"}
    assert meta["sources"]["cgroup"] == {"available": False, "reason": "no target pid or cgroup given"}
    assert not any(name.startswith(("proc.", "cgroup.")) for name in read_series(str(tmp_path)))


class CountingSampler:
    """A sampler that emits its tick count, then fails on a chosen tick."""

    name = "counting"

    def __init__(self, fail_on_tick: int | None = None):
        self.fail_on_tick = fail_on_tick
        self.ticks = 0

    def probe(self):
        return None

    def series(self):
        return {"test.tick": SeriesMeta("count", GAUGE, "tick number")}

    def read(self, now_ns):
        self.ticks += 1
        if self.ticks == self.fail_on_tick:
            raise ProcessLookupError("target exited")
        return [("test.tick", float(self.ticks))]


class UnavailableSampler:
    name = "unavailable"

    def probe(self):
        return "not on this machine"

    def series(self):
        return {"test.never": SeriesMeta("count", GAUGE, "never emitted")}

    def read(self, now_ns):
        raise AssertionError("an unavailable sampler must not be read")


def _run_for(run_dir: str, samplers: list, rate_hz: float, duration_s: float):
    stop = threading.Event()
    timer = threading.Timer(duration_s, stop.set)
    timer.start()
    try:
        return run_sampling(run_dir, None, rate_hz, stop, samplers=samplers)
    finally:
        timer.cancel()


def test_schedule_uses_absolute_deadlines(tmp_path):
    summary = _run_for(str(tmp_path), [CountingSampler(), UnavailableSampler()], rate_hz=50, duration_s=1.0)
    ticks = read_series(str(tmp_path))["test.tick"]
    assert summary.ticks == len(ticks) and 45 <= len(ticks) + summary.missed_ticks <= 52
    # No drift: ticks stay on start + k / rate (k counts skipped ticks too), so a late
    # tick (a busy machine) does not push the ones after it.
    start = ticks[0][0]
    deviations = sorted(abs((t_ns - start) - round((t_ns - start) / 20e6) * 20e6) for t_ns, _ in ticks)
    assert deviations[len(deviations) // 2] < 5e6  # the median tick is on time
    if summary.missed_ticks == 0:
        last = ticks[-1][0] - (start + (len(ticks) - 1) * 20_000_000)
        assert abs(last) < 20_000_000, last  # ... and the last is where tick n-1 belongs
    meta = read_signals_meta(str(tmp_path))
    assert meta["sources"]["unavailable"] == {"available": False, "reason": "not on this machine"}
    assert "test.never" not in meta["series"]
    assert meta["series"]["test.tick"] == {"unit": "count", "kind": "gauge", "description": "tick number", "source": "counting"}
    sampling = meta["sampling"]
    assert sampling["ticks"] == summary.ticks and sampling["rows"] == summary.ticks
    assert 0 <= sampling["lateness_ms"]["p50"] <= sampling["lateness_ms"]["p99"] <= sampling["lateness_ms"]["max"]
    assert 0.9 <= sampling["wall_s"] <= 1.5 and 0 <= sampling["cpu_share_of_core"] < 1


def test_failing_sampler_is_disabled_and_reported(tmp_path):
    _run_for(str(tmp_path), [CountingSampler(fail_on_tick=3)], rate_hz=50, duration_s=0.3)
    ticks = read_series(str(tmp_path))["test.tick"]
    assert [v for _, v in ticks] == [1.0, 2.0]
    reason = read_signals_meta(str(tmp_path))["sources"]["counting"]
    assert reason["available"] is False and "target exited" in reason["reason"]


def test_default_samplers_have_unique_names_and_probe_without_raising():
    samplers = default_samplers(None)
    names = [s.name for s in samplers]
    assert len(names) == len(set(names))
    for sampler in samplers:
        reason = sampler.probe()
        assert reason is None or (isinstance(reason, str) and "\n" not in reason)


@pytest.fixture(autouse=True)
def _no_leaked_threads():
    before = set(threading.enumerate())
    yield
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive() and t.name == "tailscope-flusher"]
    assert not leaked
