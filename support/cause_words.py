"""The causes tailscope names, in words: what the analysis writes and the report shows.

A leaf module (it imports nothing from tailscope), so the analyzers' sentences
("checked GC pauses of the target, CPU contention, …") and the report's cause
titles use the same words. Keys are cause kinds (a finding's ``kind``, a
detector's name); :func:`cause_title` falls back to the kind with its
underscores as spaces for a cause not listed here (a user's own detector).
"""

from __future__ import annotations

#: Cause kind → its name in a sentence.
CAUSE_TITLES = {
    "gc": "GC pauses of the target",
    "gc_pause": "GC pauses of the target",
    "process_stall": "a stall of the target's process (from its spans)",
    "cpu_throttling": "CPU throttling (CFS quota)",
    "cpu_contention": "CPU contention",
    "swap": "memory paging (swap)",
    "io_stall": "storage I/O stalls",
    "kv_cache_pressure": "KV-cache pressure (LLM server)",
    "prefill_interference": "prefill interference (long prompts, LLM server)",
    "queue_saturation": "queue saturation",
    "gpu_throttling": "GPU throttling",
    "generator": "the load generator",
    "unexplained": "no known cause",
}

#: Cause kind → how a run gets the inputs to check it, said where a report lists it as not checked.
HOW_TO_CHECK = {
    "gc": ("the target sent no GC pauses and exported no runtime GC metrics (jvm.gc.duration, "
           "v8js.gc.duration, dotnet.gc.pause.time, Go's GC pause metrics, cpython.gc.collections; "
           "docs/receiver.md); the 20 lines under 'GC pauses from any Python service' in "
           "docs/tracing.md make a service send them"),
}


def cause_title(kind: str) -> str:
    """The words for a cause kind (``"cpu_throttling"`` → ``"CPU throttling (CFS quota)"``)."""
    return CAUSE_TITLES.get(kind) or str(kind).replace("_", " ")


def word_list(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = [str(i) for i in items]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
