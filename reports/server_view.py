"""What the server did, beside our latencies: its load panels, the other traffic, and the slow/normal stage split.

Reads only analysis.json (docs/analysis-schema.md):

* :func:`server_panels` — the ``server_load`` section (the stage preset's metric roles on one
  grid) as panels drawn on the shared time axis under the TTFT/TPOT/tokens charts: requests
  waiting and running, KV-cache usage (%), preemptions per second and prompt tokens prefilled
  per second (with the other traffic's share of them when its spans carry prompt counts), each
  where the run has its role. x in seconds since the load start.
* :func:`other_traffic_chart` / :func:`other_traffic_text` — the ``other_traffic`` section (spans
  joining none of our requests) as a per-window requests/s series drawn as a shaded area on the
  latency chart's right axis, and one sentence saying what it is.
* :func:`slow_split_data` / :func:`slow_split_chart` — ``stages.slow_split``: each stage's mean
  for the slow requests (above the run's P99 of TTFT or TPOT; of latency in a run without
  LLM requests) against the normal ones, as a table and grouped bars.

Each function takes the section it draws as its type (:mod:`tailscope.analysis_model.server`,
:class:`~tailscope.analysis_model.stages.SlowSplit`), decoded once by the report's door
(reports/data.py ``build_report_data`` through reports/upgrade.py ``server_load_of``,
``other_traffic_of``, ``stages_of``); a section an older analysis lacks is None (nothing drawn).
Chart x counts from ``origin_ns`` (epoch ns: the run's ``load_origin_ns``, 0 where unknown).
"""

from __future__ import annotations

from tailscope.analysis_model.server import OtherTraffic, ServerLoad
from tailscope.analysis_model.stages import SlowSplit
from tailscope.reports.downsample import lttb
from tailscope.reports.formatting import NS_PER_S, fmt_count, fmt_ms, fmt_number

MAX_LINE_POINTS = 2000

#: The server panels, in page order: (id, title, unit, [(role, label, scale)]). A panel is drawn
#: when the run has one of its roles; ``scale`` converts the role's unit to the panel's.
SERVER_PANELS = (
    ("server-queue", "Requests waiting and running on the server", "requests",
     (("waiting", "waiting (queued, incl. preempted)", 1.0), ("running", "running (in the batch)", 1.0))),
    ("server-kv", "KV-cache usage", "% of the cache", (("kv_usage", "KV cache in use", 100.0),)),
    ("server-preemptions", "Preemptions", "per second", (("preemptions", "preemptions/s", 1.0),)),
    ("server-prefill", "Prompt tokens prefilled by the server", "tokens/s",
     (("prompt_tokens", "prompt tokens/s (all traffic)", 1.0),)),
)

#: Presets' display names.
PRESET_NAMES = {"vllm": "vLLM", "tgi": "TGI", "sglang": "SGLang", "triton": "Triton"}


def _reduced(x: list[float], y: list) -> tuple[list, list]:
    return (x, y) if len(x) <= MAX_LINE_POINTS else lttb(x, y, MAX_LINE_POINTS)


def _drawn(split: SlowSplit | None) -> SlowSplit | None:
    """``stages.slow_split`` when it has slow requests and stages to compare; else None."""
    return split if split is not None and split.slow_requests and split.stages else None


def server_panels(load: ServerLoad | None, other: OtherTraffic | None, origin_ns: int) -> dict | None:
    """``{"preset", "panels": [{"id", "title", "unit", "series": [{"name", "role", "metric", "x", "y"}]}]}``
    from ``server_load`` (the prefill panel adds ``other``'s prompt tokens/s where its spans carry
    them); x in s since ``origin_ns`` (epoch ns); None when the run's preset maps no series it has."""
    if load is None or not load.roles:
        return None
    x = [round((t - origin_ns) / NS_PER_S, 6) for t in load.t_ns]
    panels = []
    for panel_id, title, unit, members in SERVER_PANELS:
        series = []
        for role, label, scale in members:
            if role not in load.roles:
                continue
            entry = load.roles[role]
            y = [None if v is None else v * scale for v in entry.values]
            xs, ys = _reduced(x, y)
            series.append({"name": label, "role": role, "metric": entry.metric,
                           "x": [round(v, 6) for v in xs], "y": ys})
        if panel_id == "server-prefill" and series:
            other_chart = other_traffic_chart(other, origin_ns)
            if other_chart and other_chart["prompt_tokens_per_s"] is not None:
                series.append({"name": "of which other traffic's prompts", "role": "other_traffic", "metric": "other_traffic",
                               "x": other_chart["x"], "y": other_chart["prompt_tokens_per_s"]})
        if series:
            panels.append({"id": panel_id, "title": title, "unit": unit, "series": series})
    if not panels:
        return None
    return {"preset": PRESET_NAMES.get(load.preset, load.preset), "panels": panels,
            "metrics": ", ".join(s["metric"] for p in panels for s in p["series"] if s["role"] != "other_traffic"),
            "step_s": load.step_s}


def other_traffic_chart(other: OtherTraffic | None, origin_ns: int) -> dict | None:
    """The other traffic per window: ``{"x", "requests_per_s", "prompt_tokens_per_s"}`` (x: each
    window's middle, s since ``origin_ns`` (epoch ns); prompt tokens null when the spans carry none);
    None when the server answered no request besides ours."""
    if other is None or not other.requests or not other.windows:
        return None
    width = other.window_s
    x = [round((w.start_ns - origin_ns) / NS_PER_S + width / 2, 6) for w in other.windows]
    requests = [w.requests / width for w in other.windows]
    prompt = [None if w.prompt_tokens is None else w.prompt_tokens / width for w in other.windows]
    xs, ys = _reduced(x, requests)
    return {"x": [round(v, 6) for v in xs], "requests_per_s": ys,
            "prompt_tokens_per_s": _reduced(x, prompt)[1] if any(v is not None for v in prompt) else None}


def other_traffic_text(other: OtherTraffic | None, joined_requests: int) -> str | None:
    """One sentence on the other traffic (what it is, how much, where it is drawn); None when the
    run joined no server span (``joined_requests`` 0, ``stages``: nothing could be told apart)."""
    if other is None or not joined_requests:
        return None
    if not other.requests:
        return ("Other traffic: none — every server span the receiver got belongs to one of our requests, "
                "so the server served only this load.")
    tokens = []
    if other.prompt_tokens is not None:
        tokens.append(f"{fmt_count(other.prompt_tokens)} prompt tokens")
    if other.output_tokens is not None:
        tokens.append(f"{fmt_count(other.output_tokens)} output tokens")
    return (f"Other traffic: the server also answered {fmt_count(other.requests)} requests that tailscope did not send "
            f"(server spans of traces that join none of our requests{'; ' + ', '.join(tokens) if tokens else ''}). "
            "It shares the server with our load; the purple area on the latency chart (right axis) is its requests/s.")


def _cell(value) -> str:
    return fmt_ms(value) if value is not None else "—"


def _growth(slow, normal) -> str:
    if slow is None or normal is None:
        return "—"
    if normal <= 0:
        return f"+{fmt_ms(slow - normal)}"
    return f"×{slow / normal:.1f}" if slow >= normal else f"×{slow / normal:.2f}"


def slow_split_data(split: SlowSplit | None) -> dict | None:
    """``stages.slow_split`` as pre-formatted rows and its definition in words; None when absent
    or when no request was slow."""
    split = _drawn(split)
    if split is None:
        return None
    names = {"ttft": "TTFT", "tpot": "TPOT", "latency": "latency"}
    rule = " or ".join(f"{names.get(k, k)} above the run's P99 (from {fmt_ms(v)})" for k, v in split.thresholds_ms.items() if v is not None)
    rows = [{"stage": s.stage, "normal": _cell(s.normal_mean_ms), "slow": _cell(s.slow_mean_ms),
             "normal_p50": _cell(s.normal_p50_ms), "slow_p50": _cell(s.slow_p50_ms),
             "growth": _growth(s.slow_mean_ms, s.normal_mean_ms),
             "grew": (s.slow_mean_ms or 0) - (s.normal_mean_ms or 0)} for s in split.stages]
    largest = max(rows, key=lambda r: r["grew"])
    for r in rows:
        r["dominant"] = r is largest and largest["grew"] > 0
    tokens = split.tokens
    token_text = None
    if tokens is not None:
        slow, normal = tokens.slow, tokens.normal
        token_text = (f"Mean prompt {fmt_number(slow.prompt)} tokens (slow) against {fmt_number(normal.prompt)} (normal); "
                      f"mean output {fmt_number(slow.output)} against {fmt_number(normal.output)}: prefill time grows with "
                      "the prompt and decode time with the output, so compare these before reading a stage's growth as the server's.")
    per_token = split.decode_per_output_token_ms
    if per_token is not None:
        rows.append({"stage": "decode per output token", "normal": _cell(per_token.normal), "slow": _cell(per_token.slow),
                     "normal_p50": "", "slow_p50": "", "growth": _growth(per_token.slow, per_token.normal),
                     "grew": 0.0, "dominant": False})
    by_llm = "ttft" in split.by
    return {"rule": rule, "slow": fmt_count(split.slow_requests), "normal": fmt_count(split.normal_requests),
            "why": ("an LLM request's end-to-end latency grows with the output it asked for, so slow means slow to "
                    "its first token or per output token" if by_llm else "slow means above the run's P99 latency"),
            "rows": rows, "tokens": token_text}


def slow_split_chart(split: SlowSplit | None) -> dict | None:
    """``{"names", "normal", "slow"}``: each stage's mean ms per group (null where a group has none);
    None when ``stages.slow_split`` is absent or no request was slow."""
    split = _drawn(split)
    if split is None:
        return None
    return {"names": [s.stage for s in split.stages], "normal": [s.normal_mean_ms for s in split.stages],
            "slow": [s.slow_mean_ms for s in split.stages]}
