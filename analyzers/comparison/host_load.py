"""Were both sides of a comparison measured on an equally quiet host?

A comparison judges the target, but a run measures the target *on its host*: other processes that
take CPU from it while one side runs make that side slower with no change to the target. Each run's
other processes' CPU (cores: the host's busy CPU − the target's − the generator's, on the target's
own CPUs where it was pinned; analyzers/inputs/cpu_accounting.py) is averaged over its load, and each
side over its runs. When the current side's mean is at least ``OTHERS_CORES_MATERIAL`` (0.3 cores)
above the baseline's, a regression may be the host's: the verdict is INCONCLUSIVE (exit code 3), its
summary gives both figures and asks for a rerun on a quiet host. The other way round (the baseline's
host busier) an improvement may be the host's: said in the message, the verdict unchanged (an
improvement fails no check). Measured: in CI, an A/A comparison of the reference target (3 runs per
side, the same build) said REGRESSION, image P95 10.0 → 11.3 ms (+13%), while a demo and a headless
browser ran beside the current side's runs.
"""

from __future__ import annotations

from tailscope.analysis_model.comparison import HostLoad
from tailscope.analyzers.inputs.cpu_accounting import OTHERS_CORES_MATERIAL, mean_other_processes_cores
from tailscope.analyzers.inputs.records import RequestArrays
from tailscope.analyzers.inputs.run_inputs import RunInputs
from tailscope.analyzers.stages.decomposition import StageMatrix
from tailscope.analyzers.stats.summary import load_period_ns
from tailscope.rundir import Run


def run_other_cores(run: Run, req: RequestArrays, matrix: StageMatrix) -> float | None:
    """Other processes' CPU cores averaged over one run's load (first scheduled send to last end);
    None without the CPU series or requests."""
    period = load_period_ns(req)
    if period is None or period[1] <= period[0]:
        return None
    return mean_other_processes_cores(RunInputs(run, req, matrix, period[0], period[1], 0.0))


def _mean(values: tuple[float | None, ...]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def host_load(baseline_runs: tuple[float | None, ...], current_runs: tuple[float | None, ...],
              material_cores: float = OTHERS_CORES_MATERIAL) -> HostLoad:
    """Each side's other processes' CPU (cores: :func:`run_other_cores` of each of its runs, and
    their mean) and which side's host was busier by at least ``material_cores`` (module docstring)."""
    baseline, current = _mean(baseline_runs), _mean(current_runs)
    busier = message = None
    if baseline is not None and current is not None:
        if current - baseline >= material_cores:
            busier = "current"
            message = (f"the current runs' host was busier: other processes used {current:.2f} CPU cores vs "
                       f"{baseline:.2f} on the baseline's, so a slowdown may be the host's, not the target's; "
                       f"rerun both sides on a quiet host")
        elif baseline - current >= material_cores:
            busier = "baseline"
            message = (f"the baseline runs' host was busier: other processes used {baseline:.2f} CPU cores vs "
                       f"{current:.2f} on the current runs', so a speed-up may be the host's, not the target's")
    return HostLoad(baseline, current, baseline_runs, current_runs, material_cores, busier, message)
