"""Markdown summaries for CI job pages (e.g. ``$GITHUB_STEP_SUMMARY``).

Plain GitHub-flavoured Markdown: headings, tables, lists; no HTML beyond
escaped text. Every run string goes through :func:`cell`, so a span name or
error message can neither break a table nor inject markup.
"""

from __future__ import annotations

import html


def cell(text) -> str:
    """A Markdown table cell: HTML-escaped, pipes, backticks and newlines neutralised."""
    return html.escape(str(text)).replace("|", "\\|").replace("`", "\\`").replace("\n", " ")


def verdict_lines(report_data: dict) -> list[str]:
    verdict = report_data["verdict"]
    lines = [f"## {cell(report_data['title'])}: **{verdict['label']}**", ""]
    if verdict["detail"]:  # an incomplete run's covered span, or what would make it conclusive
        lines += [f"**{verdict['label']}:** {cell(verdict['detail'])}", ""]
    rates = report_data["rates"]
    lines.append(f"{rates['requests']} requests in {rates['duration']}; achieved {rates['achieved']} of "
                 f"{rates['offered']} offered; errors {report_data['errors']['count']} ({report_data['errors']['rate']}).")
    if report_data["goodput"]:
        lines.append(f"Goodput {report_data['goodput']['share']} ({cell(report_data['goodput']['definition'])}).")
    if report_data["loop"]:
        lines.append(f"> {cell(report_data['loop'])}")
    lines.append("")
    if verdict["rows"]:
        lines += ["| objective | observed | threshold | result | claimed |", "| --- | ---: | ---: | --- | --- |"]
        lines += [f"| {cell(r['text'])} | {r['observed']} | {r['threshold']} | {r['result']} | {r['claimed']} |"
                  for r in verdict["rows"]]
        lines.append("")
    return lines


def spike_lines(spikes: list[dict]) -> list[str]:
    if not spikes:
        return ["No P99 spike rose significantly above the baseline.", ""]
    lines = [f"**{len(spikes)} spike(s):**", "", "| # | window | latency P99 | baseline latency P99 | top cause | grew most |",
             "| ---: | --- | ---: | ---: | --- | --- |"]
    lines += [f"| {s['number']} | {s['window']} | {s['p99']} | {s['baseline']} | "
              f"{cell(s['top_cause'])} ({s['top_confidence']}){', minor' if s.get('minor') else ''} | "
              f"{cell(s['dominant'])} |" for s in spikes[:50]]
    if len(spikes) > 50:
        lines.append(f"| | … {len(spikes) - 50} more in analysis.json | | | | |")
    lines.append("")
    lines += [f"- spike {s['number']}: {cell(s['summary'])}" for s in spikes[:50] if s["summary"]]
    return lines + [""]


def llm_lines(llm: dict | None) -> list[str]:
    """An LLM run's figures (reports/llm_view.py ``llm_data``): requests, tokens, output rate and goodput
    in one line, then TTFT, TPOT, ITL, chunk gap and end-to-end P50/P99 (in ms) with the P99's CI and
    claim, the reasoning / tool-call / image / rerank rows when there are any, the tokens per content
    chunk and what ITL measures, and the TTFT/TPOT spikes; nothing for a run without OpenAI-API requests."""
    if not llm:
        return []
    tokens = {t["what"]: t["sum"] for t in llm["tokens"]}
    goodput = llm["goodput"]
    lines = [f"**LLM:** {llm['requests']} OpenAI-API requests ({llm['errors']} failed); {tokens.get('prompt', '—')} prompt and "
             f"{tokens.get('output', '—')} output tokens, output {llm['rate']['aggregate']}; "
             f"LLM goodput {goodput['share']} ({goodput['good']} of {goodput['total']}).", "",
             "| metric | P50 | P99 | P99 95% CI | early stopping |", "| --- | ---: | ---: | ---: | --- |"]
    lines += [f"| {cell(r['metric'])} | {r['p50']} | {r['p99']} | {r['p99_ci']} | {r['p99_claimed']} |" for r in llm["rows"]]
    lines.append("")
    kinds = llm.get("kinds")
    if kinds:  # reasoning, tool calls, images, rerank/score (reports/kinds_view.py)
        lines += ["| reasoning, tool calls, images, rerank/score | P50 | P99 | P99 95% CI | early stopping |",
                  "| --- | ---: | ---: | ---: | --- |"]
        lines += [f"| {cell(r['metric'])} | {r['p50']} | {r['p99']} | {r['p99_ci']} | {r['p99_claimed']} |"
                  for r in kinds["rows"]]
        lines.append("")
    sessions = llm.get("sessions")
    if sessions:  # multi-turn sessions (reports/sessions_view.py)
        lines += [f"**Sessions:** {sessions['sessions']} ({sessions['complete']} complete, {sessions['failed']} failed, "
                  f"{sessions['cut']} cut by the run's end); TTFT P50 turn 1 {sessions['first_p50']}, later turns "
                  f"{sessions['later_p50']} (later ÷ first {sessions['ratio']}); session duration P50 "
                  f"{sessions['duration']['p50']}, P99 {sessions['duration']['p99']}.", ""]
    per_chunk = next((t for t in llm["tokens"] if t["what"] == "per content chunk"), None)
    if per_chunk is not None:
        lines += [f"Tokens per content chunk: mean {per_chunk['mean']}, P50 {per_chunk['p50']}, P99 {per_chunk['p99']} "
                  f"({per_chunk['sum']}). ITL is each gap between content chunks ÷ the chunk's tokens: its mean is "
                  "the mean time per token, its percentiles average a chunk's tokens; the chunk gap is the wait itself.", ""]
    lines += [f"- {s['metric']} spike {s['window']}: {s['metric']} P99 {s['p99']} vs {s['baseline']} baseline, "
              f"{s['slow']} of {s['requests']} requests above the baseline {s['metric']} P99" for s in llm["spikes"][:20]]
    return lines + ([""] if llm["spikes"] else [])


def render_markdown(report_data: dict) -> str:
    """Verdict, goodput, SLO table, headline percentiles, an LLM run's TTFT/TPOT/ITL, tokens and goodput,
    spikes with top causes, findings, warnings."""
    lines = verdict_lines(report_data)
    lines += ["| percentile | value | 95% CI | early stopping |", "| --- | ---: | ---: | --- |"]
    lines += [f"| latency {p['label']} | {p['value']} | {p['ci']} | {p['claimed']} |" for p in report_data["headline"]]
    lines.append("")
    lines += llm_lines(report_data.get("llm"))
    lines += spike_lines(report_data["spikes"])
    if report_data.get("findings"):
        lines.append("**Findings:**")
        lines += [f"- {cell(f['title'])} ({cell(f['severity'])}): {cell(f['summary'])}" for f in report_data["findings"]]
        lines.append("")
    if report_data["warnings"]:
        lines.append("**Warnings:**")
        lines += [f"- {cell(w['code'])}: {cell(w['message'])}" for w in report_data["warnings"]]
        lines.append("")
    return "\n".join(lines)


def render_comparison_markdown(comparison_data: dict) -> str:
    """A comparison (:func:`~tailscope.reports.compare_html.build_comparison_data`) as a job summary."""
    lines = [f"## {cell(comparison_data['title'])}: **{comparison_data['verdict']['label']}**", ""]
    if comparison_data["verdict"]["summary"]:
        lines += [cell(comparison_data["verdict"]["summary"]), ""]
    if comparison_data.get("method"):
        lines += [cell(comparison_data["method"]), ""]
    for warning in (comparison_data.get("environment") or {}).get("warnings") or []:
        lines.append(f"- **environment**: {cell(warning)}")
    if (comparison_data.get("environment") or {}).get("warnings"):
        lines.append("")
    if comparison_data["checks"]:
        lines += ["| check | result | detail |", "| --- | --- | --- |"]
        lines += [f"| {cell(c['name'])} | {c['result']} | {cell(c['message'])} |" for c in comparison_data["checks"]]
        lines.append("")
    if comparison_data["percentiles"]:
        lines += ["| scope | figure | baseline | current | change (interval) | |", "| --- | --- | ---: | ---: | ---: | --- |"]
        lines += [f"| {cell(r['scope'])} | {r['figure']} | {r['baseline']} | {r['current']} | "
                  f"{r['change']} ({r['change_ci']}) | {r['judgement']} |" for r in comparison_data["percentiles"]]
        lines.append("")
    if comparison_data.get("llm"):
        lines += ["| LLM figure | baseline | current | change (interval) | |", "| --- | ---: | ---: | ---: | --- |"]
        lines += [f"| {cell((r['metric'] + ' ' + r['percentile']).strip())} | {r['baseline']} | {r['current']} | "
                  f"{r['change']} ({r['change_ci']}) | {r['judgement']} |" for r in comparison_data["llm"]]
        lines.append("")
    if comparison_data["changed_stage"]:
        stage = comparison_data["changed_stage"]
        lines += [f"Stage that changed most: **{cell(stage['stage'])}** ({stage['change']}). {cell(stage['summary'])}", ""]
    return "\n".join(lines)
