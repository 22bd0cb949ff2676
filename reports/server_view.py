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
"""

from __future__ import annotations

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


def server_panels(analysis: dict) -> dict | None:
    """``{"preset", "panels": [{"id", "title", "unit", "series": [{"name", "role", "metric", "x", "y"}]}]}``
    from ``server_load``; None when the run's preset maps no series it has."""
    load = analysis.get("server_load")
    if not load or not load.get("roles"):
        return None
    origin = analysis["run"].get("load_start_ns") or analysis["run"].get("start_ns") or 0
    x = [round((t - origin) / NS_PER_S, 6) for t in load["t_ns"]]
    panels = []
    for panel_id, title, unit, members in SERVER_PANELS:
        series = []
        for role, label, scale in members:
            entry = load["roles"].get(role)
            if entry is None:
                continue
            y = [None if v is None else v * scale for v in entry["values"]]
            xs, ys = _reduced(x, y)
            series.append({"name": label, "role": role, "metric": entry["metric"],
                           "x": [round(v, 6) for v in xs], "y": ys})
        if panel_id == "server-prefill" and series:
            other = other_traffic_chart(analysis)
            if other and other["prompt_tokens_per_s"] is not None:
                series.append({"name": "of which other traffic's prompts", "role": "other_traffic", "metric": "other_traffic",
                               "x": other["x"], "y": other["prompt_tokens_per_s"]})
        if series:
            panels.append({"id": panel_id, "title": title, "unit": unit, "series": series})
    if not panels:
        return None
    return {"preset": PRESET_NAMES.get(load["preset"], load["preset"]), "panels": panels,
            "metrics": ", ".join(s["metric"] for p in panels for s in p["series"] if s["role"] != "other_traffic"),
            "step_s": load.get("step_s")}


def other_traffic_chart(analysis: dict) -> dict | None:
    """The other traffic per window: ``{"x", "requests_per_s", "prompt_tokens_per_s"}`` (x: each
    window's middle, s since the load start; prompt tokens null when the spans carry none);
    None when the server answered no request besides ours."""
    other = analysis.get("other_traffic") or {}
    windows = other.get("windows") or []
    if not other.get("requests") or not windows:
        return None
    origin = analysis["run"].get("load_start_ns") or analysis["run"].get("start_ns") or 0
    width = float(other.get("window_s") or 1.0)
    x = [round((w["start_ns"] - origin) / NS_PER_S + width / 2, 6) for w in windows]
    requests = [w["requests"] / width for w in windows]
    prompt = [None if w.get("prompt_tokens") is None else w["prompt_tokens"] / width for w in windows]
    xs, ys = _reduced(x, requests)
    return {"x": [round(v, 6) for v in xs], "requests_per_s": ys,
            "prompt_tokens_per_s": _reduced(x, prompt)[1] if any(v is not None for v in prompt) else None}


def other_traffic_text(analysis: dict) -> str | None:
    """One sentence on the other traffic (what it is, how much, where it is drawn); None when the
    run joined no server span (nothing could be told apart)."""
    other = analysis.get("other_traffic")
    if other is None or not (analysis.get("stages") or {}).get("joined_requests"):
        return None
    if not other.get("requests"):
        return ("Other traffic: none — every server span the receiver got belongs to one of our requests, "
                "so the server served only this load.")
    tokens = []
    if other.get("prompt_tokens") is not None:
        tokens.append(f"{fmt_count(other['prompt_tokens'])} prompt tokens")
    if other.get("output_tokens") is not None:
        tokens.append(f"{fmt_count(other['output_tokens'])} output tokens")
    return (f"Other traffic: the server also answered {fmt_count(other['requests'])} requests that tailscope did not send "
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


def slow_split_data(analysis: dict) -> dict | None:
    """``stages.slow_split`` as pre-formatted rows and its definition in words; None when absent
    or when no request was slow."""
    split = (analysis.get("stages") or {}).get("slow_split")
    if not split or not split["slow_requests"] or not split["stages"]:
        return None
    names = {"ttft": "TTFT", "tpot": "TPOT", "latency": "latency"}
    rule = " or ".join(f"{names.get(k, k)} above the run's P99 (from {fmt_ms(v)})" for k, v in split["thresholds_ms"].items() if v is not None)
    rows = [{"stage": s["stage"], "normal": _cell(s["normal_mean_ms"]), "slow": _cell(s["slow_mean_ms"]),
             "normal_p50": _cell(s["normal_p50_ms"]), "slow_p50": _cell(s["slow_p50_ms"]),
             "growth": _growth(s["slow_mean_ms"], s["normal_mean_ms"]),
             "grew": (s["slow_mean_ms"] or 0) - (s["normal_mean_ms"] or 0)} for s in split["stages"]]
    largest = max(rows, key=lambda r: r["grew"])
    for r in rows:
        r["dominant"] = r is largest and largest["grew"] > 0
    tokens = split.get("tokens")
    token_text = None
    if tokens:
        slow, normal = tokens["slow"], tokens["normal"]
        token_text = (f"Mean prompt {fmt_number(slow['prompt'])} tokens (slow) against {fmt_number(normal['prompt'])} (normal); "
                      f"mean output {fmt_number(slow['output'])} against {fmt_number(normal['output'])}: prefill time grows with "
                      "the prompt and decode time with the output, so compare these before reading a stage's growth as the server's.")
    per_token = split.get("decode_per_output_token_ms")
    if per_token:
        rows.append({"stage": "decode per output token", "normal": _cell(per_token["normal"]), "slow": _cell(per_token["slow"]),
                     "normal_p50": "", "slow_p50": "", "growth": _growth(per_token["slow"], per_token["normal"]),
                     "grew": 0.0, "dominant": False})
    by_llm = "ttft" in split["by"]
    return {"rule": rule, "slow": fmt_count(split["slow_requests"]), "normal": fmt_count(split["normal_requests"]),
            "why": ("an LLM request's end-to-end latency grows with the output it asked for, so slow means slow to "
                    "its first token or per output token" if by_llm else "slow means above the run's P99 latency"),
            "rows": rows, "tokens": token_text}


def slow_split_chart(analysis: dict) -> dict | None:
    """``{"names", "normal", "slow"}``: each stage's mean ms per group (null where a group has none)."""
    split = (analysis.get("stages") or {}).get("slow_split")
    if not split or not split["slow_requests"] or not split["stages"]:
        return None
    return {"names": [s["stage"] for s in split["stages"]], "normal": [s["normal_mean_ms"] for s in split["stages"]],
            "slow": [s["slow_mean_ms"] for s in split["stages"]]}
