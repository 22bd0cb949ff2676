"""The server's token counts per request, read from its spans, and their use when the client has none.

A preset may say which span attributes carry a request's token counts
(:class:`~.rule_model.TokenAttributes`; vLLM: ``gen_ai.usage.prompt_tokens`` and
``gen_ai.usage.completion_tokens`` on ``llm_request``). :func:`server_token_counts` reads
them for every joined request — the counts of several matched spans of one request add up —
and the stage matrix carries them (``StageMatrix.server_tokens``, aligned with its rows).

The client's own counts come first: ``requests.arrow`` holds the response's ``usage`` when
the server sent one (``token_count_source`` = ``usage``). When it did not (a stream without
``include_usage``: the client counted chunks or words; a plain-HTTP class: no count at all),
:func:`merged_token_counts` takes the server span's count instead and says so
(source ``server_span``).

Cost: one match over the joined spans and one read of the two attributes of the matched rows
(:func:`~.attribute_stages.attribute_numbers`, Arrow's JSON reader), one ``np.bincount`` each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tailscope.analysis_model.stages import ServerTokenTotals
from tailscope.analyzers.inputs.records import take_rows
from tailscope.analyzers.stages.attribute_stages import attribute_numbers
from tailscope.analyzers.stages.rule_model import TokenAttributes
from tailscope.analyzers.stages.span_match import NameCodes, match_spans

#: ``token_count_source`` of a count taken from the server's span.
SERVER_SPAN_SOURCE = "server_span"
#: The client's source that is exact (the response's usage): never replaced.
CLIENT_EXACT_SOURCE = "usage"


@dataclass(frozen=True)
class ServerTokens:
    """Token counts from the server's spans, float64 per row (NaN: the span carried none)."""

    prompt: np.ndarray
    output: np.ndarray
    attributes: TokenAttributes

    def take(self, rows: np.ndarray) -> ServerTokens:
        return ServerTokens(self.prompt[rows], self.output[rows], self.attributes)

    def summary(self) -> ServerTokenTotals:
        """How many rows have a count, the sums of the counts there are, and where they were read
        (``stages.server_tokens``)."""
        has = ~np.isnan(self.prompt) | ~np.isnan(self.output)
        return ServerTokenTotals(int(has.sum()), int(np.nansum(self.prompt)), int(np.nansum(self.output)),
                                 self.attributes.describe())


def server_token_counts(spans: pa.Table, position: np.ndarray, tokens: TokenAttributes, n_positions: int,
                        names: NameCodes | None = None) -> ServerTokens:
    """Per joined-request position, the server's prompt and output token counts (NaN: none)."""
    prompt, output = np.full(n_positions, np.nan), np.full(n_positions, np.nan)
    rows = np.flatnonzero(match_spans(spans, tokens.match, position >= 0, names)) if len(spans) else []
    if len(rows):
        values = attribute_numbers(take_rows(spans.column("attributes"), rows), (tokens.prompt, tokens.output))
        pos = position[rows]
        for out, key in ((prompt, tokens.prompt), (output, tokens.output)):
            present = ~np.isnan(values[key])
            has = np.bincount(pos[present], minlength=n_positions) > 0
            out[has] = np.bincount(pos[present], weights=values[key][present], minlength=n_positions)[has]
    return ServerTokens(prompt, output, tokens)


@dataclass(frozen=True)
class TokenCounts:
    """Per request: prompt and output tokens (float64, NaN: unknown) and where each came from."""

    prompt: np.ndarray
    output: np.ndarray
    source: np.ndarray  # object: the client's token_count_source, SERVER_SPAN_SOURCE, or None


def merged_token_counts(client_prompt: np.ndarray, client_output: np.ndarray, client_source: np.ndarray,
                        request_index: np.ndarray, server: ServerTokens | None) -> TokenCounts:
    """The client's counts, with the server span's where the client had no exact one.

    ``client_*``: one entry per request (NaN / None where the client has none);
    ``request_index``/``server``: the stage matrix's rows and their :class:`ServerTokens`.
    A request takes both server counts when its client source is not ``usage`` and its span
    carried them (each count separately: a missing server count leaves the client's)."""
    prompt = np.array(client_prompt, dtype=np.float64, copy=True)
    output = np.array(client_output, dtype=np.float64, copy=True)
    source = np.array(client_source, dtype=object, copy=True)
    if server is None or len(request_index) == 0:
        return TokenCounts(prompt, output, source)
    inexact = source[request_index] != CLIENT_EXACT_SOURCE
    used = np.zeros(len(request_index), dtype=bool)
    for mine, theirs in ((prompt, server.prompt), (output, server.output)):
        take = inexact & ~np.isnan(theirs)
        mine[request_index[take]] = theirs[take]
        used |= take
    source[request_index[used]] = SERVER_SPAN_SOURCE
    return TokenCounts(prompt, output, source)
