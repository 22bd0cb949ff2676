"""The self-contained HTML report: jinja2 (autoescape on) + plotly's bundled JS.

One file, no network. plotly.min.js (~4.8 MB) from the installed ``plotly``
package travels gzip-compressed and base64-encoded (~1.96 MB) in a
``<script type="text/plain">`` block; a small loader decodes it with the
browser's ``DecompressionStream("gzip")`` (Chromium ≥ 80, Firefox ≥ 113,
Safari ≥ 16.4) and evaluates it, then the page's JS draws the charts. A
browser without ``DecompressionStream`` shows every table and a note that the
charts need a newer browser. ``render_html(..., compress_plotly=False)``
inlines plotly.min.js as is.

Chart data travels as JSON in a ``<script type="application/json">`` block
with ``<``, ``>`` and ``&`` written as ``\\u003c``/``\\u003e``/``\\u0026`` so no
string can close the block. Every string from the run (span names, errors,
scenario) is escaped by jinja2 or set with ``textContent`` / entity-escaped
by the page's JS; nothing from the run is executed. A Content-Security-Policy
of ``default-src 'none'`` forbids any fetch.
"""

from __future__ import annotations

import base64
import gzip
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

import jinja2
from markupsafe import Markup

TEMPLATES = Path(__file__).with_name("templates")
#: The page's own scripts, concatenated in this order after plotly is ready.
APP_SCRIPTS = ("report_common.js", "report.js")


@lru_cache(maxsize=1)
def plotly_source() -> str:
    """plotly.min.js shipped inside the installed plotly package (~4.8 MB)."""
    return (resources.files("plotly") / "package_data" / "plotly.min.js").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def plotly_gzip_base64() -> str:
    """plotly.min.js gzip-compressed (level 9, mtime 0: reproducible) and base64-encoded (~1.96 MB)."""
    packed = gzip.compress(plotly_source().encode("utf-8"), compresslevel=9, mtime=0)
    return base64.b64encode(packed).decode("ascii")


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


def template_text(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def page_assets(scripts: tuple[str, ...], compress_plotly: bool) -> dict:
    """The CSS, plotly (packed or inline), loader and app JS every page template embeds."""
    app = "\n".join(template_text(name) for name in scripts)
    return {
        "css": Markup(template_text("report.css").replace("</style", "<\\/style")),  # our own file: not escaped
        "plotly_packed": Markup(plotly_gzip_base64()) if compress_plotly else None,
        "plotly_inline": None if compress_plotly else Markup(inline_script(plotly_source())),
        "loader_js": Markup(inline_script(template_text("loader.js"))),
        "app_js": Markup(inline_script(app)),
    }


def render_page(template: str, data: dict, charts, scripts: tuple[str, ...], compress_plotly: bool = True) -> str:
    """Render a page template with ``data`` (escaped by jinja2) and ``charts`` (as a JSON block)."""
    return environment().get_template(template).render(
        data=data, chart_json=Markup(json_for_script(charts)), **page_assets(scripts, compress_plotly))


def render_html(report_data: dict, compress_plotly: bool = True) -> str:
    """The report page for one :func:`~tailscope.reports.data.build_report_data` dict."""
    return render_page("report.html", report_data, report_data["charts"], APP_SCRIPTS, compress_plotly)
