"""Whole-run findings: what is true of the run as a whole rather than of one spike.

Each finding is a plug-in (:class:`~.protocol.FindingCheck`: a ``kind`` and a
function from the analysis inputs to a :class:`~.protocol.Finding` or None),
registered in one place, :mod:`.registry`. The analysis lists what fired as
``findings`` (docs/analysis-schema.md; one page per kind in docs/analyzers/findings.md).
"""
