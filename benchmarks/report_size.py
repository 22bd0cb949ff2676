"""Report size and time to plotted charts: a 60 s run and a synthetic 24-hour run.

Writes seeded synthetic runs (testkit/synthetic.py: Poisson arrivals, spans,
signals, GC pauses, injected spikes), analyses them, renders report.html and
prints, as ratios against references measured in the same run:

- page size / plotly.min.js (the floor of any inline-plotly page) and / the
  10 MB goal; packed-plotly page / inline-plotly page;
- time to first and to last chart drawn on load in headless Chromium (and how
  many charts that is: folded sections draw nothing until opened) / the time to
  plot one chart on a bare page that inlines plotly.min.js;
- time to open "All signals" (every signal panel drawn) / the same bare page.

Usage: python benchmarks/report_size.py [--day-rate 2] [--run DIR ...]
(``--run`` adds existing run directories, e.g. a real ``tailscope demo``.)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from tailscope.analyzers.analysis import analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.html import inline_script, plotly_source, render_html
from tailscope.testkit.synthetic import write_synthetic_run

CHROMIUM = "/usr/bin/chromium"
GOAL_BYTES = 10_000_000
DAY_S = 86_400


def spikes_every(duration_s: float, every_s: float) -> list[dict]:
    kinds = ("gc", "queue", "cpu", "throttle")
    return [{"kind": kinds[i % 4], "at_s": t, "duration_s": 3, "extra_ms": 150}
            for i, t in enumerate(range(int(every_s / 2), int(duration_s) - 5, int(every_s)))]


def build(path: str, duration_s: float, rate: float, every_s: float) -> dict:
    started = time.perf_counter()
    write_synthetic_run(path, duration_s=duration_s, rate=rate, seed=7, spikes=spikes_every(duration_s, every_s))
    written = time.perf_counter()
    return {"path": path, "write_s": written - started, **render(path)}


def render(path: str) -> dict:
    started = time.perf_counter()
    analysis = analyze_run(path)
    analysed = time.perf_counter()
    data = build_report_data(analysis)
    packed = render_html(data)
    rendered = time.perf_counter()
    inline = render_html(data, compress_plotly=False)
    page = os.path.join(path, "report.html")
    with open(page, "w", encoding="utf-8") as fh:
        fh.write(packed)
    return {"page": page, "analyse_s": analysed - started, "render_s": rendered - analysed,
            "packed_bytes": len(packed.encode()), "inline_bytes": len(inline.encode()),
            "windows": len(analysis["windows"]), "spikes": len(analysis["spikes"]),
            "requests": analysis["summary"]["requests"]}


def reference_page(folder: str) -> str:
    path = os.path.join(folder, "reference.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("<!DOCTYPE html><html><body><div id='c'></div><script>" + inline_script(plotly_source())
                 + "</script><script>Plotly.newPlot('c', [{x: [0, 1], y: [0, 1]}]);"
                 "window.tailscopeFirstChartMs = window.tailscopeReadyMs = performance.now();"
                 "document.body.dataset.charts = 'ready';</script></body></html>")
    return path


OPEN_SIGNALS = """() => new Promise(done => {
    const section = document.getElementById('all-signals');
    if (!section) { done([null, 0]); return; }
    const started = performance.now();
    section.open = true;
    (function wait() {
      if (section.dataset.drawn === 'yes') {
        done([performance.now() - started, document.querySelectorAll('#signal-panels .js-plotly-plot').length]);
      } else { setTimeout(wait, 10); }
    })();
})"""


def browser_times(pages: list[str], repeats: int = 3) -> dict[str, tuple]:
    """Median (first chart ms, on-load charts ms, charts on load, open-"All signals" ms, panels) per page;
    the times from navigation start, the last one from the click."""
    from playwright.sync_api import sync_playwright

    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        try:
            for page_path in pages:
                samples = []
                for _ in range(repeats):
                    page = browser.new_page(viewport={"width": 1280, "height": 900})
                    page.goto("file://" + page_path)
                    page.wait_for_function("document.body.dataset.charts === 'ready'", timeout=120_000)
                    loaded = page.evaluate("[window.tailscopeFirstChartMs, window.tailscopeReadyMs,"
                                           " window.tailscopeChartsOnLoad || 1]")
                    samples.append(tuple(loaded) + tuple(page.evaluate(OPEN_SIGNALS)))
                    page.close()
                samples.sort(key=lambda s: s[1])
                out[page_path] = tuple(samples[len(samples) // 2])
        finally:
            browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--day-rate", type=float, default=2.0, help="requests/s of the 24 h run (default 2)")
    parser.add_argument("--run", action="append", default=[], help="also measure this run directory")
    args = parser.parse_args()
    plotly_bytes = len(plotly_source().encode())
    with tempfile.TemporaryDirectory() as tmp:
        results = {"60 s @ 50 req/s": build(os.path.join(tmp, "minute"), 60, 50, 20),
                   f"24 h @ {args.day_rate:g} req/s": build(os.path.join(tmp, "day"), DAY_S, args.day_rate, 3600)}
        for run in args.run:
            results[os.path.basename(run.rstrip("/"))] = render(run)
        reference = reference_page(tmp)
        times = browser_times([r["page"] for r in results.values()] + [reference]) if os.path.exists(CHROMIUM) else {}
        ref_first = times.get(reference, (None, None))[0]
        print(f"plotly.min.js: {plotly_bytes / 1e6:.2f} MB; bare plotly page plots its chart at "
              f"{ref_first:.0f} ms" if ref_first else "no Chromium: browser times skipped")
        for name, r in results.items():
            print(f"\n{name}: {r['requests']:,} requests, {r['windows']:,} windows, {r['spikes']} spikes; "
                  f"analyse {r['analyse_s']:.1f} s, render {r['render_s']:.2f} s")
            print(f"  report.html {r['packed_bytes'] / 1e6:.2f} MB = {r['packed_bytes'] / plotly_bytes:.2f}x "
                  f"plotly.min.js, {r['packed_bytes'] / GOAL_BYTES:.2f}x the 10 MB goal; with plotly inlined "
                  f"{r['inline_bytes'] / 1e6:.2f} MB ({r['inline_bytes'] / r['packed_bytes']:.2f}x)")
            if r["page"] in times and ref_first:
                first, last, on_load, opened, panels = times[r["page"]]
                print(f"  Chromium: first chart {first:.0f} ms ({first / ref_first:.2f}x bare plotly page), "
                      f"the {on_load} charts drawn on load {last:.0f} ms ({last / ref_first:.2f}x); "
                      f"opening All signals draws {panels} panels in {opened:.0f} ms ({opened / ref_first:.2f}x)")


if __name__ == "__main__":
    main()
