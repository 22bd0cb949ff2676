/* tailscope run report: draws the charts from the JSON block (see reports/data.py chart_data). */
(function () {
  "use strict";
  var data = tailscope.chartData();
  var plain = tailscope.plain, CONFIG = tailscope.CONFIG;
  var STAGE_COLORS = { preprocess: "#0e7490", queue: "#b45309", batch_wait: "#a16207", inference: "#7c3aed",
                       postprocess: "#15803d", server: "#64748b", client: "#94a3b8", error: "#dc2626",
                       unmapped: "#475569" };
  var timeCharts = [];
  var syncing = false;

  function bandShapes() {
    function shapes(list, color) {
      return list.map(function (b) {
        return { type: "rect", xref: "x", yref: "paper", x0: b.x0, x1: b.x1, y0: 0, y1: 1,
                 fillcolor: color, opacity: 0.18, line: { width: 0 }, layer: "below" };
      });
    }
    var minor = shapes(data.minor_spikes || [], "#dc2626").map(function (s) { s.opacity = 0.07; return s; });
    if (data.warmup_s) {
      minor.push({ type: "rect", xref: "x", yref: "paper", x0: 0, x1: data.warmup_s, y0: 0, y1: 1,
                   fillcolor: "#94a3b8", opacity: 0.12, line: { width: 0 }, layer: "below" });
    }
    return shapes(data.spikes, "#dc2626").concat(minor, shapes(data.faults, "#f59e0b"), shapes(data.limited, "#6b7280"));
  }

  function bandLabels() {
    function labels(list, color, shift) {
      return list.map(function (b) {
        return { x: b.x0, xref: "x", y: 1, yref: "paper", yanchor: "top", xanchor: "left", showarrow: false,
                 yshift: shift, text: plain(b.label), font: { size: 10, color: color } };
      });
    }
    var warmup = data.warmup_s ? [{ x0: 0, label: "warm-up" }] : [];
    return labels(data.faults, "#92400e", -13).concat(labels(data.spikes, "#991b1b", 0), labels(warmup, "#475569", 0));
  }

  function xRangeUpdate(event) {
    if (event["xaxis.autorange"]) { return { "xaxis.range": data.x_range.slice() }; }
    if (event["xaxis.range"]) { return { "xaxis.range": event["xaxis.range"].slice() }; }
    if (event["xaxis.range[0]"] !== undefined && event["xaxis.range[1]"] !== undefined) {
      return { "xaxis.range": [event["xaxis.range[0]"], event["xaxis.range[1]"]] };
    }
    return null;
  }

  function syncTimeAxis(Plotly, source) {
    source.on("plotly_relayout", function (event) {
      var update = xRangeUpdate(event);
      if (syncing || !update) { return; }
      syncing = true;
      var pending = timeCharts.filter(function (d) { return d !== source; })
        .map(function (d) { return Plotly.relayout(d, update); });
      Promise.all(pending).then(function () { syncing = false; }, function () { syncing = false; });
    });
  }

  function timeLayout(extra) {
    var layout = { margin: { l: 64, r: 20, t: 14, b: 36 }, dragmode: "zoom",
                   xaxis: { title: { text: data.x_title }, range: data.x_range.slice() },
                   shapes: bandShapes(), showlegend: false };
    Object.keys(extra).forEach(function (k) { layout[k] = extra[k]; });
    return layout;
  }

  function drawLatency(Plotly) {
    var div = document.getElementById("latency-chart");
    if (!div) { return; }
    var colors = { "P50": "#3b6fb6", "P90": "#0e7490", "P99": "#c2410c", "P99.9": "#7f1d1d", "max": "#9ca3af" };
    var traces = data.latency.lines.map(function (line) {
      return { x: line.x, y: line.y, name: line.name, mode: "lines", connectgaps: !!line.rolling,
               line: { color: colors[line.key || line.name], width: 1.5, dash: line.name === "max" ? "dot" : "solid" } };
    });
    if (data.tail) {
      traces.push({ x: data.tail.x, y: data.tail.y, name: "P99 (rolling, ≥ " + data.tail.min_samples + " requests)",
                    mode: "lines", line: { color: colors.P99, width: 2 },
                    hovertemplate: "P99 %{y:.1f} ms of the requests before %{x:.1f} s<extra></extra>" });
    }
    if (data.slow.x.length) {  /* the legend lists only what is drawn */
      traces.push({ x: data.slow.x, y: data.slow.y, name: "slow requests", mode: "markers", type: "scatter",
                    marker: { color: "#991b1b", size: 4, opacity: 0.55 },
                    text: data.slow.cls.map(function (c, i) { return plain(c) + " · trace " + plain(data.slow.trace[i]); }),
                    hovertemplate: "%{y:.1f} ms at %{x:.2f} s<br>%{text}<extra></extra>" });
    }
    var extra = {
      yaxis: { title: { text: "latency (ms)" }, type: "linear" }, showlegend: true,
      legend: { orientation: "h", x: 0, y: 1.02, xanchor: "left", yanchor: "bottom" },
      margin: { l: 64, r: 20, t: 30, b: 40 }, annotations: bandLabels()
    };
    if (data.other) {  /* requests the server answered that we did not send (reports/server_view.py), right axis */
      traces.unshift({ x: data.other.x, y: data.other.requests_per_s, yaxis: "y2", name: "other traffic (req/s, right axis)",
                       mode: "lines", fill: "tozeroy", line: { color: "#7c3aed", width: 0.5, shape: "hv" },
                       fillcolor: "rgba(124, 58, 237, 0.16)",
                       hovertemplate: "other traffic %{y:.1f} req/s at %{x:.1f} s<extra></extra>" });
      extra.yaxis2 = { title: { text: "other traffic (req/s)", font: { color: "#7c3aed" } }, overlaying: "y", side: "right",
                       rangemode: "tozero", showgrid: false, tickfont: { color: "#7c3aed" } };
      extra.margin.r = 64;
    }
    Plotly.newPlot(div, traces, timeLayout(extra), CONFIG);
    timeCharts.push(div);
    syncTimeAxis(Plotly, div);
    var toggle = document.getElementById("log-toggle");
    toggle.addEventListener("click", function () {
      var toLog = div.layout.yaxis.type !== "log";
      Plotly.relayout(div, { "yaxis.type": toLog ? "log" : "linear" });
      toggle.textContent = toLog ? "linear axis" : "log axis";
    });
  }

  function drawPanel(Plotly, host, panel, index) {
      var title = document.createElement("h3");
      title.textContent = panel.title + (panel.unit ? " (" + panel.unit + ")" : "");
      var div = document.createElement("div");
      div.className = "panel-chart";
      div.id = "signal-" + index;
      host.appendChild(title);
      host.appendChild(div);
      var traces = panel.series.map(function (s, i) {
        return { x: s.x, y: s.y, mode: "lines", name: plain(s.name),
                 line: { color: tailscope.PALETTE[(i + 7) % tailscope.PALETTE.length], width: 1 } };
      });
      /* the unit is in the panel's heading: a y-axis title in a 120-px chart would be clipped */
      var layout = timeLayout({ yaxis: { automargin: true }, showlegend: panel.series.length > 1,
                                legend: { orientation: "h", y: 1.2 }, margin: { l: 64, r: 20, t: 6, b: 26 } });
      layout.xaxis.title = null;
      if (timeCharts.length) { layout.xaxis.range = timeCharts[0].layout.xaxis.range.slice(); }
      Plotly.newPlot(div, traces, layout, CONFIG);
      timeCharts.push(div);
      syncTimeAxis(Plotly, div);
  }

  /* "All signals" is folded: its panels are drawn the first time it is opened, one per task. */
  function lazySignals(Plotly) {
    var section = document.getElementById("all-signals");
    var host = document.getElementById("signal-panels");
    if (!section || !host) { return; }
    whenOpened(section, function () {
      return data.panels.map(function (panel, index) {
        return function () { drawPanel(Plotly, host, panel, index); };
      });
    });
  }

  /* Run a <details> element's draw tasks the first time it is opened (once), one per macrotask;
     sets data-drawn="yes" on it when the last one ran. */
  function whenOpened(details, tasks) {
    function run() {
      if (!details.open || details.getAttribute("data-drawn")) { return; }
      details.setAttribute("data-drawn", "drawing");
      var queue = tasks();
      function next() {
        if (!queue.length) { details.setAttribute("data-drawn", "yes"); return; }
        queue.shift()();
        setTimeout(next, 0);
      }
      next();
    }
    details.addEventListener("toggle", run);
    run();
  }

  function drawEvidence(Plotly, host, chart, spike) {
    var title = document.createElement("h5");
    title.textContent = chart.title + (chart.unit ? " (" + chart.unit + ")" : "");
    var div = document.createElement("div");
    div.className = "evidence-chart";
    var item = document.createElement("div");
    item.appendChild(title);
    item.appendChild(div);
    host.appendChild(item);
    var shapes = [], annotations = [], levels = [];
    function level(y, text, color, dash, side) {
      if (y === null || y === undefined) { return; }
      levels.push(y);
      shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, yref: "y", y0: y, y1: y,
                    line: { color: color, width: 1.5, dash: dash } });
      annotations.push({ xref: "paper", x: side === "left" ? 0 : 1, xanchor: side, y: y, yref: "y",
                         yanchor: "bottom", showarrow: false, text: plain(text), font: { size: 11, color: color } });
    }
    if (spike) {
      shapes.push({ type: "rect", xref: "x", yref: "paper", x0: spike[0], x1: spike[1], y0: 0, y1: 1,
                    fillcolor: "#dc2626", opacity: 0.12, line: { width: 0 }, layer: "below" });
    }
    if (chart.band) {
      levels.push(chart.band[0], chart.band[1]);
      shapes.push({ type: "rect", xref: "paper", x0: 0, x1: 1, yref: "y", y0: chart.band[0], y1: chart.band[1],
                    fillcolor: "#64748b", opacity: 0.18, line: { width: 0 }, layer: "below" });
    }
    level(chart.baseline, chart.baseline_text, "#475569", "solid", "left");
    level(chart.spike, chart.spike_text, "#b91c1c", "dash", "right");
    chart.marks.forEach(function (m) { level(m.y, m.text, "#7c3aed", "dot", "left"); });
    var trace = { x: chart.x, y: chart.y, name: plain(chart.title), type: "scatter",
                  hovertemplate: "%{y:.3~g} " + plain(chart.unit) + " at %{x:.1f} s<extra></extra>" };
    if (chart.kind === "events") {
      trace.mode = "markers";
      trace.marker = { color: "#b91c1c", size: 6 };
      trace.error_y = { type: "data", symmetric: false, array: chart.y.map(function () { return 0; }),
                        arrayminus: chart.y, width: 0, color: "#b91c1c", thickness: 2 };
    } else {
      trace.mode = "lines";
      trace.line = { color: "#1d4ed8", width: 1.5 };
    }
    var traces = [trace];
    if (levels.length && chart.x.length) {  /* keep every stated level inside the y range */
      traces.push({ x: levels.map(function () { return chart.x[0]; }), y: levels, mode: "markers",
                    marker: { opacity: 0 }, hoverinfo: "skip", showlegend: false });
    }
    Plotly.newPlot(div, traces, { margin: { l: 56, r: 12, t: 8, b: 34 }, height: 180, showlegend: false,
                                  shapes: shapes, annotations: annotations,
                                  xaxis: { title: { text: data.x_title } }, yaxis: { automargin: true, rangemode: "tozero" } },
                   CONFIG);
  }

  function drawStageCompare(Plotly, div, stages) {
    var names = stages.names.map(plain);
    Plotly.newPlot(div, [
      { type: "bar", orientation: "h", y: names, x: stages.normal, name: "normal", marker: { color: "#94a3b8" } },
      { type: "bar", orientation: "h", y: names, x: stages.slow, name: "slow", marker: { color: "#dc2626" } }
    ], { margin: { l: 110, r: 10, t: 6, b: 36 }, barmode: "group", xaxis: { title: { text: "mean ms" } },
         yaxis: { autorange: "reversed" }, legend: { orientation: "h" } }, CONFIG);
  }

  function drawWaterfall(Plotly, div, trace) {
    var bars = trace.bars;
    var labels = bars.map(function (b, i) { return (i + 1) + ". " + plain(b.label); });
    Plotly.newPlot(div, [{
      type: "bar", orientation: "h", y: labels, base: bars.map(function (b) { return b.start; }),
      x: bars.map(function (b) { return Math.max(b.end - b.start, 0); }),
      marker: { color: bars.map(function (b) { return STAGE_COLORS[b.kind] || STAGE_COLORS.unmapped; }) },
      text: bars.map(function (b) { return plain(b.kind + (b.detail ? " · " + b.detail : "")); }),
      textposition: "none",
      hovertemplate: "%{y}<br>%{base:.2f} → %{x:.2f} ms long<br>%{text}<extra></extra>"
    }], { margin: { l: 200, r: 10, t: 6, b: 36 }, xaxis: { title: { text: "ms since scheduled send" } },
          yaxis: { autorange: "reversed", automargin: true }, showlegend: false,
          height: Math.max(160, 26 * bars.length + 50) }, CONFIG);
  }

  /* A cause card is folded: its evidence series, stage split and waterfall are drawn when it is opened.
     (An LLM run's TTFT/TPOT spike cards have no charts of their own: their series is drawn under the latency chart.) */
  function lazyCards(Plotly) {
    Array.prototype.forEach.call(document.querySelectorAll(".cause-card[data-chart-index]"), function (card) {
      var chart = data.cards[Number(card.getAttribute("data-chart-index"))];
      whenOpened(card, function () {
        var tasks = [];
        var host = card.querySelector(".evidence-charts");
        if (host) {
          chart.evidence.forEach(function (series) {
            tasks.push(function () { drawEvidence(Plotly, host, series, chart.spike); });
          });
        }
        var stageDiv = card.querySelector(".stage-compare");
        if (stageDiv && chart.stages.names.length) {
          tasks.push(function () { drawStageCompare(Plotly, stageDiv, chart.stages); });
        }
        var fallDiv = card.querySelector(".waterfall");
        if (fallDiv && chart.waterfall) { tasks.push(function () { drawWaterfall(Plotly, fallDiv, chart.waterfall); }); }
        return tasks;
      });
    });
  }

  function drawDistribution(Plotly) {
    var hist = document.getElementById("histogram-chart");
    if (!hist || !data.distribution) { return; }
    tailscope.drawDistribution(Plotly, hist, document.getElementById("cdf-chart"),
                               [{ classes: data.distribution.classes }]);
  }

  function drawStages(Plotly) {
    var div = document.getElementById("stage-chart");
    if (!div || !data.stages.names.length) { return; }
    var names = data.stages.names.map(plain);
    Plotly.newPlot(div, [
      { type: "bar", orientation: "h", y: names, x: data.stages.p50, name: "P50" },
      { type: "bar", orientation: "h", y: names, x: data.stages.p99, name: "P99" }
    ], { margin: { l: 110, r: 20, t: 10, b: 40 }, barmode: "group", xaxis: { title: { text: "ms" } },
         yaxis: { autorange: "reversed" }, legend: { orientation: "h" } }, CONFIG);
  }

  function drawSweep(Plotly) {
    var div = document.getElementById("sweep-chart");
    if (!div || !data.sweep) { return; }
    var s = data.sweep, shapes = [];
    [[s.knee, "#7c3aed"], [s.max_under_slo, "#15803d"]].forEach(function (mark) {
      if (mark[0] !== null && mark[0] !== undefined) {
        shapes.push({ type: "line", xref: "x", yref: "paper", x0: mark[0], x1: mark[0], y0: 0, y1: 1,
                      line: { color: mark[1], dash: "dot" } });
      }
    });
    Plotly.newPlot(div, [
      { x: s.achieved, y: s.p50, name: "P50", mode: "lines+markers" },
      { x: s.achieved, y: s.p99, name: "P99", mode: "lines+markers" }
    ], { margin: { l: 60, r: 20, t: 10, b: 40 }, xaxis: { title: { text: "achieved throughput (req/s)" } },
         yaxis: { title: { text: "latency (ms)" }, type: "log" }, shapes: shapes, legend: { orientation: "h" } }, CONFIG);
  }

  /* An LLM run's charts under the latency chart (reports/llm_view.py): TTFT and TPOT per request with per-window P50/P99, their
     spikes as bands, and the output tokens/s per window; on the shared, synchronised time axis. */
  function drawLlm(Plotly) {
    var llm = data.llm;
    if (!llm) { return; }
    var colors = { "P50": "#3b6fb6", "P90": "#0e7490", "P99": "#c2410c" };
    [["ttft", "TTFT (ms)"], ["tpot", "TPOT (ms)"]].forEach(function (pair) {
      var div = document.getElementById("llm-" + pair[0] + "-chart"), series = llm[pair[0]];
      if (!div || !series) { return; }
      var traces = [{ x: series.x, y: series.y, mode: "markers", type: "scatter", name: "requests",
                      marker: { color: "#64748b", size: 4, opacity: 0.5 },
                      text: series.cls.map(plain), hovertemplate: "%{y:.1f} ms at %{x:.2f} s · %{text}<extra></extra>" }];
      series.lines.forEach(function (line) {
        traces.push({ x: line.x, y: line.y, name: line.name, mode: "lines", connectgaps: !!line.rolling,
                      line: { color: colors[line.key || line.name], width: 1.5 } });
      });
      var layout = timeLayout({ yaxis: { title: { text: pair[1] } }, showlegend: true,
                                legend: { orientation: "h", x: 0, y: 1.02, xanchor: "left", yanchor: "bottom" },
                                margin: { l: 64, r: 20, t: 30, b: 40 } });
      layout.shapes = layout.shapes.concat(series.bands.map(function (b) {
        return { type: "rect", xref: "x", yref: "paper", x0: b.x0, x1: b.x1, y0: 0, y1: 1, fillcolor: "#dc2626",
                 opacity: 0.18, line: { width: 0 }, layer: "below" };
      }));
      Plotly.newPlot(div, traces, layout, CONFIG);
      timeCharts.push(div);
      syncTimeAxis(Plotly, div);
    });
    var tokens = document.getElementById("llm-tokens-chart");
    if (tokens && llm.tokens) {
      Plotly.newPlot(tokens, [{ x: llm.tokens.x, y: llm.tokens.y, mode: "lines", name: "output tokens/s",
                                line: { color: "#15803d", width: 1.5 } }],
                     timeLayout({ yaxis: { title: { text: "output tokens/s" }, rangemode: "tozero" } }), CONFIG);
      timeCharts.push(tokens);
      syncTimeAxis(Plotly, tokens);
    }
  }

  /* The server's load panels under the LLM charts (reports/server_view.py): waiting/running, KV-cache usage,
     preemptions, prompt tokens prefilled; on the shared, synchronised time axis. */
  var SERVER_COLORS = { waiting: "#b45309", running: "#3b6fb6", kv_usage: "#7c3aed", preemptions: "#dc2626",
                        prompt_tokens: "#0e7490", other_traffic: "#a78bfa" };
  function drawServer(Plotly) {
    if (!data.server) { return; }
    data.server.panels.forEach(function (panel) {
      var div = document.getElementById(panel.id + "-chart");
      if (!div) { return; }
      var traces = panel.series.map(function (s) {
        var trace = { x: s.x, y: s.y, mode: "lines", name: plain(s.name), connectgaps: false,
                      line: { color: SERVER_COLORS[s.role] || "#475569", width: 1.5 },
                      hovertemplate: "%{y:.3~g} " + plain(panel.unit) + " at %{x:.1f} s<extra>" + plain(s.name) + "</extra>" };
        if (s.role === "kv_usage" || s.role === "other_traffic") { trace.fill = "tozeroy"; }
        return trace;
      });
      var yaxis = { automargin: true, rangemode: "tozero" };
      if (panel.id === "server-kv") { yaxis.range = [0, 105]; }
      var layout = timeLayout({ yaxis: yaxis, showlegend: panel.series.length > 1,
                                legend: { orientation: "h", x: 0, y: 1.0, xanchor: "left", yanchor: "bottom" },
                                margin: { l: 64, r: 20, t: panel.series.length > 1 ? 22 : 6, b: 26 } });
      layout.xaxis.title = null;
      if (timeCharts.length) { layout.xaxis.range = timeCharts[0].layout.xaxis.range.slice(); }
      Plotly.newPlot(div, traces, layout, CONFIG);
      timeCharts.push(div);
      syncTimeAxis(Plotly, div);
    });
  }

  /* Stage means of the slow requests against the normal ones (stages.slow_split); the server span, the sum of its stages, is left out. */
  function drawSlowSplit(Plotly) {
    var div = document.getElementById("slow-split-chart"), split = data.slow_split;
    if (!div || !split) { return; }
    var keep = split.names.map(function (n, i) { return i; }).filter(function (i) {
      return split.names[i] !== "server" || split.names.length === 1;
    });
    var names = keep.map(function (i) { return plain(split.names[i]); });
    Plotly.newPlot(div, [
      { type: "bar", orientation: "h", y: names, x: keep.map(function (i) { return split.normal[i]; }), name: "normal requests",
        marker: { color: "#94a3b8" }, hovertemplate: "%{y}: mean %{x:.1f} ms (normal)<extra></extra>" },
      { type: "bar", orientation: "h", y: names, x: keep.map(function (i) { return split.slow[i]; }), name: "slow requests",
        marker: { color: "#dc2626" }, hovertemplate: "%{y}: mean %{x:.1f} ms (slow)<extra></extra>" }
    ], { margin: { l: 110, r: 20, t: 10, b: 40 }, barmode: "group",
         xaxis: { title: { text: "mean ms per request (log)" }, type: "log" },
         yaxis: { autorange: "reversed" }, legend: { orientation: "h" } }, CONFIG);
  }

  /* On load: the latency chart first, then the charts of the open sections below it. Folded sections
     (cause cards, "All signals") draw when opened. */
  tailscope.whenPlotly(function (Plotly) {
    return [
      function () { drawLatency(Plotly); },
      function () { drawLlm(Plotly); },
      function () { drawServer(Plotly); },
      function () { drawDistribution(Plotly); },
      function () { drawStages(Plotly); },
      function () { drawSlowSplit(Plotly); },
      function () { drawSweep(Plotly); },
      function () { lazyCards(Plotly); lazySignals(Plotly); }
    ];
  });
})();
