"""The lab's outputs: the score table (terminal, Markdown) and the data of ``lab.html``.

``lab.html`` is rendered by :mod:`tailscope.reports.lab_page` from
:func:`lab_page_data` (display strings; the template escapes them, as cause names
and paths come from analyses and are untrusted). It links each experiment's own
``report.html``, which shows the fault's window as an amber band.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

from rich.table import Table

from tailscope.reports.formatting import fault_counts_text
from tailscope.support.units import NS_PER_S


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _num(value: float | None, digits: int = 1, unit: str = "") -> str:
    return "—" if value is None else f"{value:.{digits}f}{unit}"


def score_rows(scores: dict) -> list[list[str]]:
    """Rows of the per-kind table: kind, n, detection, AC@1, AC@3, BARO's AC@1 and AC@3,
    time to detect, impact."""
    rows = []
    baro = (scores.get("baro") or {}).get("kinds") or {}
    for kind, s in scores["kinds"].items():
        b = baro.get(kind) or {}
        rows.append([kind, f"{s['scored']}/{s['experiments']}", _pct(s["detection_rate"]), _pct(s["ac1"]),
                     _pct(s["ac3"]), _pct(b.get("ac1")), _pct(b.get("ac3")),
                     _num(s["mean_time_to_detect_s"], 1, " s"), _num(s["mean_impact"], 2, "×")])
    return rows


SCORE_HEADERS = ["fault kind", "scored", "detected", "AC@1", "AC@3", "BARO AC@1", "BARO AC@3", "time to detect",
                 "P99 impact"]


def control_line(scores: dict) -> str:
    c = scores["control"]
    baro = ((scores.get("baro") or {}).get("control") or {}).get("false_alarm_rate")
    return (f"control runs: {c['scored']}/{c['runs']} scored, false-alarm rate {_pct(c['false_alarm_rate'])}"
            f" (BARO {_pct(baro)}), {_num(c['false_alarms_per_run'], 2)} named spikes per run, "
            f"{_num(c['spikes_per_run'], 2)} spikes per run" + _token_words(c))


def _token_words(control: dict) -> str:
    """The TTFT/TPOT spikes of LLM controls ("" where none had any, or the scores predate them)."""
    if not control.get("token_spikes_per_run"):
        return ""
    return (f"; TTFT/TPOT: {_num(control['token_false_alarms_per_run'], 2)} named spikes per run, "
            f"{_num(control['token_spikes_per_run'], 2)} spikes per run")


#: Shorter headers for the terminal, so the table fits 80 columns.
TERMINAL_HEADERS = ["fault kind", "n", "det.", "AC@1", "AC@3", "B@1", "B@3", "TTD", "P99 ×"]


def score_table(scores: dict) -> Table:
    table = Table(title="tailscope lab: diagnosis vs ground truth",
                  caption="n: scored/run; B@k: the BARO-style baseline's AC@k on the same runs; TTD: time to "
                          "detect; P99 ×: P99 inside the fault over outside")
    for header in TERMINAL_HEADERS:
        table.add_column(header, justify="left" if header == "fault kind" else "right", no_wrap=True)
    for row in score_rows(scores):
        table.add_row(*row)
    return table


def markdown_table(scores: dict) -> str:
    """The score table as Markdown (for notes and CI logs)."""
    lines = ["| " + " | ".join(SCORE_HEADERS) + " |", "|" + "---|" * len(SCORE_HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in score_rows(scores)]
    return "\n".join(lines) + "\n\n" + control_line(scores) + "\n"


def _window_text(result: dict) -> str:
    window = (result.get("score") or {}).get("fault_window_ns")
    start = result.get("load_start_ns")
    if not window or not start:
        return "—"
    return f"{(window[0] - start) / NS_PER_S:.1f}–{(window[1] - start) / NS_PER_S:.1f} s"


def experiment_rows(results: list[dict], lab_dir: str) -> list[dict]:
    """One dict of display strings per experiment (escaped when rendered)."""
    rows = []
    for r in results:
        score = r.get("score") or {}
        report = os.path.join(r["run_dir"], "report.html") if r.get("run_dir") else None
        rows.append({
            "name": r["name"], "kind": r["kind"], "scenario": r["scenario"], "rate": f"{r['rate']:g}/s",
            "seed": str(r["seed"]), "status": r["status"] + (f": {r['error']}" if r.get("error") else ""),
            "window": _window_text(r),
            "detected": ("—" if r["kind"] == "control" else ("yes" if score.get("detected") else "no")),
            "causes": ", ".join(score.get("top_causes") or score.get("false_alarm_causes") or []) or "—",
            "ac1": "—" if r["kind"] == "control" else ("✓" if score.get("ac1") else "✗"),
            "impact": _num(score.get("impact"), 2, "×"),
            "spikes": str(score.get("spikes", "—")),
            "fault observed": fault_counts_text(score.get("fault_attributes")) or "—",
            "report": os.path.relpath(report, lab_dir) if report and os.path.exists(report) else None,
        })
    return rows


#: The experiment table's columns (keys of :func:`experiment_rows`), before the report link.
EXPERIMENT_COLUMNS = ["name", "kind", "scenario", "rate", "seed", "status", "window", "detected", "causes", "ac1",
                      "impact", "spikes", "fault observed"]


def lab_page_data(lab: dict, lab_dir: str) -> dict:
    """The data of the lab summary page (rendered by tailscope.reports.lab_page.render_lab_page):
    display strings only; report links are relative to ``lab_dir``."""
    scores = lab["scores"]
    created = datetime.fromtimestamp(lab["created_ns"] / NS_PER_S, tz=UTC).isoformat(timespec="seconds")
    return {
        "suite": lab["suite"],
        "experiment_count": str(len(lab["experiments"])),
        "created": created,
        "status": lab["status"],
        "score_headers": SCORE_HEADERS,
        "score_rows": score_rows(scores),
        "control": control_line(scores),
        "experiment_headers": EXPERIMENT_COLUMNS,
        "experiments": [{"cells": [row[c] for c in EXPERIMENT_COLUMNS], "report": row["report"]}
                        for row in experiment_rows(lab["experiments"], lab_dir)],
    }
