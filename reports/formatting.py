"""Number and time formatting shared by every report view (HTML, Markdown, JUnit).

Every function accepts None and returns ``—`` for it, so a missing number
never raises in a view. Durations are ms, rates per second, shares fractions,
times epoch ns.
"""

from __future__ import annotations

from datetime import UTC, datetime

from tailscope.analysis_model.percentiles import Percentile
from tailscope.support.units import NS_PER_S


def fmt_ms(value) -> str:
    """``12.3 ms`` (3 significant figures below 100 ms), ``1,234 ms`` above, ``—`` for None."""
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f} ms"
    if abs(value) >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def percentile_cells(entry: Percentile) -> dict:
    """Value, CI text and claim text of one percentile (ms; analyzers' ``percentile_ci``)."""
    return {
        "value": fmt_ms(entry.value_ms),
        "ci": "—" if entry.value_ms is None else f"{fmt_ms(entry.ci_low_ms)} – {fmt_ms(entry.ci_high_ms)}",
        "n": fmt_count(entry.n),
        "claimed": "claimed" if entry.claimed else f"not claimed (n = {entry.n:,})",
        "bound": fmt_ms(entry.bound_ms),
    }


def fmt_count(value) -> str:
    return "—" if value is None else f"{int(value):,}"


def fmt_rate(value) -> str:
    return "—" if value is None else f"{value:,.2f} req/s"


def fmt_tokens_per_s(value) -> str:
    return "—" if value is None else f"{value:,.1f} tokens/s"


def fmt_share(value) -> str:
    return "—" if value is None else f"{value:.2%}"


def fmt_signed_ms(value) -> str:
    """``+12.3 ms`` / ``−4.00 ms``: a change in ms with its sign."""
    if value is None:
        return "—"
    return ("+" if value >= 0 else "−") + fmt_ms(abs(value))


def fmt_number(value) -> str:
    """A plain number for evidence tables: ints with separators, floats with 3 significant figures."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:
            return "—"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    return str(value)


def fmt_iso(epoch_ns) -> str:
    if epoch_ns is None:
        return "—"
    moment = datetime.fromtimestamp(epoch_ns / NS_PER_S, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fmt_offset(epoch_ns, origin_ns) -> str:
    """Seconds since the origin (``12.5 s``); hours and minutes beyond an hour (``2 h 03 min 10 s``)."""
    if epoch_ns is None or origin_ns is None:
        return "—"
    seconds = (epoch_ns - origin_ns) / NS_PER_S
    if abs(seconds) < 3600:
        return f"{seconds:.1f} s"
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours} h {rest // 60:02d} min {rest % 60:02d} s"


def fmt_metric(metric, value) -> str:
    """An SLO threshold or observation: a share for error_rate, a rate for achieved_rps, tokens/s for
    output_tokens_per_s, else ms."""
    if metric in ("error_rate", "goodput"):
        return fmt_share(value)
    if metric == "achieved_rps":
        return fmt_rate(value)
    if metric == "output_tokens_per_s":
        return fmt_tokens_per_s(value)
    return fmt_ms(value)


def fault_counts_text(attributes: dict | None) -> str:
    """What a traffic fault observed, in words, from its ground truth's attributes (``observed``:
    the counts its traffic child wrote, faults/llm_traffic.py and faults/burst.py; ``error``):
    ``sent 1,204 · answered 1,190 · rejected 14 (429: 2, other 4xx: 12) · errors 0`` and the
    failure when it stopped early; ``""`` for a fault that counts no requests."""
    attributes = attributes or {}
    observed = attributes.get("observed") or {}
    if not isinstance(observed, dict):
        return ""
    sent = observed.get("sent", observed.get("attempts"))
    parts = []
    if sent is not None:
        rejected = {label: observed.get(key) or 0 for key, label in
                    (("rejected_429", "429"), ("rejected_4xx", "other 4xx"), ("other_status", "other status"))}
        total = sum(rejected.values())
        detail = ", ".join(f"{label}: {count:,}" for label, count in rejected.items() if count)
        parts = [f"sent {int(sent):,}", f"answered {int(observed.get('ok') or 0):,}",
                 f"rejected {total:,}" + (f" ({detail})" if detail else ""),
                 f"errors {int(observed.get('errors') or 0):,}"]
        held = (observed.get("skipped") or 0) + (observed.get("backed_off") or 0)
        if held:
            parts.append(f"not sent {held:,} (in-flight cap or back off)")
        sizing = observed.get("prompt_sizing")
        if sizing == "calibrated" and observed.get("tokens_per_word"):
            parts.append(f"prompts sized at {observed['tokens_per_word']:.2f} server tokens per word")
        elif sizing:
            parts.append(f"prompts sized by {sizing}")
    error = attributes.get("error")
    if error:
        parts.append(str(error))
    return " · ".join(parts)
