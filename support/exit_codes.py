"""Exit codes: one meaning each, the same for ``tailscope run``, ``report``, ``compare``,
``sweep``, ``lab`` and the ``locust`` command with tailscope's plugin (README "Exit codes";
DESIGN.md key decision 11). The entry points (cli/, the Locust plugin) map outcomes to these;
library code raises and never picks one.
"""

from __future__ import annotations

# One meaning per exit code, the same for run, report, compare, sweep and the locust path
# (README "Exit codes"; DESIGN.md key decision 11).
EXIT_OK = 0  # passed: every SLO held (and no regression)
EXIT_SLO_FAILED = 1  # an SLO or a regression gate failed
EXIT_USAGE = 2  # usage or setup error: bad scenario, unreachable target, unreadable run
# inconclusive or incomplete: run cut short, an SLO's percentile not claimed, a regression on a busier host
EXIT_INCONCLUSIVE = 3
EXIT_INTERNAL = 4  # tailscope itself failed (a traceback is a bug)


#: The exit code of each outcome word (tailscope.analyzers.health.outcome.OUTCOMES).
OUTCOME_EXIT_CODES = {"passed": EXIT_OK, "failed": EXIT_SLO_FAILED,
                      "inconclusive": EXIT_INCONCLUSIVE, "incomplete": EXIT_INCONCLUSIVE}
#: The exit-code table every command's --help ends with (README "Exit codes").
EXIT_CODES_HELP = ("exit codes: 0 passed; 1 an SLO or a regression gate failed; 2 usage or setup error; "
                   "3 inconclusive (an SLO's percentile not claimed, a regression on a busier host) or incomplete "
                   "(the run was cut short); "
                   "4 tailscope itself failed (a bug: please report the traceback)")


#: Exit codes from the least to the most severe: which code wins when outcomes meet (a run and
#: its baseline comparison, the runs of a --repeat, two tests in one locust process).
EXIT_SEVERITY = (EXIT_OK, EXIT_INCONCLUSIVE, EXIT_SLO_FAILED, EXIT_USAGE, EXIT_INTERNAL)
#: An exit code's outcome in words.
EXIT_WORDS = {EXIT_OK: "passed", EXIT_SLO_FAILED: "failed", EXIT_USAGE: "usage or setup error",
              EXIT_INCONCLUSIVE: "inconclusive or incomplete", EXIT_INTERNAL: "tailscope failed"}


def worst_exit_code(codes) -> int:
    """The most severe of ``codes`` by :data:`EXIT_SEVERITY` (EXIT_OK for none): 4 > 2 > 1 > 3 > 0,
    so a regression (1) is not hidden by an inconclusive run (3)."""
    return max(codes, key=EXIT_SEVERITY.index, default=EXIT_OK)


def worse_exit_code(first: int, second: int) -> int:
    """The more severe of two exit codes (:func:`worst_exit_code`)."""
    return worst_exit_code((first, second))
