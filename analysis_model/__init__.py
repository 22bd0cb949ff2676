"""The analysis as types: the shape of ``analysis.json``, written once, in code.

A leaf (it imports only the standard library and ``support``): the analyzers build these
sections and encode them once (:func:`~.codec.encode`); readers — the report, ``compare``, the CLI
— decode them (:func:`~.codec.decode`). analyzers/analysis.schema.json states the same shape for
other tools, with descriptions and units; tests/test_analysis_model.py checks every type below
against it (:func:`~.schema_check.schema_mismatches`). docs/architecture.md, "The analysis
seam", says how a section gains its type.
"""
