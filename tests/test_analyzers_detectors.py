"""Contract tests over every cause detector, on seeded synthetic runs with named, injected faults.

Each detector must: never fire on a clean run, fire (and rank first) on its own
fault, and stay quiet on every other fault. Faults without a detector
(network delay, a slow postprocess) must come out ``unexplained``. The
BARO-style baseline ranker is checked on the same runs.

The contract every *registered* detector keeps (the end of this file) runs over
``DETECTORS`` itself, so a new detector is held to it without editing a test:
it declares its kind, the fault kinds it answers and the series it reads; a
seeded synthetic run with its fault gets its kind as the top cause; a control
run gets none; and every table derived from the declarations covers it.

Confounded runs (``SPIKE_DISTRACTIONS``, ``DISTRACTIONS`` in testkit/synthetic.py):
the target's own cause and another process's trouble at once; the cause the
declarations give the spike's own fault ranks first (for every registered
detector beside every distraction), and host-wide evidence alone names no cause.
"""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.causes.baro import SERIES_KINDS, derived_series, kind_of
from tailscope.analyzers.causes.detect_cpu_contention import neighbour_at_baseline
from tailscope.analyzers.causes.kit import HOST_ONLY_CAP, SignalEvidence, host_allowance, owned_strongest
from tailscope.analyzers.causes.protocol import Detector, DetectorRegistry, SpikeContext, available_inputs
from tailscope.analyzers.causes.registry import (
    CAUSE_KINDS,
    DETECTORS,
    all_detectors,
    cause_names_by_fault,
    cause_of_fault,
    default_registry,
    detectors_by_fault,
)
from tailscope.analyzers.inputs.records import request_arrays
from tailscope.analyzers.inputs.run_inputs import RunInputs
from tailscope.analyzers.inputs.signal_index import Contrast
from tailscope.analyzers.spikes.detection import decompose
from tailscope.analyzers.stages.decomposition import stage_matrix
from tailscope.faults.registry import INJECTORS
from tailscope.lab.plan import LAB_PARAMS
from tailscope.lab.scoring import CAUSE_ALIASES, names_fault
from tailscope.rundir import load_run
from tailscope.support.cause_words import CAUSE_TITLES
from tailscope.testkit.synthetic import (
    DISTRACTIONS,
    SIGNAL_FOOTPRINTS,
    SPIKE_DISTRACTIONS,
    SPIKE_FAULTS,
    SPIKE_KINDS,
    write_synthetic_run,
)

FAULT_KINDS = ("gc", "stall", "throttle", "cpu", "swap", "io", "queue", "gpu", "generator", "kv_cache",
               "prefill")
UNEXPLAINED_KINDS = ("network", "postprocess")
FIRES = 0.5


@pytest.fixture(scope="module")
def fault_runs(tmp_path_factory):
    """{kind: (truth, analysis, baro analysis)} for one 40 s, 50 req/s run per fault kind."""
    out = {}
    for i, kind in enumerate(FAULT_KINDS + UNEXPLAINED_KINDS):
        path = tmp_path_factory.mktemp("faults") / kind
        truth = write_synthetic_run(path, duration_s=40, rate=50, seed=100 + i,
                                    spikes=[{"kind": kind, "at_s": 18, "duration_s": 4, "extra_ms": 80}])
        out[kind] = (truth, analyze_run(path), analyze_run(path, method="baro"))
    return out


def _only_spike(analysis):
    assert len(analysis["spikes"]) == 1, [(s["start_ns"], s["p99_ms"]) for s in analysis["spikes"]]
    return analysis["spikes"][0]


def test_every_cause_kind_has_one_detector():
    names = [d.name for d in all_detectors()]
    assert names == list(CAUSE_KINDS[:-1]) and len(set(names)) == len(names)
    registry = default_registry()
    assert [d.name for d in registry.detectors()] == names
    assert default_registry() is not registry  # nothing global


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_detector_fires_on_its_own_fault_and_ranks_first(fault_runs, kind):
    truth, analysis, _ = fault_runs[kind]
    spike = _only_spike(analysis)
    injected = truth["spikes"][0]
    assert spike["start_ns"] <= injected["start_ns"] + 10**9 and spike["end_ns"] >= injected["end_ns"] - 10**9
    top = spike["causes"][0]
    assert top["kind"] == SPIKE_KINDS[kind][1] == injected["expected_cause"]
    assert top["confidence"] >= 0.8
    summary = top["evidence"]["summary"]
    assert any(ch.isdigit() for ch in summary), summary  # evidence carries numbers


@pytest.mark.parametrize("kind", FAULT_KINDS + UNEXPLAINED_KINDS)
def test_other_detectors_stay_quiet(fault_runs, kind):
    _, analysis, _ = fault_runs[kind]
    spike = _only_spike(analysis)
    expected = SPIKE_KINDS[kind][1]
    fired = [c["kind"] for c in spike["causes"] if c["kind"] != "unexplained"]
    assert fired == ([] if expected == "unexplained" else [expected])


@pytest.mark.parametrize("kind", UNEXPLAINED_KINDS)
def test_faults_without_a_detector_are_unexplained_with_the_grown_stage(fault_runs, kind):
    _, analysis, _ = fault_runs[kind]
    cause = _only_spike(analysis)["causes"][0]
    assert cause["kind"] == "unexplained"
    evidence = cause["evidence"]
    stage = "outside_server" if kind == "network" else "postprocess"
    assert evidence["decomposition"]["dominant_stage"] == stage
    # 8 of 11 detectors had inputs (no GPU series, no server metrics), none was tempted: confidence 8/11
    assert evidence["coverage"] == pytest.approx(8 / 11)
    assert cause["confidence"] == pytest.approx(8 / 11, abs=0.05)


def test_unexplained_is_weak_when_signals_are_missing(tmp_path):
    write_synthetic_run(tmp_path / "bare", duration_s=40, rate=50, seed=7, with_signals=False,
                        spikes=[{"kind": "postprocess", "at_s": 18, "duration_s": 4, "extra_ms": 80}])
    cause = _only_spike(analyze_run(tmp_path / "bare"))["causes"][0]
    assert cause["kind"] == "unexplained"
    # without signals only gc (events), process_stall and queue_saturation (spans) and generator could look
    assert set(cause["evidence"]["detectors_without_inputs"]) == {
        "cpu_throttling", "cpu_contention", "swap", "io_stall", "kv_cache_pressure", "prefill_interference",
        "gpu_throttling"}
    assert cause["confidence"] == pytest.approx(4 / 11, abs=0.05)


def _clean_context(path, start_s: float, length_s: float) -> SpikeContext:
    """A pretend spike over a quiet stretch of a clean run, as find_spikes would build it."""
    run = load_run(path)
    req = request_arrays(run.requests)
    matrix = stage_matrix(req, run.spans)
    origin = int(req.scheduled_ns.min())
    lo, hi = origin + int(start_s * 1e9), origin + int((start_s + length_s) * 1e9)
    inside = (req.scheduled_ns >= lo) & (req.scheduled_ns < hi)
    threshold = float(np.quantile(req.latency_ms[req.in_latency], 0.99))
    slow = np.flatnonzero(inside & req.is_ok & (req.latency_ms > np.quantile(req.latency_ms[inside & req.is_ok], 0.8)))
    normal = np.flatnonzero(req.is_ok & ~inside)
    inputs = RunInputs(run, req, matrix, origin, int(req.end_ns.max()), threshold, [(lo, hi)])
    return SpikeContext(run, lo, hi, (lo + hi) // 2, slow, normal, decompose(slow, normal, matrix, req.n),
                        available_inputs(run), inputs, threshold)


def test_contention_by_displacement_needs_a_neighbour_running_at_baseline(tmp_path):
    """The saturated-host branch of cpu_contention (the target waited without doing more work)
    counts only where other processes held CPU at baseline: with others at 0.05 cores throughout
    (the real vLLM CPU build alone on 2 cores) nobody could have displaced the target; from 0.3
    cores (OTHERS_CORES_MATERIAL) a neighbour was there. Without the host's CPU series it cannot
    tell, and the branch counts as before."""
    path = tmp_path / "clean"
    write_synthetic_run(path, duration_s=40, rate=50, seed=3)
    ctx = _clean_context(path, 18.0, 3.0)
    bins = len(ctx.inputs.binned("host.cpu.user_s"))
    alone, half, neighbour = (np.full(bins, cores) for cores in (0.05, 0.225, 0.4))
    assert neighbour_at_baseline(ctx, alone) == 0.0
    assert neighbour_at_baseline(ctx, half) == pytest.approx(0.5, abs=0.01)
    assert neighbour_at_baseline(ctx, neighbour) == 1.0 and neighbour_at_baseline(ctx, None) == 1.0


@pytest.mark.parametrize("seed", [1, 2])
def test_no_detector_fires_on_a_clean_run(tmp_path, seed):
    path = tmp_path / "clean"
    write_synthetic_run(path, duration_s=40, rate=50, seed=seed, gpu=True)
    assert analyze_run(path)["spikes"] == []
    for start in (5.0, 18.0, 30.0):
        ctx = _clean_context(path, start, 3.0)
        for detector in all_detectors():
            finding = detector.score(ctx)
            assert finding is None or finding.confidence < FIRES, (detector.name, start, finding)


def test_registry_skips_detectors_whose_inputs_are_missing(tmp_path):
    write_synthetic_run(tmp_path / "nospans", duration_s=40, rate=50, seed=3, with_spans=False,
                        spikes=[{"kind": "throttle", "at_s": 18, "duration_s": 4, "extra_ms": 80}])
    spike = _only_spike(analyze_run(tmp_path / "nospans"))
    assert spike["causes"][0]["kind"] == "cpu_throttling"
    registry = DetectorRegistry()
    assert registry.eligible(frozenset({"signals"})) == []


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_baro_baseline_uses_the_same_shape(fault_runs, kind):
    _, _, baro = fault_runs[kind]
    spike = _only_spike(baro)
    assert baro["spike_detection"]["method"] == "baro"
    causes = spike["causes"]
    assert causes and all(set(c) == {"kind", "confidence", "evidence"} for c in causes)
    assert [c["confidence"] for c in causes] == sorted((c["confidence"] for c in causes), reverse=True)
    assert causes[0]["evidence"]["method"] == "baro" and causes[0]["evidence"]["top_series"]
    # synthetic faults move their own signals cleanly: the baseline ranks them first too
    assert causes[0]["kind"] == SPIKE_KINDS[kind][1]


# -- The contract of every registered detector --------------------------------------------------

def _spike_kind_of(detector_kind: str) -> str:
    """The synthetic spike whose fault the detector answers (exactly one, confounded kinds aside)."""
    spikes = [spike for spike, (_, cause, _) in SPIKE_KINDS.items()
              if cause == detector_kind and spike not in SPIKE_DISTRACTIONS]
    assert len(spikes) == 1, (detector_kind, spikes)
    return spikes[0]


@pytest.fixture(scope="module")
def control_run(tmp_path_factory):
    """(analysis, pretend-spike contexts) of a clean run with GPU and LLM-server series: no fault anywhere."""
    path = tmp_path_factory.mktemp("control") / "run"
    write_synthetic_run(path, duration_s=40, rate=50, seed=11, gpu=True, llm=True)
    return analyze_run(path), [_clean_context(path, start, 3.0) for start in (5.0, 18.0, 30.0)]


@pytest.mark.parametrize("kind", DETECTORS.names())
def test_registered_detector_declares_kind_answers_and_reads(kind):
    detector = DETECTORS[kind]
    declared = vars(detector)
    assert {"kind", "answers", "reads", "needs"} <= set(declared), f"{detector.__name__} must declare them itself"
    assert detector.kind == kind and detector().name == kind and isinstance(detector(), Detector)
    for field in ("answers", "reads", "needs", "aliases"):
        values = getattr(detector, field)
        assert isinstance(values, tuple) and all(isinstance(v, str) and v for v in values), (field, values)
    assert detector.answers and detector.reads
    assert kind not in detector.aliases and not set(detector.aliases) & set(CAUSE_KINDS)


@pytest.mark.parametrize("kind", DETECTORS.names())
def test_registered_detector_names_its_seeded_fault(fault_runs, kind):
    spike_kind = _spike_kind_of(kind)
    assert SPIKE_FAULTS[spike_kind][0] in DETECTORS[kind].answers
    truth, analysis, _ = fault_runs[spike_kind]
    assert truth["spikes"][0]["expected_cause"] == kind
    assert _only_spike(analysis)["causes"][0]["kind"] == kind


@pytest.mark.parametrize("kind", DETECTORS.names())
def test_registered_detector_names_nothing_on_a_control_run(control_run, kind):
    analysis, contexts = control_run
    assert analysis["spikes"] == []
    detector = DETECTORS[kind]()
    for ctx in contexts:
        finding = detector.score(ctx)
        assert finding is None or finding.confidence < FIRES, (kind, ctx.start_ns, finding)


def test_every_lab_fault_is_answered_by_exactly_one_detector():
    for fault in INJECTORS:
        answering = [kind for kind, detector in DETECTORS.items() if fault in detector.answers]
        assert len(answering) == 1, (fault, answering)
        assert names_fault(answering[0], fault) and cause_of_fault(fault) == answering[0]
    assert set(detectors_by_fault()) >= set(INJECTORS)  # raises if any fault were answered twice
    assert cause_of_fault("network") == "unexplained"


def test_tables_derived_from_the_declarations_cover_every_detector():
    assert CAUSE_KINDS == (*DETECTORS.names(), "unexplained")
    assert CAUSE_ALIASES == cause_names_by_fault()
    for kind, detector in DETECTORS.items():
        for fault in detector.answers:
            assert CAUSE_ALIASES[fault] == {kind, *detector.aliases}
        for prefix in detector.reads:
            assert kind_of(prefix) == kind  # BARO attributes each declared series to its reader
    assert sorted(SERIES_KINDS) == sorted((p, k) for k, d in DETECTORS.items() for p in d.reads)
    assert kind_of("host.cpu.iowait_s") == "io_stall" and kind_of("host.cpu.user_s") == "cpu_contention"
    assert kind_of("generator.cpu_percent") is None
    # knowledge kept beside the plug-ins, keyed by declared kinds: every key is one that exists
    assert set(SIGNAL_FOOTPRINTS) <= set(SPIKE_FAULTS)
    assert set(SPIKE_DISTRACTIONS) <= set(SPIKE_FAULTS) and set(SPIKE_DISTRACTIONS.values()) <= set(DISTRACTIONS)
    assert {fault for fault, _ in DISTRACTIONS.values()} <= set(detectors_by_fault())
    assert set(LAB_PARAMS) <= set(INJECTORS)
    assert set(CAUSE_KINDS) <= set(CAUSE_TITLES)  # the words for each cause, shared with the report


def test_baro_derived_metrics_are_each_read_by_a_detector(fault_runs):
    truth, _, _ = fault_runs["queue"]
    ctx = _clean_context(truth["path"], 18.0, 4.0)
    names = set(derived_series(ctx))
    assert names == {"derived.gc_pause_ms_per_s", "derived.queue_depth", "derived.server_arrivals_per_s",
                     "derived.lateness_ms"}
    assert {name: kind_of(name) for name in names} == {
        "derived.gc_pause_ms_per_s": "gc", "derived.queue_depth": "queue_saturation",
        "derived.server_arrivals_per_s": "queue_saturation", "derived.lateness_ms": "generator"}


# -- Confounded runs: the target's own cause and another process's trouble at once ---------------

def _confounded_run(path, kind: str, seed: int, distraction: str | None = None) -> tuple[dict, dict, dict]:
    spike = {"kind": kind, "at_s": 18, "duration_s": 4, "extra_ms": 80}
    if distraction is not None:
        spike["distraction"] = distraction
    truth = write_synthetic_run(path, duration_s=40, rate=50, seed=seed, spikes=[spike])
    return truth, analyze_run(path), analyze_run(path, method="baro")


@pytest.mark.parametrize("kind", sorted(SPIKE_DISTRACTIONS))
def test_confounded_run_ranks_the_target_owned_cause_first(tmp_path, kind):
    truth, analysis, baro = _confounded_run(tmp_path / kind, kind, seed=300)
    injected = truth["spikes"][0]
    distraction_fault = DISTRACTIONS[SPIKE_DISTRACTIONS[kind]][0]
    assert injected["distraction"] == SPIKE_DISTRACTIONS[kind]
    assert injected["expected_cause"] == cause_of_fault(SPIKE_FAULTS[kind][0]) != cause_of_fault(distraction_fault)
    roles = {f["attributes"]["role"]: f["attributes"]["fault"] for f in analysis["events"]["faults"]}
    assert roles == {"cause": SPIKE_FAULTS[kind][0], "distraction": distraction_fault}
    causes = _only_spike(analysis)["causes"]
    assert causes[0]["kind"] == injected["expected_cause"] and causes[0]["confidence"] >= 0.8
    # the distraction's cause does not fire at all: its evidence is host-wide only
    assert cause_of_fault(distraction_fault) not in [c["kind"] for c in causes]
    # the host-wide signals did move, strongly: the ranker that reads them alike is misled by them
    assert _only_spike(baro)["causes"][0]["kind"] == cause_of_fault(distraction_fault)


@pytest.mark.parametrize("distraction", sorted(DISTRACTIONS))
def test_a_distraction_alone_names_no_cause(tmp_path, distraction):
    """Another process's trouble during a spike the target made by itself (a slow postprocess):
    the cause its host-wide signals point to stays below a cause's 0.5, however far they moved."""
    _, analysis, _ = _confounded_run(tmp_path / distraction, "postprocess", seed=301, distraction=distraction)
    cause = _only_spike(analysis)["causes"][0]
    assert cause["kind"] == "unexplained"
    weak = {f["kind"]: f["confidence"] for f in cause["evidence"]["weak_findings"]}
    tempted = cause_of_fault(DISTRACTIONS[distraction][0])
    assert 0.2 < weak[tempted] < FIRES  # seen, and held below a cause by the target's own flat signals
    finding = next(f for f in cause["evidence"]["weak_findings"] if f["kind"] == tempted)
    belongs = {e["series"]: e.get("belongs_to") for e in finding["evidence"]["signals"]}
    assert "target" in belongs.values() and "host" in belongs.values()


@pytest.mark.parametrize("distraction", sorted(DISTRACTIONS))
@pytest.mark.parametrize("kind", DETECTORS.names())
def test_registered_detector_names_its_fault_beside_every_distraction(tmp_path, kind, distraction):
    """The contract of every registered detector, confounded: its seeded fault on the target, another
    process's trouble elsewhere on the host at once, and it still ranks first, alone."""
    spike_kind = _spike_kind_of(kind)
    _, analysis, _ = _confounded_run(tmp_path / spike_kind, spike_kind, seed=310, distraction=distraction)
    causes = [c["kind"] for c in _only_spike(analysis)["causes"]]
    assert causes == [kind], (spike_kind, distraction, causes)


def test_target_owned_cause_keeps_full_weight_beside_a_distraction(tmp_path):
    """The target's own paging with a neighbour paging too: the host's signals corroborate in full."""
    _, analysis, _ = _confounded_run(tmp_path / "swap", "swap", seed=302, distraction="neighbour_swap")
    top = _only_spike(analysis)["causes"][0]
    assert top["kind"] == "swap" and top["confidence"] >= 0.9


def _evidence(name: str, confidence: float) -> SignalEvidence:
    return SignalEvidence(name, Contrast(10.0, 0.0, 1.0, 10.0, 3, 30), 1.0, confidence)


def test_host_wide_evidence_counts_up_to_the_targets_own():
    assert host_allowance(0.0) == HOST_ONLY_CAP == 0.45 and host_allowance(1.0) == 1.0
    flat_target = owned_strongest([_evidence("proc.major_faults", 0.0)], [_evidence("host.vm.pswpin", 1.0)])
    assert flat_target.watched and flat_target.owned == 0.0
    assert flat_target.confidence == pytest.approx(0.45 * 0.75) and flat_target.confidence < FIRES
    firm_target = owned_strongest([_evidence("proc.major_faults", 1.0)], [_evidence("host.vm.pswpin", 1.0)])
    assert firm_target.confidence == firm_target.owned == 1.0
    unwatched = owned_strongest([None], [_evidence("host.vm.pswpin", 1.0), _evidence("psi.memory.some_us", 1.0)],
                                {"psi.memory.some_us": 0.8})
    assert not unwatched.watched and unwatched.confidence == unwatched.owned == pytest.approx(0.95)
