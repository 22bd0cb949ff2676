"""Run directory → analysis → report files, and the comparison with a baseline run.

The library half of ``tailscope run``/``report``/``compare``, the lab's experiments
and the ``locust`` command's end-of-test report: it analyses, writes the outputs and
returns what it wrote; it prints nothing and decides no exit code (the CLI does:
tailscope.cli.commands.common). Errors are raised: :class:`ReportWriteError` when
the outputs cannot be written, ``RunDirError`` when a run directory cannot be read.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from tailscope.analysis_model.codec import encode
from tailscope.analysis_model.comparison import Comparison
from tailscope.analysis_model.run import DamagedFile
from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.comparison.baseline import CompareRules, compare
from tailscope.reports.junit import render_junit
from tailscope.reports.upgrade import run_of, verdict_of
from tailscope.reports.writer import outputs_variant, write_comparison_outputs, write_outputs, write_text_atomic
from tailscope.rundir.manifest import release_stale_reserves

#: Relative change that counts as a regression when significant (``--threshold``).
DEFAULT_THRESHOLD = 0.10
#: Confidence of the comparison's bootstrap intervals (``--confidence``).
DEFAULT_CONFIDENCE = 0.95


class ReportWriteError(RuntimeError):
    """The analysis was computed but its files could not be written into the run directory.

    ``analysis`` is the computed analysis (a summary can still be shown); ``str()``
    says why and how to retry (``tailscope report RUN_DIR`` once there is space)."""

    def __init__(self, run_dir: str, analysis: dict, cause: OSError):
        reason = "disk full" if cause.errno == errno.ENOSPC else (cause.strerror or str(cause))
        super().__init__(f"could not write the report into {run_dir}: {reason}; "
                         f"free space and run `tailscope report {run_dir}`")
        self.run_dir = run_dir
        self.analysis = analysis


@dataclass(frozen=True)
class RunReport:
    """An analysed run: its analysis dict and the files written
    (``{"analysis"|"html"|"junit"|"markdown": path}``)."""

    run_dir: str
    analysis: dict
    paths: dict
    #: True when the analysis read damaged data and its files were written beside an earlier
    #: good report (``report.failed.html`` …), which was kept.
    kept_earlier: bool = False

    @property
    def passed(self) -> bool:
        """Whether the run's verdict passed (a run without SLOs passes)."""
        return verdict_of(self.analysis).passed

    @property
    def damaged(self) -> tuple[DamagedFile, ...]:
        """The run's damaged data files (``run.damaged_files`` of the analysis); none when none."""
        return run_of(self.analysis).damaged_files


@dataclass(frozen=True)
class BaselineComparison:
    """A run compared with a baseline run: the comparison (typed; comparison.json is its encoding)
    and the files written (``{"comparison"|"html"|"junit"|"markdown": path}``)."""

    comparison: Comparison
    paths: dict

    @property
    def regressed(self) -> bool:
        """Whether any check failed (a percentile or LLM figure regressed): the comparison's verdict."""
        return self.comparison.verdict.regressed


def analyse_and_write(run_dir: str, window_s: float = 1.0) -> RunReport:
    """Analyse ``run_dir`` (windows of ``window_s`` seconds) and write analysis.json,
    report.html, junit.xml and report.md into it.

    A disk reserve left behind by a killed harness is released first, before the analysis,
    so none is left even when the analysis raises (never a live run's). When a data file is damaged and the run directory holds an earlier report made
    from sound data, that report is kept and this one is written beside it
    (:func:`~tailscope.reports.writer.outputs_variant`; ``kept_earlier``).
    Raises RunDirError (unreadable run), ReportWriteError (outputs not written).
    """
    try:  # first, so that no stale reserve outlives an analysis that raises
        release_stale_reserves(run_dir)
    except OSError:
        pass  # a read-only run directory: writing the outputs below fails clearly
    analysis = analyze_run(run_dir, window_s=window_s)
    variant = outputs_variant(run_dir, analysis)
    try:
        paths = write_outputs(run_dir, analysis, variant=variant)
    except OSError as exc:
        raise ReportWriteError(run_dir, analysis, exc) from exc
    return RunReport(run_dir=run_dir, analysis=analysis, paths=paths, kept_earlier=variant is not None)


def compare_and_write(run_dir, baseline_dir, *, threshold: float = DEFAULT_THRESHOLD,
                      confidence: float = DEFAULT_CONFIDENCE, out_dir: str | None = None) -> BaselineComparison:
    """Compare the new runs ``run_dir`` with the baseline runs ``baseline_dir``
    (analyzers/comparison/baseline.py) and write comparison.json/.html/.md and junit-compare.xml
    into ``out_dir`` (default: ``run_dir`` when it is one path, else the first new run).

    Each side is a run directory, a folder of run directories (``tailscope run --repeat``) or a
    list of those. ``threshold``: relative change counted as a regression when significant (0.10 =
    10%); ``confidence``: of the resampled intervals. Raises RunDirError when a run cannot be read.
    """
    comparison = compare(run_dir, baseline_dir, CompareRules(threshold=threshold, confidence=confidence))
    if out_dir is None:
        out_dir = run_dir if isinstance(run_dir, str) else str(list(run_dir)[0])
    return BaselineComparison(comparison=comparison, paths=write_comparison_outputs(out_dir, encode(comparison)))


def compare_with_baseline(report: RunReport, baseline_dir, *, threshold: float = DEFAULT_THRESHOLD,
                          confidence: float = DEFAULT_CONFIDENCE) -> BaselineComparison:
    """Compare an analysed run with its baseline (one run directory, a folder of runs or a list of
    them; files written into the run directory) and rewrite its junit.xml with both suites (the
    run's SLOs and the comparison).

    Raises RunDirError when either run cannot be read.
    """
    compared = compare_and_write(report.run_dir, baseline_dir, threshold=threshold, confidence=confidence)
    if report.paths.get("junit"):
        write_text_atomic(report.paths["junit"], render_junit(report.analysis, encode(compared.comparison)))
    return compared
