"""Issue 28: each figure a cause card quotes was measured inside that spike's window, or says where.

The Triton case: a 15-s CPU-contention episode showed as two 1-s spikes, and both cards quoted the
same figure — the episode's peak, measured between the two spikes, outside both windows (each
spike's level was taken inside the spike widened by its 2-s margin)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.spikes import CauseFinding, Spike
from tailscope.analyzers.causes.kit import SignalEvidence, level_words, places
from tailscope.analyzers.inputs.run_inputs import RunInputs
from tailscope.analyzers.inputs.signal_index import place_words
from tailscope.reports.evidence_text import evidence_sentences, scalar_sentence, signal_sentence

NS = 1_000_000_000
ORIGIN = 1_700_000_000 * NS
#: Two 1-s spikes of one episode, 2 s apart: [24, 25) and [27, 28) s.
SPIKES = [(ORIGIN + 24 * NS, ORIGIN + 25 * NS), (ORIGIN + 27 * NS, ORIGIN + 28 * NS)]


def _episode() -> tuple[RunInputs, np.ndarray]:
    """60 one-second bins: 0.1 cores outside the episode (20-35 s), 1.0 in the first spike, 2.0 in the
    second, and the episode's peak 5.0 at 26 s, between them."""
    inputs = RunInputs(None, None, None, ORIGIN, ORIGIN + 60 * NS, 0.0, SPIKES)
    values = 0.1 + 0.01 * np.random.default_rng(1).standard_normal(60)
    values[20:35] = 1.5
    values[24], values[27], values[26] = 1.0, 2.0, 5.0
    return inputs, values


def _entry(found):
    """The contrast as the kit writes it into a cause's evidence (its typed entry)."""
    return SignalEvidence("others.cpu_cores", found, 0.5, 1.0).typed()


def test_two_spikes_of_one_episode_quote_their_own_levels_and_place_the_peak():
    inputs, values = _episode()
    first, second = (inputs.contrast_values(values, lo, hi, floor=0.01) for lo, hi in SPIKES)
    # the confidence's level is still the widened spike's best: the same peak for both ...
    assert first.spike == second.spike == 5.0
    # ... but each says where it lay, and quotes what was measured inside its own window
    assert first.inside == 1.0 and second.inside == 2.0
    assert first.place == "in the 2 s after the spike" and second.place == "in the 1 s before the spike"
    one, two = (signal_sentence(_entry(c)) for c in (first, second))
    assert one != two
    assert one.startswith("CPU used by other processes: 1 cores in the spike, peak 5 cores in the 2 s after the spike, vs")
    assert "robust z of the peak" in one
    assert two.startswith("CPU used by other processes: 2 cores in the spike, peak 5 cores in the 1 s before the spike, vs")
    assert level_words(first, lambda v: f"{v:.2f}") == "1.00 in the spike (peak 5.00 in the 2 s after the spike)"


def test_a_level_measured_inside_the_spike_is_quoted_without_a_place():
    inputs, values = _episode()
    values[24] = 9.0  # the first spike now holds the episode's peak
    found = inputs.contrast_values(values, *SPIKES[0], floor=0.01)
    assert found.spike == found.inside == 9.0 and found.place == "in the spike"
    assert signal_sentence(_entry(found)).startswith(
        "CPU used by other processes: 9 cores in the spike vs")
    assert level_words(found, lambda v: f"{v:.1f}") == "9.0" and places(load_ratio=found) == {}


def test_a_spike_without_a_reading_inside_says_where_its_level_was_measured():
    inputs, values = _episode()
    values[24] = np.nan
    found = inputs.contrast_values(values, *SPIKES[0], floor=0.01)
    assert found.inside is None and found.place == "in the 2 s after the spike"
    text = signal_sentence(_entry(found))
    assert text.startswith("CPU used by other processes: 5 cores in the 2 s after the spike (no reading inside the spike) vs")
    assert level_words(found, lambda v: f"{v:.0f}") == "5 in the 2 s after the spike"


def test_a_ratio_measured_outside_the_spike_carries_its_place_on_the_card():
    inputs, values = _episode()
    found = inputs.contrast_values(values, *SPIKES[0], floor=0.01)
    assert places(load_ratio=found) == {"load_ratio": "in the 2 s after the spike"}
    assert scalar_sentence("load_ratio", 2.5, "in the 2 s after the spike") == (
        "Offered load vs baseline: 2.50× (in the 2 s after the spike).")
    evidence = {"summary": "s", "load_ratio": 2.5, "places": places(load_ratio=found),
                "kv_usage_spike": 0.99, "kv_usage_baseline": 0.4}
    sentences = evidence_sentences(CauseFinding("queue_saturation", 0.9, evidence))
    assert "Offered load vs baseline: 2.50× (in the 2 s after the spike)." in sentences
    assert "KV-cache usage: 99% of the cache in the spike vs 40% of the cache at baseline." in sentences


def test_evidence_dicts_carry_inside_and_place():
    inputs, values = _episode()
    found = inputs.contrast_values(values, *SPIKES[1], floor=0.01)
    entry = SignalEvidence("others.cpu_cores", found, 0.5, 1.0).as_dict()
    assert entry["inside"] == 2.0 and entry["place"] == "in the 1 s before the spike"


def test_place_words():
    s = NS
    assert place_words(10 * s, 12 * s, 10 * s, 12 * s) == "in the spike"
    assert place_words(7 * s, 9 * s, 10 * s, 12 * s) == "in the 3 s before the spike"
    assert place_words(12 * s, 14 * s, 10 * s, 12 * s) == "in the 2 s after the spike"
    assert place_words(9 * s, 13 * s, 10 * s, 12 * s) == "from 1 s before the spike to 1 s after it"
    assert place_words(11 * s, 13 * s, 10 * s, 12 * s) == "from the spike's start to 1 s after it"


def test_the_kv_peak_from_the_widened_spike_says_where_it_was_read():
    evidence = {"summary": "s", "kv_usage_peak": 0.99, "places": {"kv_usage_peak": "from 2 s before the spike to 2 s after it"}}
    assert "Highest KV-cache usage reading: 99% of the cache (from 2 s before the spike to 2 s after it)." in (
        evidence_sentences(CauseFinding("kv_cache_pressure", 0.9, evidence)))


def test_the_recurring_stalls_card_says_its_evidence_was_read_in_the_largest_stall(tmp_path):
    """A recurring-stalls record spans every stall, but its causes are scored in one stall's window."""
    from tailscope.analyzers.analysis import analyze_run
    from tailscope.reports.cards import spike_row
    from tailscope.testkit.synthetic import write_synthetic_run

    pauses = [{"kind": "gc", "at_s": 4.0 * k + 2.0, "duration_s": 0.15, "extra_ms": 150} for k in range(1, 14)]
    write_synthetic_run(tmp_path / "stalls", duration_s=60, rate=50, seed=3, spikes=pauses)
    analysis = analyze_run(tmp_path / "stalls")
    (spike,) = analysis["spikes"]
    lo, hi = spike["recurring_stalls"]["evidence_ns"]
    assert spike["start_ns"] <= lo < hi <= spike["end_ns"] and hi - lo < 2 * NS
    text = spike_row(1, decode(Spike, spike, "spike"), analysis["run"]["load_start_ns"])["stalls"]
    assert text.startswith(spike["recurring_stalls"]["summary"] + "; the evidence below was read in the largest stall, ")


def test_a_level_with_an_outside_peak_keeps_each_figure_beside_its_unit():
    """'waited 25 in the spike (peak 45 in the 2 s after the spike) ms/s' put the unit after the
    parenthesis: each figure carries its own unit."""
    from tailscope.analyzers.causes.detect_cpu_contention import _summary

    waits = [{"series": "generator.runqueue_wait_ms", "spike": 45.0, "inside": 25.0, "baseline": 23.0,
              "place": "in the 2 s after the spike"},
             {"series": "proc.runqueue_wait_ns", "spike": 474e6, "inside": 474e6, "baseline": 199e6, "place": "in the spike"}]
    text = _summary(None, None, waits, None, 0.0, 0.0, 0.0, None)
    assert ("the generator waited for a CPU 25 ms/s in the spike (peak 45 ms/s in the 2 s after the spike) "
            "vs 23 ms/s") in text
    assert "target threads waited on a run queue 474 ms/s vs 199 ms/s" in text
