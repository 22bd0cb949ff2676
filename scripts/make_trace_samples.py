"""Write the synthetic LLM trace samples shipped in scenarios/traces/ (no downloads).

Each sample has the shape of the published trace it stands for (loadgen/trace_files.py
names the sources); the numbers are drawn from a seeded generator, so running this
again writes the same files::

    python3 scripts/make_trace_samples.py        # rewrites scenarios/traces/*

- ``mooncake-sample.jsonl``: 10 minutes, about 1.1 requests/s with bursts (several
  rows on one millisecond), prompts of 1 to 5 blocks of 512 tokens: 8 shared system
  prompts of 1 block (Zipf-chosen), conversations that resend an earlier request's
  full blocks and add new ones, and a unique last block cut short. Hash ids are
  consistent as in the real trace: an id is always the same full block after the
  same blocks, a cut block always has a new id.
- ``azure-sample.csv``: 3 minutes of ``TIMESTAMP,ContextTokens,GeneratedTokens``,
  100-ns timestamps as in AzureLLMInferenceTrace_conv.csv.
- ``burstgpt-sample.csv``: 3 minutes of BurstGPT's six columns, with a few failed rows
  (``Response tokens`` 0) as BurstGPT_1.csv keeps them.
"""

from __future__ import annotations

import datetime
import json
import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "scenarios", "traces")
BLOCK = 512


def mooncake(rng: np.random.Generator, seconds: float = 600.0, rate: float = 1.1) -> list[dict]:
    next_id = 0

    def new_id() -> int:
        nonlocal next_id
        next_id += 1
        return next_id - 1

    systems = [new_id() for _ in range(8)]
    zipf = 1.0 / np.arange(1, 9) ** 1.2
    zipf /= zipf.sum()
    rows, full_blocks_of = [], []  # full_blocks_of: each earlier row's full blocks (a conversation's history)
    t_ms = 0
    while True:
        t_ms += int(rng.exponential(1000.0 / rate)) if rng.random() > 0.15 else 0  # 15% share a millisecond
        if t_ms >= seconds * 1000:
            break
        if full_blocks_of and rng.random() < 0.35:  # a later turn: an earlier request's full blocks, and more
            blocks = list(full_blocks_of[int(rng.integers(max(0, len(full_blocks_of) - 40), len(full_blocks_of)))])
        else:
            blocks = [systems[int(rng.choice(8, p=zipf))]]
        if len(blocks) >= 4:
            blocks = blocks[:1]
        blocks += [new_id() for _ in range(int(rng.integers(0, 2)))]
        tail = int(rng.integers(16, BLOCK))  # the last block, cut short: always a new id
        ids = blocks + [new_id()]
        rows.append({"timestamp": t_ms, "input_length": len(blocks) * BLOCK + tail,
                     "output_length": int(rng.integers(4, 40)), "hash_ids": ids})
        full_blocks_of.append(blocks)
    return rows


def arrival_times_s(rng: np.random.Generator, seconds: float, rate: float) -> np.ndarray:
    gaps = rng.gamma(0.5, 1.0 / (rate * 0.5), int(seconds * rate * 2))
    times = np.cumsum(gaps)
    return times[times < seconds]


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(2025)
    with open(os.path.join(OUT, "mooncake-sample.jsonl"), "w") as out:
        for row in mooncake(rng):
            out.write(json.dumps(row) + "\n")
    start = datetime.datetime(2023, 11, 16, 18, 15, 46)
    with open(os.path.join(OUT, "azure-sample.csv"), "w") as out:
        out.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for t in arrival_times_s(rng, 180.0, 1.5):
            ticks = int(round(t * 1e7))  # 100-ns ticks
            stamp = start + datetime.timedelta(seconds=ticks // 10**7)
            out.write(f"{stamp:%Y-%m-%d %H:%M:%S}.{ticks % 10**7:07d},"
                      f"{int(rng.integers(20, 1500))},{int(rng.integers(1, 60))}\n")
    with open(os.path.join(OUT, "burstgpt-sample.csv"), "w") as out:
        out.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        for t in arrival_times_s(rng, 180.0, 1.5) + 3600.0:
            prompt = int(rng.integers(10, 1500))
            response = 0 if rng.random() < 0.03 else int(rng.integers(1, 60))
            model = "GPT-4" if rng.random() < 0.3 else "ChatGPT"
            kind = "API log" if rng.random() < 0.4 else "Conversation log"
            out.write(f"{t:.0f},{model},{prompt},{response},{prompt + response},{kind}\n")


if __name__ == "__main__":
    main()
