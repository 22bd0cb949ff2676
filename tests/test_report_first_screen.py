"""The rules behind a report that answers first, each tested where it is decided (no browser).

Warm-up kept out of spike detection, the rolling P99 line, the generator-lateness rule, minor
spikes, constants and per-CPU folding in "All signals", and every wording rule of issue 21: an
unexplained spike in words, evidence as sentences (tests/test_report_views.py), compare's
unjudged changes, a soak verdict that agrees with its slope, a generator line that agrees with
its windows, a sweep that stops only before rates it skips, and a header on every table column.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from report_fixtures import make_spike, run_section, token_cards_of

from tailscope.analysis_model.codec import encode
from tailscope.analysis_model.comparison import PercentileChange
from tailscope.analysis_model.health import Generator, GeneratorCpu, GeneratorGc, LimitedInterval
from tailscope.analysis_model.percentiles import MaxValue, Percentile, PercentileSet
from tailscope.analysis_model.spikes import Decomposition
from tailscope.analysis_model.summary import Lateness, RequestSummary
from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.causes.protocol import Finding, unexplained
from tailscope.analyzers.comparison.baseline import CompareRules, verdict_summary
from tailscope.analyzers.health.lateness_rule import MATERIAL_SHARE, lateness_judgement
from tailscope.analyzers.patterns.trends import PatternRules, call_trend
from tailscope.analyzers.spikes.detection import SpikeRules, warmup_ns
from tailscope.cli.commands.demo import demo_incident, incident_window
from tailscope.cli.commands.sweep import early_stop_note
from tailscope.reports.cards import minor_flags, rank_cards, spike_cards
from tailscope.reports.data import build_report_data
from tailscope.reports.html import render_html
from tailscope.reports.loadgen_view import generator_verdict
from tailscope.reports.signal_view import summarise_panels
from tailscope.testkit.synthetic import write_synthetic_run

NS = 1_000_000_000


# --------------------------------------------------------------------------- warm-up


def test_warmup_rule_is_five_percent_clamped_to_two_and_ten_seconds_and_a_quarter_of_the_run():
    rules = SpikeRules()
    assert warmup_ns(0, 60 * NS, NS, rules) == 3 * NS  # 5% of 60 s
    assert warmup_ns(0, 20 * NS, NS, rules) == 2 * NS  # at least 2 s
    assert warmup_ns(0, 3600 * NS, NS, rules) == 10 * NS  # at most 10 s
    assert warmup_ns(0, 6 * NS, NS, rules) == 1 * NS  # never more than a quarter of the run (whole windows)
    assert warmup_ns(0, 61 * NS, 2 * NS, rules) == 4 * NS  # rounded to whole windows
    assert warmup_ns(0, 40 * NS + NS // 100, NS, rules) == 2 * NS


@pytest.fixture(scope="module")
def warm_run(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("warm") / "run")
    truth = write_synthetic_run(path, duration_s=40, rate=60, seed=5,
                                spikes=[{"kind": "gc", "at_s": 0, "duration_s": 1.5, "extra_ms": 300},
                                        {"kind": "gc", "at_s": 20, "duration_s": 2, "extra_ms": 300}])
    return truth, analyze_run(path)


def test_a_spike_in_the_warm_up_is_not_detected_and_a_later_one_is(warm_run):
    truth, analysis = warm_run
    detection = analysis["spike_detection"]
    assert detection["warmup_s"] == 2.0
    starts = [(s["start_ns"] - truth["start_ns"]) / NS for s in analysis["spikes"]]
    assert starts and all(start >= 2.0 for start in starts)
    assert any(18 <= start <= 22 for start in starts)
    text = build_report_data(analysis)["detection"]
    assert "the first 2 s are warm-up and left out of detection (the rule: 5% of the load" in text


# --------------------------------------------------------------------------- the P99 line


def test_the_p99_line_is_a_rolling_sample_every_point_of_which_can_claim_a_p99(warm_run):
    _, analysis = warm_run
    line = analysis["tail_line"]
    assert line["percentile"] == "p99" and line["min_samples"] == 459
    assert len(line["t_ns"]) > 20 and min(line["n"]) >= 459
    assert line["span_s"]["median"] == pytest.approx(459 / 60, rel=0.3)  # 60 requests/s
    assert all(w["p99_ms"] is None for w in analysis["windows"])  # 1-s windows cannot claim a P99 here
    data = build_report_data(analysis)
    assert data["charts"]["tail"]["y"] and "P99" not in [line["name"] for line in data["charts"]["latency"]["lines"]]
    assert "P99 is drawn over a rolling sample: each point is the P99 of the last 459 requests or more" in data["tail"]


# --------------------------------------------------------------------------- generator lateness


def _summary(latency_p99, service_p99, claimed=True, latency_p50=10.0, service_p50=9.9) -> RequestSummary:
    def entry(value, claimed_=True):
        return Percentile(value_ms=value, ci_low_ms=None, ci_high_ms=None, n=1000, claimed=claimed_, bound_ms=None)

    def percentiles(p50, p99, p99_claimed=True):
        return PercentileSet(p50=entry(p50), p90=entry(None, False), p95=entry(None, False),
                             p99=entry(p99, p99_claimed), p999=entry(None, False), max=MaxValue(None, 1000))
    return RequestSummary(requests=1000, completed=1000, errors=0, error_rate=0.0, errors_by_kind={}, top_errors=(),
                          duration_s=60.0, offered_rps=1000 / 60, achieved_rps=1000 / 60,
                          latency_ms=percentiles(latency_p50, latency_p99, claimed),
                          service_time_ms=percentiles(service_p50, service_p99),
                          lateness_ms=Lateness(p50_ms=0.05, p99_ms=1.2, late_share=0.04, generator_limited=True))


def test_lateness_is_a_headline_only_when_it_moves_a_claimed_percentile_by_more_than_five_percent():
    assert MATERIAL_SHARE == 0.05
    quiet = lateness_judgement(_summary(15.8, 15.4))  # lateness adds 0.4 ms (2.5%) to the P99
    assert not quiet.material and quiet.checks[1].share == pytest.approx(0.4 / 15.8)
    loud = lateness_judgement(_summary(15.8, 14.0))  # 1.8 ms (11%)
    assert loud.material and loud.checks[1].material and not loud.checks[0].material
    unclaimed = lateness_judgement(_summary(15.8, 14.0, claimed=False))
    assert not unclaimed.material  # a percentile we do not claim cannot be changed materially
    at_p50 = lateness_judgement(_summary(15.8, 15.7, latency_p50=10.0, service_p50=9.0))
    assert at_p50.material and at_p50.checks[0].material
    assert "more than 5%" in quiet.rule


def test_the_generator_line_never_says_kept_to_its_schedule_beside_limited_windows():
    rule = lateness_judgement(_summary(15.8, 15.4))
    windows = [LimitedInterval(i * NS, (i + 1) * NS, 1, 100, 2, 0.02, "unknown", 0.1, False) for i in range(10)]
    text = generator_verdict(_generator(False, windows, rule), len(windows))
    assert "kept to its schedule" not in text and "fell behind its schedule in 10 windows" in text
    assert "no grey band is drawn" in text
    assert "kept to its schedule" in generator_verdict(_generator(False, [], rule), 0)
    loud = lateness_judgement(_summary(15.8, 14.0))
    assert generator_verdict(_generator(True, windows, loud), 10).startswith("generator-limited")


def _generator(limited, limited_windows, rule) -> Generator:
    return Generator(load_model={"loop": "open", "process": "poisson"}, in_flight_policy="wait", dropped=0,
                     windows=[], limited=limited, limited_windows=limited_windows, cpu=GeneratorCpu(),
                     gc=GeneratorGc(0, 0.0, None), lateness_rule=rule)


def test_a_run_whose_lateness_does_not_matter_has_no_generator_limited_finding_or_band(tmp_path):
    path = str(tmp_path / "run")
    write_synthetic_run(path, duration_s=15, rate=60, seed=3, lateness_ms=0.6)  # >1% late, tiny vs latency
    analysis = analyze_run(path)
    assert analysis["summary"]["lateness_ms"]["generator_limited"]
    assert not analysis["generator"]["lateness_rule"]["material"]
    assert "generator_limited" not in {f["kind"] for f in analysis.get("findings") or []}
    assert "generator_limited" not in {w["code"] for w in analysis["warnings"]}
    data = build_report_data(analysis)
    bands = data["charts"]["limited"]
    assert len(bands) == sum(1 for w in analysis["generator_limited_windows"] if w["material"])


# --------------------------------------------------------------------------- spikes: minor, unexplained


def _spike(i, kind, p99, baseline=20.0, slow=30, requests=300):
    return make_spike(i * 10 * NS, (i * 10 + 2) * NS, [(kind, 0.9 if kind != "unexplained" else 0.7, {})], p99_ms=p99,
                      baseline_p99_ms=baseline, slow_requests=slow, requests=requests, expected_slow_share=0.01)


def test_unexplained_spikes_below_twice_the_baseline_or_a_tenth_of_the_largest_impact_are_minor():
    spikes = [_spike(0, "unexplained", 38.0), _spike(1, "gc", 400.0), _spike(2, "unexplained", 50.0),
              _spike(3, "unexplained", 350.0), _spike(4, "gc", 30.0)]
    assert minor_flags(spikes) == [True, False, True, False, False]  # a named cause is never minor
    cards = spike_cards(spikes, 0)
    assert [c["number"] for c in cards["cards"]] == [2, 4, 5]  # by impact
    assert [m["number"] for m in cards["minor"]] == [1, 3]


def _token_spike(start_s, p99, baseline, slow, requests):
    return {"start_ns": start_s * NS, "end_ns": (start_s + 3) * NS, "p99_ms": p99, "p99_claimed": True,
            "baseline_p99_ms": baseline, "excess_ms": p99 - baseline, "requests": requests, "slow_requests": slow,
            "slow_share": slow / requests}


def test_ttft_and_tpot_spikes_are_cards_ranked_with_the_latency_spikes_by_impact():
    latency = [_spike(1, "gc", 400.0)]  # 10–12 s; impact 380 ms × 27 requests
    analysis = {"run": run_section(load_start_ns=0, start_ns=0), "spikes": encode(latency),
                "llm": {"spikes": {"ttft": [_token_spike(9, 700.0, 100.0, 100, 200),  # impact 600 ms × 98
                                            _token_spike(30, 260.0, 100.0, 12, 200)],  # 160 ms × 10: minor (< 10%)
                                   "tpot": [_token_spike(40, 35.0, 20.0, 40, 200)]}}}  # P99 < 2× baseline: minor
    tokens = token_cards_of(analysis)
    assert [(c["metric"], c["number"]) for c in tokens["cards"]] == [("TTFT", 1)]
    assert [(c["metric"], c["number"]) for c in tokens["minor"]] == [("TTFT", 2), ("TPOT", 1)]
    ranked, capped = rank_cards(spike_cards(latency, 0)["cards"], tokens["cards"])
    assert [(c["token"], c["rank"]) for c in ranked] == [(True, 1), (False, 2)] and capped == 0
    top = ranked[0]
    assert top["top_title"] == "TTFT spike: no cause attributed"
    assert top["top_sentence"] == ("TTFT P99 rose to 700 ms against a 100 ms baseline (7.0×) in 9.0 s – 12.0 s: "
                                   "100 of 200 requests waited longer than the baseline P99 for their first token; "
                                   "it overlaps latency spike 1, whose top cause is: GC pauses of the target.")
    alone = token_cards_of({**analysis, "spikes": []})["cards"][0]["top_sentence"]
    assert alone.endswith("no latency spike overlaps it, and a token-level spike is given no cause of its own.")


def test_a_token_spike_with_a_named_cause_is_a_card_however_small_its_impact():
    """The minor list says "no cause attributed": an explained TPOT spike of a twentieth of the
    largest impact (the LLM lab's overload: TPOT 1.6× beside a 24× TTFT spike, both named
    queue_saturation) had been listed there."""
    named = {**_token_spike(30, 260.0, 100.0, 12, 200),
             "causes": [{"kind": "queue_saturation", "confidence": 1.0, "evidence": {"summary": "the batch"}}]}
    analysis = {"run": run_section(load_start_ns=0, start_ns=0), "spikes": [],
                "llm": {"spikes": {"ttft": [_token_spike(9, 700.0, 100.0, 100, 200)], "tpot": [named]}}}
    tokens = token_cards_of(analysis)
    assert [(c["metric"], c["number"]) for c in tokens["cards"]] == [("TTFT", 1), ("TPOT", 1)]
    assert tokens["minor"] == []
    assert tokens["cards"][1]["top_title"] == "TPOT spike: queue saturation"


def test_an_unexplained_spike_says_what_was_checked_and_what_grew():
    decomposition = Decomposition(5, 5, 2228, 2228, {}, "batch_wait", "batch_wait grew most: mean 0.3 ms → 8.5 ms "
                                  "(+8.2 ms) in 5 slow requests vs 2228 normal requests", True, None)
    weak = [Finding("cpu_contention", 0.28), Finding("generator", 0.06)]
    found = unexplained(decomposition, weak, ["gc", "cpu_contention", "queue_saturation", "generator"],
                        ["cpu_throttling"])
    text = found.evidence["summary"]
    assert text.startswith("No known cause explains it. Checked: GC pauses of the target, CPU contention, "
                           "queue saturation and the load generator; the closest, CPU contention, reached 28% "
                           "(a cause needs 50%).")
    assert "Not checked (inputs not recorded): CPU throttling (CFS quota)." in text
    assert "What grew: batch_wait grew most: mean 0.3 ms → 8.5 ms" in text
    assert "threshold (" not in text and "weak finding" not in text and "detectors had" not in text


# --------------------------------------------------------------------------- compare, soak, sweep wording


def _row(percentile, relative, significant=True, improved=False, regressed=False, claimable=True):
    current = 10.0 * (1 + relative)
    return PercentileChange(metric="latency_ms", cls=None, percentile=percentile, relative_change=relative,
                            significant=significant, improved=improved, regressed=regressed, claimable=claimable,
                            baseline_ms=10.0, current_ms=current, baseline_ci_ms=(10.0, 10.0),
                            current_ci_ms=(current, current), change_ms=current - 10.0,
                            change_ci_ms=(current - 10.0, current - 10.0), baseline_n=1000, current_n=1000)


def test_compare_says_why_a_significant_change_is_not_a_regression():
    rules = CompareRules()
    text = verdict_summary([_row("p999", -0.131, claimable=False), _row("p50", 0.032),
                            _row("p99", -0.2, improved=True)], None, rules)
    assert text == ("no regression above 10%; latency P99.9 −13.1%: significant, but too few requests to claim "
                    "latency P99.9 on both sides; latency P50 +3.2%: significant, but within the 10% threshold; "
                    "latency P99 −20.0%: improved")
    assert "below the" not in text


def test_a_trend_verdict_never_contradicts_its_own_significance():
    assert call_trend(True, [], "leak", "growing", "flat") == ("leak", "")
    verdict, note = call_trend(True, ["the run lasted 1 min, shorter than the 10 min a leak needs"],
                               "leak", "growing", "flat")
    assert verdict == "growing" and note.startswith("significant, but not called a leak: the run lasted 1 min")
    assert call_trend(False, [], "leak", "growing", "flat") == ("flat", "no significant trend")
    assert PatternRules().min_duration_s == 600.0


def test_a_short_run_whose_memory_grows_significantly_is_growing_not_flat(tmp_path):
    path = str(tmp_path / "run")
    write_synthetic_run(path, duration_s=60, rate=5, seed=2, with_spans=False, rss_growth_bytes_per_s=2e6)
    leak = analyze_run(path)["patterns"]["leak"]
    assert leak["trend"]["p_value"] < 0.01 and leak["trend"]["slope_per_s"] > 0
    assert leak["slope_bytes_per_hour"] is None  # 60 s of readings: no per-hour extrapolation
    assert leak["verdict"] == "growing" and not leak["detected"]
    assert "no leak" not in leak["summary"] and "not called a leak" in leak["summary"]


def test_a_sweep_says_it_stops_only_when_rates_are_left():
    assert early_stop_note(2, 0, keep_going=False) is None  # after the last step: nothing to stop
    assert early_stop_note(1, 3, keep_going=False) is None
    assert early_stop_note(2, 3, keep_going=True) is None
    note = early_stop_note(2, 3, keep_going=False)
    assert "stopping the sweep, 3 remaining rates not run" in note


# --------------------------------------------------------------------------- All signals


def _panel(title, *series):
    return {"title": title, "unit": "", "series": [{"name": n, "unit": u, "x": list(range(len(y))), "y": y}
                                                   for n, u, y in series]}


def test_constants_are_listed_in_words_and_not_plotted():
    panels = [_panel("cgroup.cpu.quota_us", ("cgroup.cpu.quota_us", "us", [-1.0] * 5)),
              _panel("cgroup.cpu.period_us", ("cgroup.cpu.period_us", "us", [100000.0] * 5)),
              _panel("Memory", ("host.swap.total_bytes", "bytes", [0.0] * 5), ("proc.rss_bytes", "bytes", [1.0, 2, 3])),
              _panel("Throttling", ("cgroup.cpu.nr_throttled", "count/s", [0.0] * 9))]
    summary = summarise_panels(panels)
    words = {(c["label"], c["value"]) for c in summary["constants"]}
    assert {("CPU quota", "none"), ("cgroup period", "100 ms"), ("swap", "none"),
            ("cgroup.cpu.nr_throttled", "0 count/s")} <= words
    assert [p["title"] for p in summary["panels"]] == ["Memory"]
    assert [s["name"] for s in summary["panels"][0]["series"]] == ["proc.rss_bytes"]
    assert summary["series_total"] == 5 and summary["series_plotted"] == 1


def test_per_cpu_series_fold_into_their_sum_unless_one_cpu_differs():
    alike = summarise_panels([_panel("host.cpu0.iowait_s", ("host.cpu0.iowait_s", "s/s", [0.1, 0.2, 0.1])),
                              _panel("host.cpu1.iowait_s", ("host.cpu1.iowait_s", "s/s", [0.2, 0.1, 0.2]))])
    assert len(alike["panels"]) == 1
    summed = alike["panels"][0]["series"][0]
    assert summed["name"] == "host.cpu*.iowait_s (sum of 2 CPUs)" and summed["y"] == pytest.approx([0.3, 0.3, 0.3])
    assert alike["folded"] == [{"group": "host.cpu*.iowait_s", "folded": True, "cpus": 2, "differs": None}]
    pinned = summarise_panels([_panel("CPU busy per core", ("host.cpu0.busy_s", "s/s", [0.95, 0.9, 1.0]),
                                      ("host.cpu1.busy_s", "s/s", [0.1, 0.05, 0.1]))])
    assert [s["name"] for s in pinned["panels"][0]["series"]] == ["host.cpu0.busy_s", "host.cpu1.busy_s"]
    assert pinned["folded"][0]["folded"] is False and pinned["folded"][0]["differs"] in ("host.cpu0.busy_s",
                                                                                          "host.cpu1.busy_s")


# --------------------------------------------------------------------------- tables


class _Tables(HTMLParser):
    """Each <table>'s first row as a list of (tag, text) cells."""

    def __init__(self):
        super().__init__()
        self.first_rows, self._row, self._cell, self._depth = [], None, None, 0

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._depth += 1
            self._row = "waiting"
        elif tag == "tr" and self._row == "waiting":
            self._row = []
        elif tag in ("th", "td") and isinstance(self._row, list):
            self._cell = [tag, ""]

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self._cell is not None and isinstance(self._row, list):
            self._row.append(tuple(self._cell))
            self._cell = None
        elif tag == "tr" and isinstance(self._row, list):
            self.first_rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data


def test_every_table_column_has_a_header(warm_run):
    _, analysis = warm_run
    parser = _Tables()
    parser.feed(render_html(build_report_data(analysis), compress_plotly=False))
    assert len(parser.first_rows) >= 10
    for row in parser.first_rows:
        assert row and all(tag == "th" and text.strip() for tag, text in row), row


# --------------------------------------------------------------------------- the demo's incident


def test_the_demo_incident_sits_mid_run_with_clean_load_around_it():
    assert incident_window(60) == (27.0, 6.0)
    assert incident_window(8) == (3.6, 2.0)  # after the 2-s warm-up, before the end
    spec = demo_incident(12)
    assert spec.kind == "gc_pressure" and spec.at_s == 5.4 and spec.duration_s == 2.0
    assert spec.at_s >= warmup_ns(0, 12 * NS, NS) / NS and spec.at_s + spec.duration_s < 12
