"""Every whole-run finding, registered in one place (the order the report lists equals severity, then this).

Add a finding by writing its check beside the others (a module of this package)
and registering it here; docs/analyzers/findings.md gets a section for it.
"""

from __future__ import annotations

from tailscope.analysis_model.findings import Finding
from tailscope.analyzers.findings.generator_limited import GENERATOR_LIMITED
from tailscope.analyzers.findings.network import OUTSIDE_SERVER, TCP_DELAYED_ACK
from tailscope.analyzers.findings.protocol import FindingCheck, FindingInputs, run_checks
from tailscope.analyzers.findings.tail import P99_SET_BY
from tailscope.support.registry import Registry

FINDINGS: Registry[FindingCheck] = Registry("finding", key=lambda check: check.kind)
FINDINGS.register(TCP_DELAYED_ACK)
FINDINGS.register(OUTSIDE_SERVER)
FINDINGS.register(GENERATOR_LIMITED)
FINDINGS.register(P99_SET_BY)


def whole_run_findings(inputs: FindingInputs, registry: Registry[FindingCheck] = FINDINGS) -> list[Finding]:
    """The analysis's ``findings``: what every registered check found, most severe first."""
    return run_checks(registry.values(), inputs)
