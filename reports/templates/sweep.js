/* tailscope sweep report: the throughput-latency curve and the token frontier (see reports/sweep_report.py). */
(function () {
  "use strict";
  var data = tailscope.chartData();

  function trace(name, series, color) {
    return { x: data.achieved, y: series.y, name: name, mode: "lines+markers", line: { color: color },
             error_y: { type: "data", symmetric: false, array: series.plus, arrayminus: series.minus, visible: true },
             text: data.level };
  }

  function drawCurve(Plotly) {
    var div = document.getElementById("sweep-chart");
    if (!div || !data.achieved.length) { return; }
    var shapes = [], annotations = [];
    if (data.knee) {
      annotations.push({ x: data.knee.x, y: data.knee.y, text: "knee", showarrow: true, arrowhead: 2 });
    }
    if (data.max_rate !== null) {
      shapes.push({ type: "line", xref: "x", yref: "paper", x0: data.max_rate, x1: data.max_rate, y0: 0, y1: 1,
                    line: { color: "#1f7a3d", dash: "dash" } });
      annotations.push({ x: data.max_rate, y: 1, yref: "paper", text: "max rate under SLO", showarrow: false });
    }
    Plotly.newPlot(div, [trace("P50", data.p50, "#3b6fb6"), trace("P99", data.p99, "#c2410c")], {
      margin: { l: 60, r: 20, t: 20, b: 40 }, xaxis: { title: { text: "achieved throughput (req/s)" } },
      yaxis: { title: { text: "latency (ms)" } }, legend: { orientation: "h" }, shapes: shapes, annotations: annotations
    }, tailscope.CONFIG);
  }

  function frontierTrace(name, series, color, axis, dash) {
    var f = data.frontier;
    return { x: f.x, y: series.y, name: name, yaxis: axis, mode: "lines+markers",
             line: { color: color, dash: dash }, text: f.label,
             marker: { size: f.pareto.map(function (p) { return p ? 10 : 6; }) },
             error_y: { type: "data", symmetric: false, array: series.plus, arrayminus: series.minus, visible: true } };
  }

  function drawFrontier(Plotly) {
    var div = document.getElementById("frontier-chart"), f = data.frontier;
    if (!div || !f || !f.x.length) { return; }
    var annotations = [];
    if (f.best) {
      annotations.push({ x: f.best.x, y: f.best.tpot, yref: "y2", text: "best under SLO: " + f.best.label,
                         showarrow: true, arrowhead: 2 });
    }
    Plotly.newPlot(div, [
      frontierTrace("TTFT P50", f.ttft_p50, "#3b6fb6", "y", "dot"), frontierTrace("TTFT P99", f.ttft_p99, "#3b6fb6", "y", "solid"),
      frontierTrace("TPOT P50", f.tpot_p50, "#c2410c", "y2", "dot"), frontierTrace("TPOT P99", f.tpot_p99, "#c2410c", "y2", "solid")
    ], {
      margin: { l: 60, r: 60, t: 20, b: 40 }, xaxis: { title: { text: "output tokens/s" } },
      yaxis: { title: { text: "TTFT (ms)" } },
      yaxis2: { title: { text: "TPOT (ms)" }, overlaying: "y", side: "right" },
      legend: { orientation: "h" }, annotations: annotations
    }, tailscope.CONFIG);
  }

  tailscope.whenPlotly(function (Plotly) {
    return [function () { drawCurve(Plotly); }, function () { drawFrontier(Plotly); }];
  });
})();
