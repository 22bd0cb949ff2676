"""Writing a run's outputs (analysis.json, report.html, junit.xml, summary.md) and a comparison's.

Each file is written atomically (temporary file in the same directory, fsync,
rename): a reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os

from tailscope.reports.compare_html import build_comparison_data, render_comparison
from tailscope.reports.data import build_report_data
from tailscope.reports.html import render_html
from tailscope.reports.junit import render_comparison_junit, render_junit
from tailscope.reports.markdown import render_comparison_markdown, render_markdown

OUTPUT_FILES = {"analysis": "analysis.json", "html": "report.html", "junit": "junit.xml", "markdown": "summary.md"}
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


def write_outputs(run_dir: str | os.PathLike, analysis: dict) -> dict[str, str]:
    """Write the four outputs into ``run_dir``; return ``{"analysis"|"html"|"junit"|"markdown": path}``."""
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
        paths[key] = os.path.join(run_dir, OUTPUT_FILES[key])
        write_text_atomic(paths[key], text)
    return paths


def write_comparison_outputs(out_dir: str | os.PathLike, comparison: dict) -> dict[str, str]:
    """Write comparison.json, comparison.html, junit-compare.xml and comparison.md into ``out_dir``.

    Returns ``{"comparison"|"html"|"junit"|"markdown": path}``; each file is written atomically.
    """
    out_dir = os.fspath(out_dir)
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
