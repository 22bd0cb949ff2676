"""Keep Locust's own statistics bounded during long runs.

No Locust import. Locust's ``StatsEntry`` keeps a ``{second: count}`` dict of
requests and of failures per second (``num_reqs_per_sec``,
``num_fail_per_sec``) for the whole run: one entry per second per request name,
about 26 MB a day for two request classes. Locust reads only the last few
seconds of them (current RPS over ``CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW``,
10 s). :func:`trim_per_second_counts` drops the older entries; tailscope's own
per-second numbers come from ``windows.arrow``, not from these dicts.
"""

from __future__ import annotations

import time

#: Seconds of per-second counts kept (Locust reads at most the last 10 s).
KEEP_SECONDS = 30


def trim_per_second_counts(stats, now_s: float | None = None, keep_s: int = KEEP_SECONDS) -> int:
    """Drop per-second counts older than ``keep_s`` from every entry of a Locust
    ``RequestStats`` (entries and total). Returns the number of keys dropped."""
    horizon = int(now_s if now_s is not None else time.time()) - keep_s
    dropped = 0
    entries = list(getattr(stats, "entries", {}).values())
    total = getattr(stats, "total", None)
    if total is not None:
        entries.append(total)
    for entry in entries:
        for counts in (entry.num_reqs_per_sec, entry.num_fail_per_sec):
            old = [second for second in counts if second < horizon]
            for second in old:
                del counts[second]
            dropped += len(old)
    return dropped


def trimming(on_progress, stats):
    """A progress callback that trims ``stats`` before calling ``on_progress`` (may be None)."""

    def callback(progress) -> None:
        trim_per_second_counts(stats)
        if on_progress is not None:
            on_progress(progress)

    return callback
