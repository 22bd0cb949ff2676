"""The lab's summary page: a lab page-data dict → a self-contained ``lab.html``.

The data dict is built by the lab (tailscope.lab.outputs.lab_page_data) from
``lab.json``: display strings only — ``suite``, ``experiment_count``, ``created``
(ISO time, UTC), ``status``, ``score_headers`` and ``score_rows`` (lists of strings),
``control`` (one line), ``experiment_headers`` and ``experiments`` (each
``{"cells": [str, ...], "report": relative path of its report.html or None}``).

The template (templates/lab.html) only loops over them. jinja2 escapes every
string (cause names and paths come from analyses and are untrusted); the page has
no script and loads nothing (its Content-Security-Policy is ``default-src 'none'``).
"""

from __future__ import annotations

from tailscope.reports.html import environment

LAB_TEMPLATE = "lab.html"


def render_lab_page(data: dict) -> str:
    """``lab.html`` for one lab page-data dict (see the module docstring)."""
    return environment().get_template(LAB_TEMPLATE).render(data=data)
