"""Our cause detectors vs the BARO-style baseline, scored on the runs of a ``tailscope lab`` suite.

Re-analyses every run directory of a lab output folder twice — with the
registered detectors (``method="detectors"``) and with the BARO-style ranker
(``method="baro"``, analyzers/causes/baro.py) — and scores both with the lab's own
scoring (tailscope.lab.scoring: AC@1, AC@3, detection rate per fault kind,
false alarms on control runs). Spike detection is the same for both, so the
table compares attribution only. The baseline column is the reference
measured in the same run.

Usage: ``tailscope lab --out DIR`` first, then ``python benchmarks/diagnosis_methods.py DIR``.
"""

from __future__ import annotations

import json
import os
import sys

from tailscope.analyzers.analysis import analyze_run
from tailscope.lab.scoring import aggregate, score_control_run, score_fault_run


def score_all(lab_dir: str, method: str) -> dict:
    with open(os.path.join(lab_dir, "lab.json"), encoding="utf-8") as fh:
        lab = json.load(fh)
    results = []
    for experiment in lab["experiments"]:
        if experiment.get("status") != "ok" or not experiment.get("run_dir"):
            continue
        analysis = analyze_run(experiment["run_dir"], method=method)
        score = score_control_run(analysis) if experiment["kind"] == "control" else score_fault_run(analysis)
        results.append({"kind": experiment["kind"], "status": "ok", "score": score})
    return aggregate(results)


def cell(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    ours, baro = score_all(argv[0], "detectors"), score_all(argv[0], "baro")
    print(f"{'fault kind':<16} {'runs':>4} {'detected':>8} {'AC@1 ours':>9} {'AC@1 BARO':>9} "
          f"{'AC@3 ours':>9} {'AC@3 BARO':>9}")
    for kind, mine in ours["kinds"].items():
        theirs = baro["kinds"][kind]
        print(f"{kind:<16} {mine['scored']:>4} {cell(mine['detection_rate']):>8} {cell(mine['ac1']):>9} "
              f"{cell(theirs['ac1']):>9} {cell(mine['ac3']):>9} {cell(theirs['ac3']):>9}")
    print(f"{'overall':<16} {'':>4} {cell(ours['overall']['detection_rate']):>8} {cell(ours['overall']['ac1']):>9} "
          f"{cell(baro['overall']['ac1']):>9} {cell(ours['overall']['ac3']):>9} {cell(baro['overall']['ac3']):>9}")
    control = ours["control"]
    print(f"control runs: {control['scored']}, false-alarm rate ours {cell(control['false_alarm_rate'])} "
          f"(BARO never says unexplained: {cell(baro['control']['false_alarm_rate'])}), "
          f"spikes per run {cell(control['spikes_per_run'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
