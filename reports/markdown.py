"""A Markdown job summary for CI (e.g. ``$GITHUB_STEP_SUMMARY``), from the report data."""

from __future__ import annotations

import html


def cell(text) -> str:
    """A Markdown table cell: HTML-escaped, pipes and newlines neutralised."""
    return html.escape(str(text)).replace("|", "\\|").replace("\n", " ")


def render_markdown(report_data: dict) -> str:
    """Verdict, SLO table, headline percentiles, rates, spikes and warnings."""
    verdict = report_data["verdict"]
    lines = [f"## {cell(report_data['title'])}: **{verdict['label']}**", ""]
    rates = report_data["rates"]
    lines.append(f"{rates['requests']} requests in {rates['duration']}; achieved {rates['achieved']} of "
                 f"{rates['offered']} offered; errors {report_data['errors']['count']} ({report_data['errors']['rate']}).")
    lines.append("")
    if verdict["rows"]:
        lines += ["| objective | observed | threshold | result | claimed |", "| --- | ---: | ---: | --- | --- |"]
        lines += [f"| {cell(r['text'])} | {r['observed']} | {r['threshold']} | {r['result']} | {r['claimed']} |"
                  for r in verdict["rows"]]
        lines.append("")
    lines += ["| percentile | latency | 95% CI | early stopping |", "| --- | ---: | ---: | --- |"]
    lines += [f"| {p['label']} | {p['value']} | {p['ci']} | {p['claimed']} |" for p in report_data["headline"]]
    lines.append("")
    if report_data["spikes"]:
        lines.append(f"**{len(report_data['spikes'])} spike(s):**")
        lines += [f"- {s['window']}: P99 {s['p99']} vs baseline {s['baseline']}; {cell(s['summary'])}; "
                  f"causes: {', '.join(cell(c['kind']) for c in s['causes'])}" for s in report_data["spikes"]]
        lines.append("")
    if report_data["warnings"]:
        lines.append("**Warnings:**")
        lines += [f"- {cell(w['code'])}: {cell(w['message'])}" for w in report_data["warnings"]]
        lines.append("")
    return "\n".join(lines)
