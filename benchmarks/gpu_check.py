"""The real NVML sampler on a real GPU, for about 5 seconds: one short script.

Prints what the GPU sampler found (or why it is unavailable), every series with
its first/last value, the clocks-event (throttle) reasons decoded at each read,
and how much violation time (ns counters) accrued. Exit 0 when the sampler ran
on at least one GPU, 1 when NVML or the GPU is unavailable (the reason is
printed), 2 on a reading error.

    python benchmarks/gpu_check.py [--seconds 5] [--rate 10] [--load]

``--load`` runs a small matrix-multiply loop on the GPU meanwhile (needs torch
or cupy; skipped with a note if neither is installed) so utilisation and clocks move.
Works from a checkout without installing tailscope (loads the sampler modules by path).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import threading
import time
import types

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_gpu_module():
    """``tailscope.signals.gpu``, installed or straight from this checkout."""
    try:
        from tailscope.signals import gpu

        return gpu
    except ImportError:
        package = types.ModuleType("tailscope_signals_checkout")
        package.__path__ = [os.path.join(REPO, "tracing", "signals")]
        sys.modules[package.__name__] = package
        for name in ("base", "gpu"):
            spec = importlib.util.spec_from_file_location(
                f"{package.__name__}.{name}", os.path.join(REPO, "tracing", "signals", f"{name}.py"))
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        return sys.modules[f"{package.__name__}.gpu"]


def gpu_load(stop: threading.Event) -> str:
    """Keep the GPU busy until ``stop``; returns what it used, or why it could not."""
    try:
        import torch

        if not torch.cuda.is_available():
            return "torch sees no CUDA device"
        a = torch.randn(4096, 4096, device="cuda")
        while not stop.is_set():
            a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()
        return "torch matmul"
    except ImportError:
        pass
    try:
        import cupy

        a = cupy.random.rand(4096, 4096, dtype=cupy.float32)
        while not stop.is_set():
            a = cupy.clip(a @ a, -1, 1)
            cupy.cuda.Stream.null.synchronize()
        return "cupy matmul"
    except ImportError:
        return "no torch or cupy: no load"


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the real NVML GPU sampler for a few seconds.")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--load", action="store_true", help="keep the GPU busy meanwhile (torch or cupy)")
    args = parser.parse_args()
    gpu = load_gpu_module()
    sampler = gpu.GpuSampler()
    reason = sampler.probe()
    if reason is not None:
        print(f"GPU sampler unavailable: {reason}")
        return 1
    series = sampler.series()
    print(f"GPU sampler: {len(sampler._handles)} device(s), {len(series)} series")
    for name, meta in sorted(series.items()):
        print(f"  {name:45} {meta.unit:8} {meta.kind:8} {meta.description}")
    stop = threading.Event()
    load_note = []
    loader = threading.Thread(target=lambda: load_note.append(gpu_load(stop))) if args.load else None
    if loader is not None:
        loader.start()
    reads: list[tuple[int, dict]] = []
    try:
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            now = time.time_ns()
            try:
                reads.append((now, dict(sampler.read(now))))
            except Exception as exc:  # noqa: BLE001  (report any NVML error and stop)
                print(f"read failed: {type(exc).__name__}: {exc}")
                return 2
            time.sleep(1.0 / args.rate)
    finally:
        stop.set()
        if loader is not None:
            loader.join()
    if load_note:
        print(f"load: {load_note[0]}")
    first, last = reads[0][1], reads[-1][1]
    elapsed_s = (reads[-1][0] - reads[0][0]) / 1e9
    print(f"\n{len(reads)} reads over {elapsed_s:.1f} s")
    for name in sorted(last):
        if ".clocks_event." in name:
            continue
        meta = series[name]
        if meta.kind == "counter":
            print(f"  {name:45} +{last[name] - first.get(name, last[name]):,.0f} {meta.unit} over the run")
        else:
            values = [r[name] for _, r in reads if name in r]
            print(f"  {name:45} first {values[0]:,.1f}  min {min(values):,.1f}  max {max(values):,.1f} {meta.unit}")
    print("\nclocks-event reasons per read (decoded bitmask):")
    previous = None
    for t_ns, values in reads:
        for name, value in sorted(values.items()):
            if name.endswith(".clocks_event_reasons"):
                decoded = gpu.decode_clocks_event_reasons(int(value)) or ["none"]
                line = f"  {name}: {int(value):#06x} = {', '.join(decoded)}"
                if line != previous:
                    print(f"  t+{(t_ns - reads[0][0]) / 1e9:5.2f}s {line.strip()}")
                    previous = line
    return 0


if __name__ == "__main__":
    sys.exit(main())
