"""Pure parsers of the signal samplers, on recorded file fixtures."""

from __future__ import annotations

import os

import pytest

from tailscope.signals.cgroup import (
    parse_cpu_v1,
    parse_cpu_v2,
    parse_memory_v1,
    parse_memory_v2,
    read_cgroup_values,
)
from tailscope.signals.gpu import GpuSampler, decode_clocks_event_reasons
from tailscope.signals.host import parse_diskstats, parse_meminfo, parse_proc_stat, physical_disks
from tailscope.signals.process import (
    ThreadSumCounter,
    parse_pid_io,
    parse_pid_stat,
    parse_status_blocked,
    parse_status_ctxt,
)
from tailscope.signals.psi import parse_pressure
from tailscope.signals.sampler import CLOCK_TICKS_PER_S
from tailscope.support.cgroups import CgroupLocation, locate_cgroups

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
V1 = os.path.join(FIXTURES, "cgroup_v1")
V2 = os.path.join(FIXTURES, "cgroup_v2")
PROC = os.path.join(FIXTURES, "proc")


def fixture(directory: str, name: str) -> str:
    with open(os.path.join(directory, name)) as fh:
        return fh.read()


# ----------------------------------------------------------------- cgroup v1


def test_cgroup_v1_cpu_with_quota():
    values = parse_cpu_v1(
        fixture(V1, "cpu.stat"), fixture(V1, "cpu.cfs_quota_us"),
        fixture(V1, "cpu.cfs_period_us"), fixture(V1, "cpuacct.usage"),
    )
    assert values == {
        "cgroup.cpu.nr_periods": 1520.0,
        "cgroup.cpu.nr_throttled": 734.0,
        "cgroup.cpu.throttled_ns": 61234567890.0,
        "cgroup.cpu.quota_us": 20000.0,
        "cgroup.cpu.period_us": 100000.0,
        "cgroup.cpu.limit_cores": 0.2,
        "cgroup.cpu.usage_ns": 105702181496.0,
    }


def test_cgroup_v1_cpu_missing_fields_and_unlimited_quota():
    values = parse_cpu_v1(fixture(V1, "cpu.stat.old_kernel"), fixture(V1, "cpu.cfs_quota_us.unlimited"), None)
    assert values == {"cgroup.cpu.nr_periods": 10.0, "cgroup.cpu.nr_throttled": 2.0, "cgroup.cpu.quota_us": -1.0}
    assert parse_cpu_v1(None, None, None, None) == {}


def test_cgroup_v1_memory():
    values = parse_memory_v1(
        fixture(V1, "memory.usage_in_bytes"), fixture(V1, "memory.limit_in_bytes"),
        fixture(V1, "memory.memsw.usage_in_bytes"),
    )
    assert values == {
        "cgroup.mem.current_bytes": 125386752.0,
        "cgroup.mem.max_bytes": 268435456.0,
        "cgroup.mem.swap_current_bytes": 10000000.0,
    }
    unlimited = parse_memory_v1(fixture(V1, "memory.usage_in_bytes"), fixture(V1, "memory.limit_in_bytes.unlimited"), None)
    assert unlimited == {"cgroup.mem.current_bytes": 125386752.0}


def test_cgroup_v1_locate_with_combined_controllers_and_mount_root():
    location = locate_cgroups(fixture(V1, "proc_cgroup"), fixture(V1, "mountinfo"))
    assert location.dirs == {
        "cpu": "/sys/fs/cgroup/cpu,cpuacct/docker/abc",
        "cpuacct": "/sys/fs/cgroup/cpu,cpuacct/docker/abc",
        "memory": "/sys/fs/cgroup/memory/abc",  # mount root /docker is stripped
    }
    assert location.version == "v1"
    assert location.paths["cpu,cpuacct"] == "/docker/abc"


def test_cgroup_v1_read_values_from_directory():
    location = CgroupLocation(dirs={"cpu": V1, "cpuacct": V1, "memory": V1}, versions={"cpu": 1, "cpuacct": 1, "memory": 1})
    values = read_cgroup_values(location)
    assert values["cgroup.cpu.throttled_ns"] == 61234567890.0
    assert values["cgroup.mem.current_bytes"] == 125386752.0


# ----------------------------------------------------------------- cgroup v2


def test_cgroup_v2_cpu_converts_microseconds_to_ns():
    values = parse_cpu_v2(fixture(V2, "cpu.stat"), fixture(V2, "cpu.max"))
    assert values == {
        "cgroup.cpu.usage_ns": 8123456000.0,
        "cgroup.cpu.nr_periods": 400.0,
        "cgroup.cpu.nr_throttled": 150.0,
        "cgroup.cpu.throttled_ns": 3500000000.0,
        "cgroup.cpu.quota_us": 50000.0,
        "cgroup.cpu.period_us": 100000.0,
        "cgroup.cpu.limit_cores": 0.5,
    }


def test_cgroup_v2_cpu_controller_disabled_and_unlimited():
    values = parse_cpu_v2(fixture(V2, "cpu.stat.controller_disabled"), fixture(V2, "cpu.max.unlimited"))
    assert values == {"cgroup.cpu.usage_ns": 8123456000.0, "cgroup.cpu.quota_us": -1.0, "cgroup.cpu.period_us": 100000.0}
    assert parse_cpu_v2(None, None) == {}


def test_cgroup_v2_memory():
    values = parse_memory_v2(
        fixture(V2, "memory.current"), fixture(V2, "memory.max"),
        fixture(V2, "memory.swap.current"), fixture(V2, "memory.events"),
    )
    assert values == {
        "cgroup.mem.current_bytes": 52428800.0,
        "cgroup.mem.max_bytes": 104857600.0,
        "cgroup.mem.swap_current_bytes": 4096000.0,
        "cgroup.mem.events.low": 0.0,
        "cgroup.mem.events.high": 12.0,
        "cgroup.mem.events.max": 7.0,
        "cgroup.mem.events.oom": 1.0,
        "cgroup.mem.events.oom_kill": 1.0,
        "cgroup.mem.events.oom_group_kill": 0.0,
    }
    unlimited = parse_memory_v2(fixture(V2, "memory.current"), fixture(V2, "memory.max.unlimited"), None, None)
    assert unlimited == {"cgroup.mem.current_bytes": 52428800.0}


def test_cgroup_v2_locate_unified():
    location = locate_cgroups(fixture(V2, "proc_cgroup"), fixture(V2, "mountinfo"))
    assert location.dirs == {
        "cpu": "/sys/fs/cgroup/system.slice/inference.service",
        "memory": "/sys/fs/cgroup/system.slice/inference.service",
    }
    assert location.version == "v2"


def test_cgroup_v2_read_values_from_directory():
    location = CgroupLocation(dirs={"cpu": V2, "memory": V2}, versions={"cpu": 2, "memory": 2})
    values = read_cgroup_values(location)
    assert values["cgroup.cpu.nr_throttled"] == 150.0
    assert values["cgroup.mem.events.oom_kill"] == 1.0


def test_locate_without_cgroup_mounts_is_empty():
    location = locate_cgroups(fixture(V1, "proc_cgroup"), "")
    assert location.dirs == {} and location.version == "none"


# ----------------------------------------------------------------- /proc


def test_proc_stat_modes_per_cpu_and_ctxt():
    text = (
        "cpu  100 20 30 400 50 6 4 2 0 0\n"
        "cpu0 60 10 20 200 25 3 2 1 0 0\n"
        "cpu1 40 10 10 200 25 3 2 1 0 0\n"
        "intr 12345 1 2 3\n"
        "ctxt 987654\n"
        "btime 1700000000\n"
    )
    totals, per_cpu, counts = parse_proc_stat(text.replace("btime", "procs_running 3\nprocs_blocked 1\nbtime"))
    tick = 1 / CLOCK_TICKS_PER_S
    assert totals["user"] == pytest.approx(120 * tick)
    assert totals["system"] == pytest.approx(40 * tick)
    assert totals["iowait"] == pytest.approx(50 * tick)
    assert totals["steal"] == pytest.approx(2 * tick)
    assert totals["idle"] == pytest.approx(400 * tick)
    assert [c["busy"] for c in per_cpu] == pytest.approx([(321 - 200 - 25) * tick, (291 - 200 - 25) * tick])
    assert per_cpu[0]["user"] == pytest.approx(70 * tick) and per_cpu[1]["system"] == pytest.approx(15 * tick)
    assert per_cpu[0]["iowait"] == pytest.approx(25 * tick) and per_cpu[1]["steal"] == pytest.approx(1 * tick)
    assert "idle" not in per_cpu[0]
    assert counts == {"ctxt": 987654, "procs_running": 3, "procs_blocked": 1}


def test_meminfo_in_bytes():
    info = parse_meminfo("MemTotal:       16000 kB\nMemAvailable:    4000 kB\nHugePages_Total:       0\n")
    assert info == {"MemTotal": 16000 * 1024, "MemAvailable": 4000 * 1024, "HugePages_Total": 0}


def test_pid_stat_with_spaces_and_parens_in_command_name():
    fields = ["S", "1", "1", "1", "0", "-1", "4194560", "100", "0", "7", "0", "250", "50"]
    fields += ["0", "0", "20", "0", "12", "0", "5000", "100000000", "2048"]
    text = "4242 (my (odd) name) " + " ".join(fields) + " 18446744073709551615\n"
    parsed = parse_pid_stat(text)
    assert parsed["major_faults"] == 7
    assert parsed["cpu_user_s"] == pytest.approx(250 / CLOCK_TICKS_PER_S)
    assert parsed["cpu_system_s"] == pytest.approx(50 / CLOCK_TICKS_PER_S)
    assert parsed["threads"] == 12
    assert parsed["rss_bytes"] == 2048 * os.sysconf("SC_PAGE_SIZE")


def test_status_context_switches():
    text = "Name:\tpython\nvoluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t9\n"
    assert parse_status_ctxt(text) == (150, 9)


def test_status_blocked_state_recorded_during_fsync():
    assert parse_status_blocked(fixture(PROC, "status_blocked"))  # recorded while a thread waited in fsync
    assert not parse_status_blocked("Name:\tpython\nState:\tS (sleeping)\n")
    assert not parse_status_blocked("Name:\tpython\n")


def test_pid_io_bytes():
    assert parse_pid_io(fixture(PROC, "pid_io")) == (0, 1052672)  # recorded after a 1 MiB write + fsync
    assert parse_pid_io("rchar: 5\n") == (0, 0)


def test_diskstats_sums_chosen_disks_in_bytes_and_seconds():
    values = parse_diskstats(fixture(PROC, "diskstats"), ["vda"])  # recorded: vda, loops and zram idle
    assert values == {"reads": 46520, "writes": 5367, "read_bytes": 1578338 * 512, "write_bytes": 2854360 * 512,
                      "in_flight": 0, "busy_s": pytest.approx(5.48), "queue_s": pytest.approx(18.706),
                      "flushes": 254}
    old_kernel = "   8       0 sda 10 0 80 5 20 0 160 7 1 30 12\n   8       1 sda1 9 0 72 5 20 0 160 7 0 29 12\n"
    both = parse_diskstats(old_kernel)
    assert both["reads"] == 19 and "flushes" not in both  # 11 fields: no flush counts
    assert parse_diskstats(old_kernel, ["sda"])["write_bytes"] == 160 * 512 and parse_diskstats(old_kernel, ["sda"])["in_flight"] == 1


def test_physical_disks_leave_out_virtual_devices(tmp_path):
    for name in ("vda", "nvme0n1", "loop0", "zram0", "dm-0", "ram1"):
        (tmp_path / name).mkdir()
    assert physical_disks(str(tmp_path)) == ["nvme0n1", "vda"]
    assert physical_disks(str(tmp_path / "absent")) == []


def test_thread_sum_counter_keeps_exited_threads():
    counter = ThreadSumCounter()
    assert counter.update({1: 10, 2: 5}) == 15
    assert counter.update({1: 12}) == 17  # thread 2 exited with 5
    assert counter.update({1: 12, 3: 1}) == 18


def test_pressure_totals():
    text = (
        "some avg10=3.07 avg60=1.50 avg300=1.85 total=10721763\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=42\n"
    )
    assert parse_pressure(text) == {"some": 10721763, "full": 42}
    assert parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n") == {"some": 5}


# ----------------------------------------------------------------- GPU (NVML boundary)


def test_clocks_event_reason_bits_decode():
    assert decode_clocks_event_reasons(0) == []
    assert decode_clocks_event_reasons(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert decode_clocks_event_reasons(0x1 | 0x1000) == ["gpu_idle", "bit_0x1000"]


class FakeNvmlError(Exception):
    pass


class FakeNvml:
    """The slice of pynvml GpuSampler uses; one device, power unsupported,
    and only the pre-12.x ``...ThrottleReasons`` name (exercises the fallback)."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_PERF_POLICY_POWER = 0
    NVML_PERF_POLICY_THERMAL = 1

    class _Util:
        gpu = 87

    class _Mem:
        used = 3 * 1024**3
        total = 80 * 1024**3

    class _Violation:
        def __init__(self, ns):
            self.referenceTime = 10**12
            self.violationTime = ns

    def __init__(self, fail_init: bool = False):
        self.fail_init = fail_init

    def nvmlInit(self):
        if self.fail_init:
            raise FakeNvmlError("Driver Not Loaded")

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("handle", index)

    def nvmlDeviceGetUtilizationRates(self, handle):
        return self._Util()

    def nvmlDeviceGetMemoryInfo(self, handle):
        return self._Mem()

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return {self.NVML_CLOCK_SM: 1410, self.NVML_CLOCK_MEM: 2619}[clock]

    def nvmlDeviceGetViolationStatus(self, handle, policy):
        if policy == self.NVML_PERF_POLICY_THERMAL:
            raise FakeNvmlError("Not Supported")
        return self._Violation({self.NVML_PERF_POLICY_POWER: 123_000_000}[policy])

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 71

    def nvmlDeviceGetPowerUsage(self, handle):
        raise FakeNvmlError("Not Supported")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return 0x4 | 0x20


def test_gpu_sampler_reads_metrics_and_decodes_reasons():
    sampler = GpuSampler(nvml=FakeNvml())
    assert sampler.probe() is None
    series = sampler.series()
    assert "gpu0.power_w" not in series  # unsupported metric left out
    assert series["gpu0.clocks_event.sw_power_cap"].unit == "bool"
    values = dict(sampler.read(0))
    assert values["gpu0.util_pct"] == 87.0
    assert values["gpu0.mem_used_bytes"] == float(3 * 1024**3)
    assert values["gpu0.sm_clock_mhz"] == 1410.0
    assert values["gpu0.temp_c"] == 71.0
    assert values["gpu0.clocks_event_reasons"] == float(0x24)
    assert values["gpu0.clocks_event.sw_power_cap"] == 1.0
    assert values["gpu0.clocks_event.sw_thermal_slowdown"] == 1.0
    assert values["gpu0.clocks_event.hw_slowdown"] == 0.0
    assert values["gpu0.mem_total_bytes"] == float(80 * 1024**3)
    assert values["gpu0.mem_clock_mhz"] == 2619.0
    assert values["gpu0.violation.power_ns"] == 123e6
    assert series["gpu0.violation.power_ns"].kind == "counter"
    assert "gpu0.violation.thermal_ns" not in series  # unsupported policy left out
    assert set(values) <= set(series)


def test_gpu_sampler_reports_nvml_error_as_reason():
    reason = GpuSampler(nvml=FakeNvml(fail_init=True)).probe()
    assert reason == "NVML unavailable: Driver Not Loaded"


def test_gpu_sampler_without_gpu_on_this_machine_degrades():
    sampler = GpuSampler()
    reason = sampler.probe()
    if reason is None:
        pytest.skip("this machine has a working NVML GPU")
    assert "\n" not in reason and reason


def test_find_line_int_matches_whole_key_at_line_start():
    from tailscope.signals.sampler import find_line_int

    text = "nr_free_pages 10\npswpin 3\npswpout 4\npgmajfault 7"
    assert find_line_int(text, "nr_free_pages ") == 10
    assert find_line_int(text, "pswpout ") == 4
    assert find_line_int(text, "pgmajfault ") == 7  # last line, no newline
    assert find_line_int(text, "wpin ") is None  # not at a line start
    assert find_line_int(text, "absent ") is None
