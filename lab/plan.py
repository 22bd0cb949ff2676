"""The lab's experiments: which scenario, load, seed and fault each run gets.

A suite is a list of :class:`Experiment`. Every fault kind runs once per
seed (``seeds``), alternating the lab's two scenarios and three load levels,
and ``seeds`` no-fault control runs use the same scenarios and loads. Each
fault starts at 35 % of the run and lasts 25 % of it, so every run has a
clean stretch before and after its window.

A *confounded case* (:data:`CONFOUNDED_CASES`) runs two faults in that window
at once: the ``cause``, acting on the target, and a ``distraction`` elsewhere
on the host (another process's trouble, which the diagnosis must not name).
Each fault's ground truth carries its ``role``; the case is scored against its
cause like a fault kind, under the case's name.

``quick``: 20 s runs, one seed; full: 40 s runs, ``seeds`` (default 3) seeds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import yaml

from tailscope.faults.injector import FaultSpec
from tailscope.faults.registry import INJECTORS, build_spec

QUICK_DURATION_S = 20.0
FULL_DURATION_S = 40.0
FAULT_START_FRACTION = 0.35
FAULT_LENGTH_FRACTION = 0.25
#: Load multipliers cycled through by seed, so every kind meets different loads.
LOAD_LEVELS = (1.0, 0.75, 1.25)
CONTROL = "control"

#: The reference target as the lab runs it: a resident working set that swapping hurts,
#: an accelerator-like 20 ms per batch (GIL released) so the model, not the event loop,
#: bounds throughput (about 8 / 20 ms = 400 requests/s), and a short queue so overload
#: answers 429 quickly. Its own behaviour makes no spikes: the start-up heap is frozen
#: (``--gc-freeze``) and requests leave no cyclic garbage, so full collections are rare and
#: short; gc_pressure brings its garbage only for its window.
TARGET_ARGS = ("--resident-mb", "192", "--gc-freeze", "--max-queue-size", "64",
               "--model-extra-delay-ms", "20", "--gc-min-pause-ms", "1")

#: Fault parameters used by the lab (strong enough to matter on a 2-core machine).
LAB_PARAMS: dict[str, dict] = {
    "cpu_throttle": {"cpus": 0.08},
    "cpu_contention": {"processes": 4, "weight": 16384},
    "memory_swap": {"fraction": 0.3},
    "gc_pressure": {"mb_per_s": 60.0, "retained_mb": 160.0},
    "overload": {"rate": 800.0, "retries": 2, "text_chars": 200},
    "io_stall": {"kb": 8192},
}


@dataclass(frozen=True)
class ConfoundedCase:
    """Two faults at once: ``cause`` (fault kind, params) on the target, ``distraction`` elsewhere on the host."""

    cause: tuple[str, dict]
    distraction: tuple[str, dict]


#: The lab's confounded cases by name (a name is a lab kind, as ``--only`` takes it); the
#: distraction ``neighbour_swap`` is a neighbour process under a memory cgroup of its own paging
#: 256 MB through swap at 32 MB/s, limited to 0.3 of it (host swap-ins, major faults, memory and
#: I/O pressure the target takes no part in).
#:
#: - ``cotenant_cpu+neighbour_swap``: four busy-loop processes inside the target's own cpu cgroup
#:   (co-tenants of its container, on its CPU, at nice -5: each outweighs a target thread about
#:   3:1) with ``neighbour_swap``;
#: - ``neighbour_cpu+neighbour_swap``: the lab's cpu_contention (a neighbour cgroup of weight 16384
#:   on the target's CPU) with ``neighbour_swap``;
#: - ``swap+neighbour_cpu``, the mirror: the lab's memory_swap on the target while two burners in a
#:   cgroup of weight 64 busy CPU 0 (elsewhere: the lab pins the target to the last CPU when there
#:   are two or more), moving the host's CPU signals only.
_NEIGHBOUR_SWAP = ("memory_swap", {"victim": "neighbour", "fraction": 0.3, "neighbour_mb": 256,
                                   "neighbour_mb_s": 32.0})
CONFOUNDED_CASES: dict[str, ConfoundedCase] = {
    "cotenant_cpu+neighbour_swap": ConfoundedCase(
        cause=("cpu_contention", {"processes": 4, "placement": "target", "nice": -5}),
        distraction=_NEIGHBOUR_SWAP),
    "neighbour_cpu+neighbour_swap": ConfoundedCase(
        cause=("cpu_contention", LAB_PARAMS["cpu_contention"]), distraction=_NEIGHBOUR_SWAP),
    "swap+neighbour_cpu": ConfoundedCase(
        cause=("memory_swap", LAB_PARAMS["memory_swap"]),
        distraction=("cpu_contention", {"processes": 2, "cpus": "0", "weight": 64})),
}

_TEXT_CLASS = {
    "method": "POST", "path": "/v1/infer/text", "headers": {"Content-Type": "application/json"},
}
#: The lab's scenarios (scenario-file mappings without duration, seed and rate).
SCENARIOS: dict[str, dict] = {
    "mixed": {
        "rate": 40.0,
        "classes": [
            {"name": "short_text", "weight": 6, **_TEXT_CLASS,
             "payload": {"kind": "json_text", "size": {"dist": "lognormal", "median": 200, "sigma": 0.5,
                                                        "min": 16, "max": 2000}}},
            {"name": "long_text", "weight": 2, **_TEXT_CLASS,
             "payload": {"kind": "json_text", "size": {"dist": "lognormal", "median": 2000, "sigma": 0.4,
                                                        "min": 500, "max": 12000}}},
            {"name": "image", "weight": 2, "method": "POST", "path": "/v1/infer/image",
             "headers": {"Content-Type": "application/octet-stream"},
             "payload": {"kind": "random_bytes", "size": {"dist": "uniform", "min": 16384, "max": 65536}}},
        ],
    },
    "text": {
        "rate": 60.0,
        "classes": [
            {"name": "short_text", "weight": 1, **_TEXT_CLASS,
             "payload": {"kind": "json_text", "size": {"dist": "lognormal", "median": 300, "sigma": 0.6,
                                                        "min": 16, "max": 4000}}},
        ],
    },
}


@dataclass(frozen=True)
class Experiment:
    """One lab run. ``fault`` is None for a control run; times in s, rate in requests/s."""

    name: str
    scenario: str
    seed: int
    rate: float
    duration_s: float
    fault: FaultSpec | None = None
    target_args: tuple[str, ...] = field(default=TARGET_ARGS)
    #: Faults elsewhere on the host at the same time (role ``distraction``), and the confounded
    #: case's name (its lab kind) when there are any.
    distractions: tuple[FaultSpec, ...] = ()
    case: str = ""

    @property
    def kind(self) -> str:
        return self.case or (self.fault.kind if self.fault else CONTROL)

    @property
    def faults(self) -> list[FaultSpec]:
        """Every fault the run injects: the cause first, then the distractions."""
        return ([self.fault] if self.fault else []) + list(self.distractions)

    def as_dict(self) -> dict:
        data = asdict(self)
        data["fault"] = self.fault.as_dict() if self.fault else None
        data["distractions"] = [spec.as_dict() for spec in self.distractions]
        data["target_args"] = list(self.target_args)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Experiment:
        fault = FaultSpec.from_dict(data["fault"]) if data.get("fault") else None
        return cls(name=data["name"], scenario=data["scenario"], seed=int(data["seed"]), rate=float(data["rate"]),
                   duration_s=float(data["duration_s"]), fault=fault, target_args=tuple(data["target_args"]),
                   distractions=tuple(FaultSpec.from_dict(d) for d in data.get("distractions") or ()),
                   case=str(data.get("case") or ""))

    def scenario_yaml(self) -> str:
        """The scenario file of this experiment (no target: the lab starts one)."""
        base = SCENARIOS[self.scenario]
        document = {
            "name": f"lab-{self.name}",
            "description": f"tailscope lab: {self.kind} on scenario {self.scenario}",
            "duration": f"{self.duration_s:g}s",
            "seed": self.seed,
            "timeout": "5s",
            "arrival": {"process": "poisson", "rate": round(self.rate, 3)},
            "classes": base["classes"],
            "signals": {"rate": 10},
        }
        return yaml.safe_dump(document, sort_keys=False)


def fault_window(duration_s: float) -> tuple[float, float]:
    """(at, duration) of the fault in a run of ``duration_s`` seconds."""
    return round(duration_s * FAULT_START_FRACTION, 3), round(duration_s * FAULT_LENGTH_FRACTION, 3)


def build_suite(*, quick: bool, seeds: int | None = None, only: list[str] | None = None,
                duration_s: float | None = None) -> list[Experiment]:
    """The experiments of a suite, faults first, controls last.

    ``only`` restricts to some fault kinds (``control`` names the control
    runs, a :data:`CONFOUNDED_CASES` name a confounded case). Raises
    ValueError for an unknown kind or a bad count.
    """
    kinds = [*INJECTORS, *CONFOUNDED_CASES, CONTROL]
    chosen = only or kinds
    unknown = sorted(set(chosen) - set(kinds))
    if unknown:
        raise ValueError(f"unknown lab kind(s) {', '.join(unknown)}; known: {', '.join(kinds)}")
    count = seeds if seeds is not None else (1 if quick else 3)
    if count < 1:
        raise ValueError(f"--seeds must be >= 1, got {count}")
    length = duration_s or (QUICK_DURATION_S if quick else FULL_DURATION_S)
    if length < 8:
        raise ValueError(f"experiments need at least 8 s to have a fault window and clean stretches, got {length:g}")
    at_s, window_s = fault_window(length)
    scenario_names = list(SCENARIOS)
    suite = []
    for kind in [k for k in kinds if k in chosen]:
        for index in range(count):
            seed = index + 1
            scenario = scenario_names[index % len(scenario_names)]
            rate = SCENARIOS[scenario]["rate"] * LOAD_LEVELS[index % len(LOAD_LEVELS)]
            fault, distractions, case = _faults_of(kind, at_s, window_s)
            suite.append(Experiment(name=f"{kind}-{scenario}-s{seed}", scenario=scenario, seed=seed, rate=rate,
                                    duration_s=length, fault=fault, distractions=distractions, case=case))
    return suite


def _faults_of(kind: str, at_s: float, window_s: float) -> tuple[FaultSpec | None, tuple[FaultSpec, ...], str]:
    """(cause, distractions, case name) of a lab kind; both faults of a confounded case share the window."""
    if kind == CONTROL:
        return None, (), ""
    case = CONFOUNDED_CASES.get(kind)
    if case is None:
        return build_spec(kind, at_s, window_s, LAB_PARAMS.get(kind, {})), (), ""
    (cause_kind, cause_params), (other_kind, other_params) = case.cause, case.distraction
    return (build_spec(cause_kind, at_s, window_s, cause_params),
            (build_spec(other_kind, at_s, window_s, other_params, role="distraction"),), kind)
