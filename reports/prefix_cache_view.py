"""The report's prefix-cache figures: the server's hit rate over the run, beside TTFT.

Reads only the analysis's ``llm.prefix_cache`` (analysis_model/llm.py; docs/analysis-schema.md;
analyzers/stats/llm_prefix_cache.py): :func:`prefix_cache_data` is the LLM section's line
(every value a string), :func:`prefix_cache_headline` the verdict's figure; both None when
the server exposes no prefix-cache metric (nothing is shown that was not measured).
"""

from __future__ import annotations

from tailscope.analysis_model.llm import Llm, PrefixCacheGauge
from tailscope.reports.formatting import fmt_count, fmt_offset, fmt_share


def prefix_cache_data(llm: Llm, origin_ns: int | None = None) -> dict | None:
    """``{"hit_rate", "text"}`` of ``llm.prefix_cache`` (``origin_ns``: the run's load start, for the
    offsets of a partial coverage); None without it (an older analysis has none either)."""
    cache = llm.prefix_cache
    if cache is None:
        return None
    if isinstance(cache, PrefixCacheGauge):
        return {"hit_rate": fmt_share(cache.hit_rate),
                "text": f"the mean of the server's own {cache.metric} over the load "
                        f"({fmt_count(cache.readings)} readings)"}
    metrics = cache.metrics
    if not cache.query_tokens:
        return {"hit_rate": "—", "text": f"{metrics.queries} did not move: the server looked up no prompt "
                                         "token in a prefix cache (prefix caching off, or nothing scraped during the load)"}
    span = "over the scrape: other traffic on the server counts too"
    if cache.covers_load is False:
        span = (f"only between the readings at {fmt_offset(cache.first_reading_ns, origin_ns)} and "
                f"{fmt_offset(cache.last_reading_ns, origin_ns)}: the scrapes did not cover the whole load")
    return {"hit_rate": fmt_share(cache.hit_rate),
            "text": f"{fmt_count(cache.hit_tokens)} of {fmt_count(cache.query_tokens)} prompt tokens found in the "
                    f"cache ({metrics.hits} ÷ {metrics.queries}, {span})"}


def prefix_cache_headline(llm: Llm, origin_ns: int | None = None) -> dict | None:
    """``{"label", "note"}`` for the verdict when the server reported a hit rate; else None."""
    data = prefix_cache_data(llm, origin_ns)
    if data is None or data["hit_rate"] == "—":
        return None
    return {"label": f"prefix-cache hit rate {data['hit_rate']}", "note": data["text"]}
