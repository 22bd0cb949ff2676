"""Time-varying arrival schedules (steps, ramps, periodic), replayed arrival
logs and the data files behind them: statistical checks on generated
schedules, exactness of the time warp, located errors for bad files."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tailscope.loadgen.arrivals import cumulative_rate_inverse, expected_arrivals, rate_at, schedule_offsets_ns
from tailscope.loadgen.datafiles import DataFileError, load_arrival_log
from tailscope.loadgen.spec import ArrivalLog, ArrivalSpec, RateProfile, SpecError
from tailscope.scenario_model.scenario import ScenarioError, parse_scenario

NS = 1e9


def offsets_s(spec: ArrivalSpec, duration_s: float, seed: int = 3, max_requests: int = 10**7) -> np.ndarray:
    return np.concatenate(list(schedule_offsets_ns(spec, duration_s, max_requests, seed))) / NS


def cumulative(profile: RateProfile, t: np.ndarray) -> np.ndarray:
    """Λ(t) by fine numerical integration (independent of the code under test)."""
    grid = np.linspace(0, t.max(), 200_001)
    rates = rate_at(profile, grid)
    lam = np.concatenate(([0.0], np.cumsum((rates[1:] + rates[:-1]) / 2 * np.diff(grid))))
    return np.interp(t, grid, lam)


STEPS = RateProfile("steps", steps=((10, 50), (5, 0), (10, 200)))


def test_steps_hold_each_rate_and_pause_at_zero():
    times = offsets_s(ArrivalSpec("poisson", rate=200, profile=STEPS), 30)
    counts = np.histogram(times, bins=[0, 10, 15, 25, 30])[0]
    expected = np.array([500, 0, 2000, 1000])  # the last rate holds after the last step
    assert counts[1] == 0
    nonzero = expected > 0
    assert np.all(np.abs(counts[nonzero] - expected[nonzero]) < 4 * np.sqrt(expected[nonzero]))


def test_nonhomogeneous_poisson_rescaled_gaps_are_unit_exponential():
    """Time-rescaling theorem: Λ(t_i) − Λ(t_{i−1}) ~ Exp(1) for an NHPP with rate λ(t)."""
    profile = RateProfile("periodic", mean=100, amplitude=80, period_s=7)
    times = offsets_s(ArrivalSpec("poisson", rate=180, profile=profile), 60)
    gaps = np.diff(cumulative(profile, times))
    assert stats.kstest(gaps, "expon").pvalue > 0.01
    # and the raw gaps are not exponential with the mean rate (the profile matters)
    assert stats.kstest(np.diff(times) * 100, "expon").pvalue < 1e-6


def test_periodic_profile_follows_the_sine_by_phase():
    profile = RateProfile("periodic", mean=200, amplitude=150, period_s=4)
    times = offsets_s(ArrivalSpec("poisson", rate=350, profile=profile), 80)
    phase_bins = np.linspace(0, 4, 9)
    observed = np.histogram(times % 4, bins=phase_bins)[0]
    per_period = np.diff(cumulative(profile, phase_bins))
    expected = per_period * 20
    chi2 = np.sum((observed - expected) ** 2 / expected)
    assert stats.chi2.sf(chi2, len(observed) - 1) > 0.001
    assert observed.max() > 5 * observed.min()  # amplitude 150 of 200: strongly periodic


def test_constant_process_with_a_ramp_sends_where_the_expected_count_crosses_each_integer():
    profile = RateProfile("ramp", start_rate=10, end_rate=110, ramp_s=20)
    times = offsets_s(ArrivalSpec("constant", rate=110, profile=profile), 25)
    lam = np.where(times > 20, 10 * 20 + 2.5 * 400 + 110 * (times - 20), 10 * times + 2.5 * times**2)
    assert np.allclose(lam, np.arange(len(times)), atol=1e-6 * 110)
    assert len(times) == int(np.ceil(expected_arrivals(ArrivalSpec("constant", rate=110, profile=profile), 25)))


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_gamma_with_a_profile_keeps_its_burstiness_in_operational_time(burstiness):
    profile = RateProfile("steps", steps=((20, 100), (20, 400)))
    times = offsets_s(ArrivalSpec("gamma", rate=400, burstiness=burstiness, profile=profile), 40)
    gaps = np.diff(cumulative(profile, times))
    assert np.mean(gaps) == pytest.approx(1.0, rel=0.05)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1 / np.sqrt(burstiness), rel=0.1)


def test_inverse_of_the_piecewise_linear_cumulative_is_exact():
    profile = RateProfile("steps", steps=((1.5, 40), (2, 0), (1, 7)))
    inverse = cumulative_rate_inverse(profile)
    u = np.array([0.0, 1.0, 59.999, 60.0, 60.5, 67.0, 70.0])
    t = inverse(u)
    assert t[0] == 0 and t[1] == pytest.approx(1 / 40)
    assert t[3] == pytest.approx(1.5)  # reaches 60 at the end of the first step...
    assert t[4] == pytest.approx(3.5 + 0.5 / 7)  # ...then the zero-rate gap is skipped
    assert t[6] == pytest.approx(3.5 + 10 / 7)  # after the last knot the last rate holds


def test_profiles_are_seeded():
    spec = ArrivalSpec("poisson", rate=50, profile=RateProfile("ramp", start_rate=5, end_rate=50, ramp_s=10))
    a, b = offsets_s(spec, 20, seed=9), offsets_s(spec, 20, seed=9)
    assert np.array_equal(a, b) and not np.array_equal(a, offsets_s(spec, 20, seed=10))


@pytest.mark.parametrize("kwargs, field", [
    ({"kind": "steps"}, "steps"),
    ({"kind": "steps", "steps": ((0, 5),)}, "steps.0.for"),
    ({"kind": "steps", "steps": ((5, 0),)}, "steps"),
    ({"kind": "ramp", "start_rate": 1, "end_rate": 2, "ramp_s": 0}, "over"),
    ({"kind": "periodic", "mean": 10, "amplitude": 11, "period_s": 5}, "amplitude"),
    ({"kind": "wave"}, "kind"),
])
def test_bad_profiles_name_the_field(kwargs, field):
    with pytest.raises(SpecError) as exc:
        RateProfile(**kwargs)
    assert exc.value.field == field


# -- replay -------------------------------------------------------------------

def test_replay_timestamps_are_relative_to_the_first_and_sped_up(tmp_path):
    log = tmp_path / "arrivals.txt"
    log.write_text("# epoch seconds\n1700000000.000\n1700000000.250\n\n1700000001.000\n")
    offsets = load_arrival_log(log)
    assert offsets.tolist() == [0, 250_000_000, 1_000_000_000]
    spec = ArrivalSpec("replay", log=ArrivalLog(str(log), offsets), speed=2.0)
    assert offsets_s(spec, 10).tolist() == [0.0, 0.125, 0.5]
    looped = ArrivalSpec("replay", log=ArrivalLog(str(log), offsets), loop=True)
    # period = span (1 s) + mean gap (0.5 s)
    assert offsets_s(looped, 3.2).tolist() == pytest.approx([0, 0.25, 1.0, 1.5, 1.75, 2.5, 3.0, 3.25][:7])
    assert expected_arrivals(looped, 3.2) == 7


def test_replay_gaps_in_milliseconds(tmp_path):
    log = tmp_path / "gaps.txt"
    log.write_text("0\n10\n5.5\n")
    assert load_arrival_log(log, "gaps", "ms").tolist() == [0, 10_000_000, 15_500_000]


@pytest.mark.parametrize("text, fmt, line, message", [
    ("1\n2\nabc\n", "timestamps", 3, "expected a number"),
    ("5\n4\n", "timestamps", 2, "must not decrease"),
    ("1\n-2\n", "gaps", 2, "gap must be >= 0"),
    ("# only a comment\n", "timestamps", 0, "no arrivals"),
])
def test_bad_arrival_logs_name_file_and_line(tmp_path, text, fmt, line, message):
    log = tmp_path / "bad.txt"
    log.write_text(text)
    with pytest.raises(DataFileError) as exc:
        load_arrival_log(log, fmt)
    assert exc.value.line == line and message in str(exc.value)
    assert str(exc.value).startswith(f"{log}:{line}: " if line else f"{log}: ")


SCENARIO = """\
target: http://127.0.0.1:9
duration: 30s
arrival:
{arrival}
classes:
  - name: a
    path: /
"""


def scenario_at(tmp_path, arrival: str):
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO.format(arrival=arrival))
    return path


def load(path):
    return parse_scenario(path.read_text(), str(path))


def test_scenario_profiles_and_replay_parse(tmp_path):
    steps = load(scenario_at(tmp_path, "  process: poisson\n  profile:\n    kind: steps\n"
                                       "    steps: [{rate: 10, for: 5s}, {rate: 40, for: 1m}]"))
    assert steps.arrival.profile.steps == ((5.0, 10.0), (60.0, 40.0)) and steps.arrival.rate == 40
    ramp = load(scenario_at(tmp_path, "  process: constant\n  profile: {kind: ramp, from: 1, to: 9}"))
    assert ramp.arrival.profile.ramp_s == 30.0  # over defaults to the run's duration
    periodic = load(scenario_at(tmp_path, "  rate: 50\n  profile: {kind: periodic, amplitude: 20, period: 10m}"))
    assert periodic.arrival.profile.period_s == 600 and periodic.arrival.profile.mean == 50
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.txt").write_text("0\n0.5\n")
    replay = load(scenario_at(tmp_path, "  process: replay\n  file: logs/a.txt\n  speed: 2\n  loop: true"))
    assert replay.arrival.log.offsets_ns.tolist() == [0, 500_000_000] and replay.arrival.speed == 2
    assert replay.arrival.describe()["arrivals"] == 2


@pytest.mark.parametrize("arrival, where, message", [
    ("  process: replay\n  file: missing.txt", ":5: arrival.file: ", "cannot read"),
    ("  process: poisson\n  rate: 5\n  file: x.txt", ":6: arrival.file: ", "only for `process: replay`"),
    ("  rate: 5\n  profile: {kind: periodic, amplitude: 9}", ":5: arrival.profile: ", "period: missing"),
    ("  profile: {kind: ramp, from: 1, to: 2, over: 0s}", ":4: arrival.profile.over: ", "must be > 0"),
    ("  process: closed\n  users: 2\n  profile: {kind: ramp, from: 1, to: 2}", ":6: arrival.profile: ",
     "open-loop process"),
])
def test_scenario_arrival_errors_are_located(tmp_path, arrival, where, message):
    path = scenario_at(tmp_path, arrival)
    with pytest.raises(ScenarioError) as exc:
        load(path)
    assert where in str(exc.value) and message in str(exc.value), str(exc.value)


def test_a_bad_line_in_the_arrival_log_is_named_with_the_scenario_field(tmp_path):
    (tmp_path / "a.txt").write_text("0\n1\nnope\n")
    path = scenario_at(tmp_path, "  process: replay\n  file: a.txt")
    with pytest.raises(ScenarioError) as exc:
        load(path)
    assert str(exc.value) == (f"{path}:5: arrival.file: {tmp_path / 'a.txt'}:3: expected a number (s), "
                              "got 'nope'")
