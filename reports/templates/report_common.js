/* tailscope pages: helpers shared by the run report and the comparison report.
   Run strings are never evaluated: they reach the DOM via textContent and Plotly via plain(). */
var tailscope = (function () {
  "use strict";
  var CONFIG = { displaylogo: false, responsive: true };
  var PALETTE = ["#3b6fb6", "#c2410c", "#15803d", "#7c3aed", "#b45309", "#0e7490", "#be185d", "#4b5563"];

  /* Plotly renders a few HTML-like tags in labels and hover text: show run strings as plain text. */
  function plain(text) {
    return String(text === null || text === undefined ? "" : text)
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function chartData() {
    return JSON.parse(document.getElementById("chart-data").textContent);
  }

  /* Run the draw tasks once the embedded plotly.js is unpacked, one per macrotask so the browser
     paints the first charts (the latency chart) before drawing the rest. Records the time of the
     first plotted chart and of the last (ms since navigation start) and how many charts were drawn
     (window.tailscopeChartsOnLoad), and marks the page ready. */
  function whenPlotly(tasks) {
    window.tailscopePlotly.then(function (Plotly) {
      var started = performance.now(), queue = tasks(Plotly).slice();
      function next() {
        if (!queue.length) {
          window.tailscopeDrawMs = performance.now() - started;
          window.tailscopeReadyMs = performance.now();
          window.tailscopeChartsOnLoad = document.querySelectorAll(".js-plotly-plot").length;
          document.body.setAttribute("data-charts", "ready");
          return;
        }
        queue.shift()();
        if (window.tailscopeFirstChartMs === undefined) { window.tailscopeFirstChartMs = performance.now(); }
        setTimeout(next, 0);
      }
      next();
    }, function (error) {
      document.getElementById("charts-unavailable").hidden = false;
      document.body.setAttribute("data-charts", "unavailable");
      if (window.console) { console.warn("tailscope: charts unavailable: " + error.message); }
    });
  }

  function histogramTraces(classes, opacity, suffix) {
    return classes.map(function (c, i) {
      return { type: "scatter", mode: "lines", line: { shape: "hvh", color: PALETTE[i % PALETTE.length] },
               x: c.centres, y: c.share, name: plain(c.name + (suffix || "")), opacity: opacity };
    });
  }

  function cdfTraces(classes, suffix, dash) {
    return classes.map(function (c, i) {
      return { type: "scatter", mode: "lines", line: { color: PALETTE[i % PALETTE.length], dash: dash || "solid" },
               x: c.cdf_x, y: c.cdf, name: plain(c.name + (suffix || "")) };
    });
  }

  function drawDistribution(Plotly, histDiv, cdfDiv, traceSets) {
    var hist = [], cdf = [];
    traceSets.forEach(function (set) {
      hist = hist.concat(histogramTraces(set.classes, set.opacity || 1, set.suffix).map(function (t) {
        if (set.dash) { t.line.dash = set.dash; } return t;
      }));
      cdf = cdf.concat(cdfTraces(set.classes, set.suffix, set.dash));
    });
    Plotly.newPlot(histDiv, hist, {
      margin: { l: 60, r: 20, t: 30, b: 45 }, title: { text: "histogram", font: { size: 13 } },
      xaxis: { type: "log", title: { text: "latency (ms, log)" } },
      yaxis: { type: "log", title: { text: "share of requests (log)" } }, legend: { orientation: "h" }
    }, CONFIG);
    Plotly.newPlot(cdfDiv, cdf, {
      margin: { l: 60, r: 20, t: 30, b: 45 }, title: { text: "cumulative share", font: { size: 13 } },
      xaxis: { type: "log", title: { text: "latency (ms, log)" } },
      yaxis: { title: { text: "share at or below" }, range: [0, 1.02] }, legend: { orientation: "h" }
    }, CONFIG);
  }

  return { CONFIG: CONFIG, PALETTE: PALETTE, plain: plain, chartData: chartData, whenPlotly: whenPlotly,
           drawDistribution: drawDistribution };
})();
