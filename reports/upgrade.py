"""Read analyses written by older tailscope versions: rename what changed name.

An analysis carries its ``format_version`` (analysis.schema.json). The report
builders read the current names only; :func:`upgrade_analysis` maps an older
analysis onto them so that any analysis.json, however old, still renders.

Format 1.1 renamed the stage ``client_network`` (service time − server span: the
network, the server's accept queue and HTTP layer, a blocked event loop) to
``outside_server``, with the causes' ``client_network_growth_ms`` to
``outside_server_growth_ms``.
"""

from __future__ import annotations

import re

#: Old stage name -> current name, by the format version that renamed it.
RENAMED_STAGES = {"client_network": "outside_server"}
RENAMED_IN = (1, 1)
_OLD_WORD = re.compile(r"\b(" + "|".join(RENAMED_STAGES) + r")(?=\b|_)")


def _version(text) -> tuple[int, int]:
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except (TypeError, ValueError):
        return (1, 0)


def _new_words(text: str) -> str:
    return _OLD_WORD.sub(lambda m: RENAMED_STAGES[m.group(1)], text)


def _rename(value):
    if isinstance(value, dict):
        return {_new_words(key) if isinstance(key, str) else key: _rename(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rename(item) for item in value]
    if isinstance(value, str):
        return _new_words(value)
    return value


def upgrade_analysis(analysis: dict) -> dict:
    """``analysis`` with the current field and stage names: the same dict when it is already
    current (format 1.1 or later), else a renamed copy (the input is not changed): the word
    ``client_network`` (also as a key's prefix, ``client_network_growth_ms``) becomes
    ``outside_server`` in every key and string (stage keys, a finding's stage, the spike
    summaries that quote the stage)."""
    if _version(analysis.get("format_version")) >= RENAMED_IN:
        return analysis
    return _rename(analysis)
