"""Writing a run's outputs (analysis.json, report.html, junit.xml, summary.md) and a comparison's.

Each file is written atomically (temporary file in the same directory, fsync,
rename): a reader sees the old file or the new one, never half of one.

An analysis of damaged data (``run.damaged_files``) never replaces a report made
from sound data: :func:`outputs_variant` then names the ``failed`` variant, whose
files sit beside the good ones (``report.failed.html``, ``analysis.failed.json``, …).
"""

from __future__ import annotations

import json
import os

from tailscope.analysis_model.codec import AnalysisShapeError
from tailscope.reports.compare_html import build_comparison_data, render_comparison
from tailscope.reports.data import build_report_data
from tailscope.reports.html import render_html
from tailscope.reports.junit import render_comparison_junit, render_junit
from tailscope.reports.markdown import render_comparison_markdown, render_markdown
from tailscope.reports.upgrade import run_of

OUTPUT_FILES = {"analysis": "analysis.json", "html": "report.html", "junit": "junit.xml", "markdown": "summary.md"}
#: The variant of the outputs of a failed re-analysis, written beside an earlier good report.
FAILED_VARIANT = "failed"
COMPARISON_FILES = {"comparison": "comparison.json", "html": "comparison.html", "junit": "junit-compare.xml",
                    "markdown": "comparison.md"}


def write_text_atomic(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def output_name(key: str, variant: str | None = None) -> str:
    """The file name of output ``key`` (``analysis``, ``html``, ``junit``, ``markdown``), with
    ``variant`` before its extension when given (``report.failed.html``)."""
    stem, ext = os.path.splitext(OUTPUT_FILES[key])
    return f"{stem}.{variant}{ext}" if variant else OUTPUT_FILES[key]


def outputs_variant(run_dir: str | os.PathLike, analysis: dict) -> str | None:
    """None (the usual names) or :data:`FAILED_VARIANT` when ``analysis`` read damaged data and
    ``run_dir`` already holds a report made from data that was not damaged (an unreadable
    earlier analysis.json beside a report.html counts as good: it is kept too)."""
    if not run_of(analysis).damaged_files:
        return None
    run_dir = os.fspath(run_dir)
    try:
        with open(os.path.join(run_dir, OUTPUT_FILES["analysis"]), encoding="utf-8") as fh:
            earlier = json.load(fh)
    except FileNotFoundError:
        return FAILED_VARIANT if os.path.exists(os.path.join(run_dir, OUTPUT_FILES["html"])) else None
    except (OSError, ValueError):
        return FAILED_VARIANT
    try:
        damaged_before = bool(run_of(earlier).damaged_files)
    except (AnalysisShapeError, KeyError, TypeError):  # not an analysis's shape: kept, as a good one
        return FAILED_VARIANT
    return None if damaged_before else FAILED_VARIANT


def write_outputs(run_dir: str | os.PathLike, analysis: dict, variant: str | None = None) -> dict[str, str]:
    """Write the four outputs into ``run_dir``, under their :func:`output_name` with ``variant``;
    return ``{"analysis"|"html"|"junit"|"markdown": path}``."""
    run_dir = os.fspath(run_dir)
    report_data = build_report_data(analysis)
    texts = {
        "analysis": json.dumps(analysis, indent=1, allow_nan=False) + "\n",
        "html": render_html(report_data),
        "junit": render_junit(analysis),
        "markdown": render_markdown(report_data),
    }
    paths = {}
    for key, text in texts.items():
        paths[key] = os.path.join(run_dir, output_name(key, variant))
        write_text_atomic(paths[key], text)
    return paths


def write_comparison_outputs(out_dir: str | os.PathLike, comparison: dict) -> dict[str, str]:
    """Write comparison.json, comparison.html, junit-compare.xml and comparison.md into ``out_dir``.

    Returns ``{"comparison"|"html"|"junit"|"markdown": path}``; each file is written atomically.
    ``out_dir`` is created when missing. Raises OSError when it cannot be written.
    """
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    texts = {
        "comparison": json.dumps(comparison, indent=1, allow_nan=False) + "\n",
        "html": render_comparison(comparison),
        "junit": render_comparison_junit(comparison),
        "markdown": render_comparison_markdown(build_comparison_data(comparison)),
    }
    paths = {}
    for key, text in texts.items():
        paths[key] = os.path.join(out_dir, COMPARISON_FILES[key])
        write_text_atomic(paths[key], text)
    return paths
