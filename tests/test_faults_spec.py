"""Fault declarations: the command-line form, scenario sections with located errors, the agent protocol."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest

from tailscope.faults.injector import FaultSpec, FaultSpecError, Injector, TargetInfo
from tailscope.faults.registry import INJECTORS, build_spec, parse_fault_option
from tailscope.faults.schedule import FaultSchedule
from tailscope.scenario_model.scenario import ScenarioError, parse_scenario

BASE_SCENARIO = """\
name: faulty
target: http://127.0.0.1:8000
duration: 20s
arrival: {process: poisson, rate: 10}
classes:
  - {name: t, path: /v1/infer/text}
"""


def test_command_line_form_fills_defaults_and_converts_units():
    spec = parse_fault_option("cpu_throttle:at=10s,duration=1.5m,cpus=0.3")
    assert spec == FaultSpec("cpu_throttle", 10.0, 90.0, {"cpus": 0.3, "period_ms": 100.0})
    assert parse_fault_option("gc_pressure:duration=5s").at_s == 0.0


@pytest.mark.parametrize("text, field, message", [
    ("nope:duration=1s", "kind", "unknown fault kind 'nope'"),
    ("cpu_throttle:at=3s", "duration", "missing"),
    ("cpu_throttle:duration=2s,cpus=0", "params.cpus", "must be >= 0.01"),
    ("cpu_throttle:duration=2s,cpu=1", "params.cpu", "unknown parameter"),
    ("overload:duration=2s,retries=1.5", "params.retries", "expected an integer"),
    ("io_stall:duration=fast", "duration", "expected a duration"),
    ("io_stall:duration=2s,kb", "kb", "expected NAME=VALUE"),
    ("cpu_contention:duration=2s,placement=inside", "params.placement", "expected one of beside, target"),
    ("memory_swap:duration=2s,victim=harness", "params.victim", "expected one of target, neighbour"),
])
def test_command_line_errors_name_the_field(text, field, message):
    with pytest.raises(FaultSpecError) as caught:
        parse_fault_option(text)
    assert caught.value.field == field and message in caught.value.message


def test_every_kind_declares_its_needs_and_params_with_valid_defaults():
    assert set(INJECTORS) == {"cpu_throttle", "cpu_contention", "memory_swap", "gc_pressure", "overload", "io_stall",
                              "llm_long_generations", "llm_prompt_storm", "llm_overload"}
    for kind, cls in INJECTORS.items():
        assert cls.kind == kind and cls.summary and cls.requires
        assert build_spec(kind, 0, 1, {}).params == {name: p.default for name, p in cls.params.items()}


def test_scenario_faults_section_is_parsed_into_specs():
    scenario = parse_scenario(BASE_SCENARIO + """\
faults:
  - kind: cpu_throttle
    at: 5s
    duration: 3s
    params: {cpus: 0.5}
  - {kind: overload, duration: 2s}
""", "lab.yaml")
    assert scenario.sections["faults"] == [
        FaultSpec("cpu_throttle", 5.0, 3.0, {"cpus": 0.5, "period_ms": 100.0}),
        build_spec("overload", 0.0, 2.0, {}),
    ]


def test_a_fault_may_be_declared_a_distraction_and_says_so_in_its_ground_truth(tmp_path):
    scenario = parse_scenario(BASE_SCENARIO + """faults:
  - {kind: cpu_contention, at: 5s, duration: 3s, params: {placement: target}}
  - {kind: memory_swap, at: 5s, duration: 3s, role: distraction, params: {victim: neighbour}}
""", "lab.yaml")
    cause, distraction = scenario.sections["faults"]
    assert (cause.role, distraction.role) == ("cause", "distraction")
    assert FaultSpec.from_dict(distraction.as_dict()) == distraction
    with pytest.raises(FaultSpecError, match="expected one of cause, distraction"):
        build_spec("gc_pressure", 0, 1, {}, role="bystander")
    schedule, events = _schedule(_Recorder(FaultSpec("recorder", 0.0, 0.1, {}, role="distraction"),
                                           TargetInfo(None, None, "t", str(tmp_path))))
    import time

    schedule.start(time.time_ns())
    assert schedule.wait(5) and schedule.shutdown() == []
    assert events[0][4]["role"] == "distraction"


@pytest.mark.parametrize("section, where", [
    ("faults:\n  - {kind: cpu_throttle, at: 1s, duration: 2s, params: {cpus: -1}}\n",
     "lab.yaml:8: faults[0].params.cpus: must be >= 0.01"),
    ("faults:\n  - {kind: cpu_throttle, at: 1s}\n", "lab.yaml:8: faults[0]: duration: missing"),
    ("faults:\n  - {kind: bogus, duration: 1s}\n", "lab.yaml:8: faults[0].kind: unknown fault kind"),
    ("faults:\n  - {kind: gc_pressure, duration: 1s, when: 3}\n", "faults[0].when: unknown field"),
    ("faults: {kind: gc_pressure}\n", "lab.yaml:7: faults: expected a list"),
])
def test_scenario_fault_errors_carry_file_line_and_field(section, where):
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(BASE_SCENARIO + section, "lab.yaml")
    assert where in str(caught.value)


class _Recorder(Injector):
    """A test double at the injector boundary: records calls, optionally fails in apply."""

    kind = "recorder"
    summary = requires = "test"

    def __init__(self, spec, target, fail_apply=False):
        super().__init__(spec, target)
        self.calls = []
        self.fail_apply = fail_apply

    def apply(self):
        self.calls.append("apply")
        if self.fail_apply:
            raise OSError("injected failure")
        return {"applied": True}

    def revert(self):
        self.calls.append("revert")
        return {"observed": 1}

    def cleanup(self):
        self.calls.append("cleanup")


def _schedule(*injectors):
    events = []
    return FaultSchedule(list(injectors), lambda *event: events.append(event)), events


def test_schedule_records_actual_windows_and_cleans_up(tmp_path):
    import time

    target = TargetInfo(None, None, "t", str(tmp_path))
    injector = _Recorder(FaultSpec("recorder", 0.2, 0.3, {}), target)
    schedule, events = _schedule(injector)
    t0 = time.time_ns()
    schedule.start(t0)
    assert schedule.wait(5)
    assert schedule.shutdown() == [] and schedule.errors == []
    (kind, start, end, source, attributes), = events
    assert kind == "fault" and source == "tailscope.faults.recorder"
    assert 0.19 <= (start - t0) / 1e9 < 0.4 and 0.29 <= (end - start) / 1e9 < 0.6
    assert attributes["mechanism"] == {"applied": True} and attributes["observed"] == {"observed": 1}
    assert attributes["cut_short"] is False and attributes["error"] is None
    assert injector.calls == ["apply", "revert", "cleanup"]


def test_schedule_cuts_an_active_fault_short_and_records_a_failed_apply(tmp_path):
    import time

    target = TargetInfo(None, None, "t", str(tmp_path))
    long_one = _Recorder(FaultSpec("recorder", 0.0, 60.0, {}), target)
    failing = _Recorder(FaultSpec("recorder", 0.0, 1.0, {}), target, fail_apply=True)
    never = _Recorder(FaultSpec("recorder", 50.0, 1.0, {}), target)
    schedule, events = _schedule(long_one, failing, never)
    schedule.start(time.time_ns())
    time.sleep(0.3)
    assert schedule.shutdown() == []
    assert schedule.errors == ["recorder: apply: injected failure"]
    by_error = {e[4]["error"] is None: e[4] for e in events}
    assert by_error[True]["cut_short"] is True
    assert "apply failed: injected failure" in by_error[False]["error"]
    assert long_one.calls == ["apply", "revert", "cleanup"]
    assert never.calls == ["cleanup"]


def test_agent_reports_a_setup_error_before_any_load_and_creates_nothing(tmp_path):
    faults = json.dumps([build_spec("gc_pressure", 0, 1, {}).as_dict()])
    agent = subprocess.run(
        [sys.executable, "-m", "tailscope.faults.fault_agent", "--run-dir", str(tmp_path), "--faults", faults,
         "--run-id", "t", "--target-url", "http://127.0.0.1:9"],
        input=b"", capture_output=True, timeout=60)
    assert agent.returncode == 2
    assert agent.stdout.decode().startswith("ERROR GET http://127.0.0.1:9/admin/state")
    table = pa.ipc.open_stream(tmp_path / "events.faults.arrow").read_all()
    assert table.num_rows == 0
