"""The self-contained HTML report: jinja2 (autoescape on) + plotly's bundled JS.

One file, no network: plotly.min.js from the installed ``plotly`` package,
the page's CSS and JS are inlined; chart data travels as JSON in a
``<script type="application/json">`` block with ``<``, ``>`` and ``&`` written
as ``\\u003c``/``\\u003e``/``\\u0026`` so no string can close the block. Every
string from the run (span names, errors, scenario) is escaped by jinja2 or
set with ``textContent`` by the page's JS; nothing from the run is executed.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).with_name("templates")


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """plotly.min.js shipped inside the installed plotly package (~4.8 MB)."""
    text = (resources.files("plotly") / "package_data" / "plotly.min.js").read_text(encoding="utf-8")
    return inline_script(text)


def inline_script(text: str) -> str:
    """JS safe to place inside a <script> element (no premature ``</script``)."""
    return text.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def json_for_script(data) -> str:
    """JSON that cannot break out of a ``<script type="application/json">`` block."""
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def render_html(report_data: dict) -> str:
    """The report page for one :func:`~tailscope.reports.data.build_report_data` dict."""
    template = environment().get_template("report.html")
    return template.render(
        data=report_data,
        css=(TEMPLATES / "report.css").read_text(encoding="utf-8"),
        app_js=jinja2.utils.markupsafe.Markup(inline_script((TEMPLATES / "report.js").read_text(encoding="utf-8"))),
        plotly_js=jinja2.utils.markupsafe.Markup(plotly_js()),
        chart_json=jinja2.utils.markupsafe.Markup(json_for_script(report_data["charts"])),
    )
