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

The *LLM suite* (``build_suite(..., llm=True)``, ``tailscope lab --llm``) runs
:data:`LLM_KINDS` and control runs against the LLM reference server
(:data:`LLM_TARGET_ARGS`) under the :data:`LLM_SCENARIOS` chat workload, with
the ``vllm`` stage preset and the server's ``/metrics`` scraped. The classic
suite runs the fault kinds that need no LLM server (an injector's
``target_kind``). ``build_suite(..., rate=R)`` (``--rate``) runs it at R requests/s, each run
long enough for the spike test at R (:func:`llm_run_length_s`) and its faults sized for R
(:func:`llm_params_for_rate`).

The *vLLM suite* (``build_suite(..., target=VLLM)``, ``tailscope lab --target vllm``) runs
:data:`VLLM_KINDS` and control runs against the real vLLM CPU build serving a tiny local Llama
(:mod:`.vllm_target`), started once with :data:`VLLM_TARGET_ARGS` and shared by the experiments
(their faults are traffic), under the :data:`VLLM_SCENARIOS` chat workload at 2–8 requests/s with
prompts sized by the model's own tokenizer; ``quick``: 60 s runs, one seed; full: 90 s runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import yaml

from tailscope.analyzers.spikes.detection import SpikeRules
from tailscope.faults.injector import FaultSpec
from tailscope.faults.registry import INJECTORS, build_spec

QUICK_DURATION_S = 20.0
FULL_DURATION_S = 40.0
FAULT_START_FRACTION = 0.35
FAULT_LENGTH_FRACTION = 0.25
#: Load multipliers cycled through by seed, so every kind meets different loads.
LOAD_LEVELS = (1.0, 0.75, 1.25)
#: The LLM suite's load multipliers (an LLM server's capacity is a few requests/s: a narrower spread).
LLM_LOAD_LEVELS = (1.0, 0.8, 1.2)
#: The vLLM suite's load multipliers: 2, 4 and 8 requests/s, the rates a person runs a small model at.
VLLM_LOAD_LEVELS = (1.0, 0.5, 2.0)
#: The vLLM suite's run lengths (s): a spike test needs tens of requests in and around the fault at 2/s.
#: The full suite's 120 s (a 30-s fault): in 60-s runs a 15-s prompt storm at 2 and 4/s slowed 3–7
#: of its 23–49 requests past the P99 of the rest, fewer than a calibrated test can tell from chance
#: (docs/lab.md).
VLLM_QUICK_DURATION_S = 60.0
VLLM_FULL_DURATION_S = 120.0
CONTROL = "control"
#: The targets an experiment may run against: the classic reference target, the LLM reference server,
#: or the real vLLM CPU build (started by the lab, :mod:`.vllm_target`).
REFERENCE, LLM, VLLM = "reference", "llm", "vllm"
TARGETS = (REFERENCE, LLM, VLLM)
#: The targets that serve the OpenAI chat API (the LLM fault kinds and chat scenarios).
LLM_TARGETS = (LLM, VLLM)

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


#: The LLM reference server as the LLM lab runs it (docs/lab.md "The LLM lab"): a decoder 256 wide, so
#: compute grows with the tokens of a step (a 2,000-token prefill ~35 ms, a decode step of 12 sequences
#: ~2 ms on the development VM) beside an accelerator-like 3 ms per step (GIL released); at most 24
#: running sequences; a KV cache of 768 blocks of 16 tokens (12,288 tokens: the chat load holds under
#: 10 % of it); chunked prefill under a 2,048-token step budget; 2 tokens per SSE chunk.
LLM_TARGET_ARGS = ("--model-dim", "256", "--step-extra-delay-ms", "3", "--max-num-seqs", "24",
                   "--num-kv-blocks", "768", "--block-size", "16", "--enable-chunked-prefill",
                   "--max-num-batched-tokens", "2048", "--max-model-len", "4096", "--tokens-per-chunk", "2")

#: The LLM suite's fault kinds, in the order it runs them: each is another client's traffic
#: (faults/llm_load.py) but cpu_throttle, the classic kind acting on the server's cgroup.
LLM_KINDS = ("llm_long_generations", "llm_prompt_storm", "llm_overload", "cpu_throttle")

#: Fault parameters used by the LLM suite (sized for :data:`LLM_TARGET_ARGS` on a 2-core machine). The
#: long generations' 10 prompts of 1,024 tokens hold 83 % of the KV cache once prefilled, so all are
#: admitted and their growth overflows the cache within a few hundred steps: preemptions, on a busy
#: host too (6 prompts of 2,048 tokens left the sixth waiting at the head of the queue with the cache
#: at 0.80-0.96 and no preemption in a 3.5-s window on a busy host: no cause reached 0.5). The storm's
#: 16 prompts/s (at most :data:`LLM_STORM_IN_FLIGHT` open) keep a 2,048-token chunk in most steps:
#: at 8/s the streams' time per output token rose only 1.6x in a quick run (docs/lab.md).
LLM_PARAMS: dict[str, dict] = {
    "llm_long_generations": {"streams": 10, "prompt_tokens": 1024, "max_tokens": 2048},
    "llm_prompt_storm": {"rate": 16.0, "prompt_tokens": 3000, "max_tokens": 2},
    "llm_overload": {"rate": 50.0, "prompt_tokens": 64, "max_tokens": 64},
    "cpu_throttle": {"cpus": 0.2},
}


#: The LLM reference server's CPU use (CPUs) under the LLM chat load at r requests/s is about
#: ``LLM_SERVER_CPU_IDLE + r × LLM_SERVER_CPU_PER_RPS`` (:data:`LLM_TARGET_ARGS`; control runs on the
#: development container: 0.05 CPUs at 1/s, 0.12 at 3/s, 0.19 at 10/s, ~0.4 at 16/s).
LLM_SERVER_CPU_IDLE = 0.04
LLM_SERVER_CPU_PER_RPS = 0.02
#: The LLM suite's cpu_throttle holds the server to this share of its CPU use at the run's rate, so
#: the throttle bites at every rate (a fixed 0.2 CPUs is half of it at 16/s, more than all of it at 3/s).
LLM_THROTTLE_SHARE = 0.5
#: Storm prompts open at once in the LLM suite's llm_prompt_storm: a 3,000-token prompt takes two
#: 2,048-token steps, so 4 open keep a chunk in nearly every step while at most a few wait (an
#: open-loop storm on a busy host overran the engine: 63 waiting, and queue_saturation was the right
#: name; 2 open were too few at 16/s: a 14-s run's P99 rose only 1.9×).
LLM_STORM_IN_FLIGHT = 4


def llm_run_length_s(rate: float, default_s: float) -> float:
    """Seconds an LLM-suite run at ``rate`` requests/s lasts: ``default_s``, or longer where the fault
    window (:data:`FAULT_LENGTH_FRACTION` of the run) would hold fewer requests than the spike test
    needs to run at all (:meth:`~tailscope.analyzers.spikes.tail_test.TailTestRules.samples_to_tell`,
    the count its ``too_short`` rule asks for): 192 s at 1/s, 64 s at 3/s. Raises ValueError for a
    rate that is not positive."""
    if not rate > 0:
        raise ValueError(f"the request rate must be > 0, got {rate:g}")
    needed = SpikeRules().samples_to_tell()
    return max(default_s, float(np.ceil(needed / (rate * FAULT_LENGTH_FRACTION))))


def llm_params_for_rate(rate: float) -> dict[str, dict]:
    """:data:`LLM_PARAMS` sized for a chat load of ``rate`` requests/s: cpu_throttle's ``cpus`` is
    :data:`LLM_THROTTLE_SHARE` of the server's CPU use at that rate (at least the injector's 0.01);
    the prompt storm keeps at most :data:`LLM_STORM_IN_FLIGHT` prompts open. The long generations
    and the overload do not depend on the rate (they fill the KV cache, the running batch)."""
    use = LLM_SERVER_CPU_IDLE + rate * LLM_SERVER_CPU_PER_RPS
    return {**LLM_PARAMS,
            "cpu_throttle": {"cpus": round(max(0.01, LLM_THROTTLE_SHARE * use), 3)},
            "llm_prompt_storm": {**LLM_PARAMS["llm_prompt_storm"], "max_in_flight": LLM_STORM_IN_FLIGHT}}


#: The real vLLM as the vLLM lab runs it, beyond :class:`~.vllm_target.VllmServer`'s own flags
#: (``--max-model-len 1024``, bfloat16): at most 8 running sequences, and a KV cache of 64 blocks of
#: 32 tokens (2,048 tokens: twice a longest request; the chat load holds a few percent of it), so
#: long generations fill it while the chat load never does. Chunked prefill and prefix caching are
#: vLLM's defaults (on).
VLLM_TARGET_ARGS = ("--max-num-seqs", "8", "--block-size", "32", "--num-gpu-blocks-override", "64")

#: The vLLM suite's fault kinds: each is another client's traffic, so one server serves them all.
VLLM_KINDS = ("llm_long_generations", "llm_prompt_storm", "llm_overload")

#: Fault parameters of the vLLM suite (sized for :data:`VLLM_TARGET_ARGS` and the lab's 256-wide model,
#: where a 900-token prefill takes tens of ms — about 50 on the development container in December 2026,
#: where 5 storm prompts/s slowed the streams only 1.1–1.4× and 10/s hold half the engine; a
#: request's prompt and output must fit the 1,024-token context).
VLLM_PARAMS: dict[str, dict] = {
    "llm_long_generations": {"streams": 4, "prompt_tokens": 400, "max_tokens": 600},
    "llm_prompt_storm": {"rate": 10.0, "prompt_tokens": 900, "max_tokens": 2},
    "llm_overload": {"rate": 50.0, "prompt_tokens": 64, "max_tokens": 64},
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


_CHAT_CLASS = {"api": "openai-chat", "model": "tailscope-llm"}
#: The LLM suite's scenarios: streamed chat completions (token counts from the server's usage).
LLM_SCENARIOS: dict[str, dict] = {
    "chat": {
        "rate": 16.0,
        "classes": [
            {"name": "chat", "weight": 1, **_CHAT_CLASS,
             "prompt_tokens": {"dist": "lognormal", "median": 128, "sigma": 0.5, "min": 16, "max": 512},
             "output_tokens": {"dist": "uniform", "min": 16, "max": 48}},
        ],
    },
}


#: The vLLM suite's scenario: streamed chat completions of the tiny Llama, prompts sized with its own
#: tokenizer (the experiment's ``tokenizer``), 4 requests/s before :data:`VLLM_LOAD_LEVELS`.
VLLM_SCENARIOS: dict[str, dict] = {
    "chat": {
        "rate": 4.0,
        "classes": [
            {"name": "chat", "weight": 1, "api": "openai-chat", "model": "tiny-llama",
             "prompt_tokens": {"dist": "lognormal", "median": 120, "sigma": 0.5, "min": 16, "max": 600},
             "output_tokens": {"dist": "uniform", "min": 16, "max": 48}},
        ],
    },
}


def scenarios_of(target: str) -> dict[str, dict]:
    """The lab's scenarios for a target (:data:`TARGETS`)."""
    return {LLM: LLM_SCENARIOS, VLLM: VLLM_SCENARIOS}.get(target, SCENARIOS)


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
    #: What the experiment runs against: :data:`REFERENCE`, :data:`LLM` (then ``target_args`` are
    #: the LLM server's flags) or :data:`VLLM` (vLLM's flags: experiments with the same ones share a server).
    target: str = REFERENCE
    #: A local ``tokenizer.json`` the scenario's chat classes size their prompts with (the vLLM model's).
    tokenizer: str = ""

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"unknown lab target {self.target!r}; known: {', '.join(TARGETS)}")
        if self.scenario not in scenarios_of(self.target):
            raise ValueError(f"unknown scenario {self.scenario!r} for the {self.target} target; "
                             f"known: {', '.join(scenarios_of(self.target))}")

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
                   case=str(data.get("case") or ""), target=str(data.get("target") or REFERENCE),
                   tokenizer=str(data.get("tokenizer") or ""))

    def scenario_yaml(self) -> str:
        """The scenario file of this experiment (no target: the lab starts one). Against an LLM
        server: the ``vllm`` stage preset, its ``/metrics`` scraped, a whole generation's timeout,
        the experiment's ``tokenizer`` in each class."""
        base = scenarios_of(self.target)[self.scenario]
        llm = self.target in LLM_TARGETS
        classes = [{**c, "tokenizer": self.tokenizer} if self.tokenizer else c for c in base["classes"]]
        document = {
            "name": f"lab-{self.name}",
            "description": f"tailscope lab: {self.kind} on scenario {self.scenario}",
            "duration": f"{self.duration_s:g}s",
            "seed": self.seed,
            "timeout": "30s" if llm else "5s",
            "arrival": {"process": "poisson", "rate": round(self.rate, 3)},
            "classes": classes,
            "signals": {"rate": 10, "prometheus": "/metrics"} if llm else {"rate": 10},
        }
        if llm:
            document["stages"] = {"preset": "vllm"}
        return yaml.safe_dump(document, sort_keys=False)


def fault_window(duration_s: float) -> tuple[float, float]:
    """(at, duration) of the fault in a run of ``duration_s`` seconds."""
    return round(duration_s * FAULT_START_FRACTION, 3), round(duration_s * FAULT_LENGTH_FRACTION, 3)


def suite_kinds(llm: bool = False, target: str | None = None) -> list[str]:
    """Every lab kind of a suite, in the order it runs them: the classic suite's fault kinds that need
    no LLM server, its confounded cases and control; the LLM suite's :data:`LLM_KINDS` and control
    (``llm``, or ``target`` :data:`LLM`); the vLLM suite's :data:`VLLM_KINDS` and control."""
    target = target or (LLM if llm else REFERENCE)
    if target == LLM:
        return [*LLM_KINDS, CONTROL]
    if target == VLLM:
        return [*VLLM_KINDS, CONTROL]
    return [*(kind for kind, injector in INJECTORS.items() if injector.target_kind is None), *CONFOUNDED_CASES,
            CONTROL]


#: Each target's suite as the messages name it, and how to ask for it.
SUITE_NAMES = {REFERENCE: "classic", LLM: "LLM", VLLM: "vLLM"}


def _suite_hint(target: str, unknown: list[str]) -> str:
    """Where the first other suite that has some of ``unknown`` kinds is, and how to run it ('' if none)."""
    for other in TARGETS:
        found = sorted(set(unknown) & set(suite_kinds(target=other))) if other != target else []
        if found:
            action = {REFERENCE: "drop --llm" if target == LLM else f"drop --target {target}",
                      LLM: "add --llm", VLLM: "use --target vllm"}[other]
            return (f" ({', '.join(found)} {'is' if len(found) == 1 else 'are'} of the {SUITE_NAMES[other]} "
                    f"suite: {action})")
    return ""


def build_suite(*, quick: bool, seeds: int | None = None, only: list[str] | None = None,
                duration_s: float | None = None, llm: bool = False, target: str | None = None,
                tokenizer: str = "", rate: float | None = None) -> list[Experiment]:
    """The experiments of a suite, faults first, controls last.

    ``only`` restricts to some fault kinds (``control`` names the control
    runs, a :data:`CONFOUNDED_CASES` name a confounded case). ``target``
    (:data:`TARGETS`; ``llm`` is ``target=LLM``): the suite of that target
    (:func:`suite_kinds`); ``tokenizer``: the ``tokenizer.json`` the vLLM suite's
    scenario sizes prompts with. ``rate`` (requests/s, the LLM suite only) runs every
    experiment at that rate instead of the scenario's rate × :data:`LLM_LOAD_LEVELS`. The LLM
    suite sizes each experiment for its rate: its length is :func:`llm_run_length_s`
    (``duration_s`` or the default as the floor), its fault :func:`llm_params_for_rate`.
    Raises ValueError for an unknown kind (one of another suite's is named so), a bad count, or
    a ``rate`` that is not positive or not for the LLM suite.
    """
    target = target or (LLM if llm else REFERENCE)
    if target not in TARGETS:
        raise ValueError(f"unknown lab target {target!r}; known: {', '.join(TARGETS)}")
    kinds = suite_kinds(target=target)
    chosen = only or kinds
    unknown = sorted(set(chosen) - set(kinds))
    if unknown:
        raise ValueError(f"unknown lab kind(s) {', '.join(unknown)} for the {SUITE_NAMES[target]} suite"
                         f"{_suite_hint(target, unknown)}; known: {', '.join(kinds)}")
    if rate is not None and (target != LLM or not rate > 0):
        raise ValueError(f"a request rate is for the LLM suite and must be > 0, got {rate:g} for the "
                         f"{SUITE_NAMES[target]} suite")
    count = seeds if seeds is not None else (1 if quick else 3)
    if count < 1:
        raise ValueError(f"--seeds must be >= 1, got {count}")
    if target == VLLM:
        default_length = VLLM_QUICK_DURATION_S if quick else VLLM_FULL_DURATION_S
    else:
        default_length = QUICK_DURATION_S if quick else FULL_DURATION_S
    length = duration_s or default_length
    if length < 8:
        raise ValueError(f"experiments need at least 8 s to have a fault window and clean stretches, got {length:g}")
    scenarios = scenarios_of(target)
    scenario_names = list(scenarios)
    levels = {LLM: LLM_LOAD_LEVELS, VLLM: VLLM_LOAD_LEVELS}.get(target, LOAD_LEVELS)
    params = {LLM: LLM_PARAMS, VLLM: VLLM_PARAMS}.get(target, LAB_PARAMS)
    target_args = {LLM: LLM_TARGET_ARGS, VLLM: VLLM_TARGET_ARGS}.get(target, TARGET_ARGS)
    suite = []
    for kind in [k for k in kinds if k in chosen]:
        for index in range(count):
            seed = index + 1
            scenario = scenario_names[index % len(scenario_names)]
            run_rate = rate if rate is not None else scenarios[scenario]["rate"] * levels[index % len(levels)]
            run_length, run_params = length, params
            if target == LLM:
                run_length, run_params = llm_run_length_s(run_rate, length), llm_params_for_rate(run_rate)
            at_s, window_s = fault_window(run_length)
            fault, distractions, case = _faults_of(kind, at_s, window_s, run_params)
            suite.append(Experiment(name=f"{kind}-{scenario}-s{seed}", scenario=scenario, seed=seed, rate=run_rate,
                                    duration_s=run_length, fault=fault, distractions=distractions, case=case,
                                    target=target, target_args=target_args,
                                    tokenizer=tokenizer if target == VLLM else ""))
    return suite


def _faults_of(kind: str, at_s: float, window_s: float,
               params: dict[str, dict]) -> tuple[FaultSpec | None, tuple[FaultSpec, ...], str]:
    """(cause, distractions, case name) of a lab kind, with the suite's ``params``; both faults of a
    confounded case share the window."""
    if kind == CONTROL:
        return None, (), ""
    case = CONFOUNDED_CASES.get(kind)
    if case is None:
        return build_spec(kind, at_s, window_s, params.get(kind, {})), (), ""
    (cause_kind, cause_params), (other_kind, other_params) = case.cause, case.distraction
    return (build_spec(cause_kind, at_s, window_s, cause_params),
            (build_spec(other_kind, at_s, window_s, other_params, role="distraction"),), kind)
