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
    return shapes(data.spikes, "#dc2626").concat(shapes(data.faults, "#f59e0b"), shapes(data.limited, "#6b7280"));
  }

  function bandLabels() {
    return data.faults.map(function (b) {
      return { x: b.x0, xref: "x", y: 1, yref: "paper", yanchor: "bottom", xanchor: "left", showarrow: false,
               text: plain(b.label), font: { size: 10, color: "#92400e" } };
    });
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
      return { x: line.x, y: line.y, name: line.name, mode: "lines", connectgaps: false,
               line: { color: colors[line.name], width: 1.5, dash: line.name === "max" ? "dot" : "solid" } };
    });
    traces.push({ x: data.slow.x, y: data.slow.y, name: "slow requests", mode: "markers", type: "scatter",
                  marker: { color: "#991b1b", size: 4, opacity: 0.55 },
                  text: data.slow.cls.map(function (c, i) { return plain(c) + " · trace " + plain(data.slow.trace[i]); }),
                  hovertemplate: "%{y:.1f} ms at %{x:.2f} s<br>%{text}<extra></extra>" });
    Plotly.newPlot(div, traces, timeLayout({
      yaxis: { title: { text: "latency (ms)" }, type: "linear" }, showlegend: true, legend: { orientation: "h" },
      annotations: bandLabels()
    }), CONFIG);
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
      var layout = timeLayout({ yaxis: { title: { text: plain(panel.unit) } }, showlegend: panel.series.length > 1,
                                legend: { orientation: "h", y: 1.2 }, margin: { l: 64, r: 20, t: 6, b: 26 } });
      layout.xaxis.title = null;
      if (timeCharts.length) { layout.xaxis.range = timeCharts[0].layout.xaxis.range.slice(); }
      Plotly.newPlot(div, traces, layout, CONFIG);
      timeCharts.push(div);
      syncTimeAxis(Plotly, div);
  }

  function panelTasks(Plotly) {
    var host = document.getElementById("signal-panels");
    if (!host) { return []; }
    return data.panels.map(function (panel, index) {
      return function () { drawPanel(Plotly, host, panel, index); };
    });
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

  function drawCards(Plotly) {
    Array.prototype.forEach.call(document.querySelectorAll(".cause-card"), function (card) {
      var chart = data.cards[Number(card.getAttribute("data-chart-index"))];
      var stageDiv = card.querySelector(".stage-compare");
      if (stageDiv && chart.stages.names.length) { drawStageCompare(Plotly, stageDiv, chart.stages); }
      var fallDiv = card.querySelector(".waterfall");
      if (fallDiv && chart.waterfall) { drawWaterfall(Plotly, fallDiv, chart.waterfall); }
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

  tailscope.whenPlotly(function (Plotly) {
    return [function () { drawLatency(Plotly); }].concat(panelTasks(Plotly), [
      function () { drawCards(Plotly); },
      function () { drawDistribution(Plotly); },
      function () { drawStages(Plotly); },
      function () { drawSweep(Plotly); }
    ]);
  });
})();
