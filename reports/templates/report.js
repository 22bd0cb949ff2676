/* tailscope report: draws the charts from the JSON block; never evaluates run strings. */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("chart-data").textContent);
  var CONFIG = { displaylogo: false, responsive: true };
  var timeCharts = [];
  var syncing = false;

  /* Plotly renders a few HTML-like tags in labels: show run strings as plain text. */
  function plain(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function bands(list, color) {
    return list.map(function (b) {
      return { type: "rect", xref: "x", yref: "paper", x0: b.x0, x1: b.x1, y0: 0, y1: 1,
               fillcolor: color, opacity: 0.18, line: { width: 0 }, layer: "below" };
    });
  }

  function xRangeUpdate(event) {
    if (event["xaxis.autorange"]) { return { "xaxis.autorange": true }; }
    if (event["xaxis.range"]) { return { "xaxis.range": event["xaxis.range"].slice() }; }
    if (event["xaxis.range[0]"] !== undefined && event["xaxis.range[1]"] !== undefined) {
      return { "xaxis.range": [event["xaxis.range[0]"], event["xaxis.range[1]"]] };
    }
    return null;
  }

  function syncTimeAxis(source) {
    source.on("plotly_relayout", function (event) {
      var update = xRangeUpdate(event);
      if (syncing || !update) { return; }
      syncing = true;
      var pending = timeCharts.filter(function (d) { return d !== source; })
        .map(function (d) { return Plotly.relayout(d, update); });
      Promise.all(pending).then(function () { syncing = false; }, function () { syncing = false; });
    });
  }

  function drawLatency() {
    var div = document.getElementById("latency-chart");
    if (!div || !data.latency.x.length) { return; }
    var traces = [
      { x: data.latency.x, y: data.latency.p50, name: "P50", mode: "lines", line: { color: "#3b6fb6" } },
      { x: data.latency.x, y: data.latency.p99, name: "P99", mode: "lines", line: { color: "#c2410c" } }
    ];
    var layout = {
      margin: { l: 60, r: 20, t: 10, b: 40 }, xaxis: { title: { text: data.x_title }, range: data.x_range.slice() },
      yaxis: { title: { text: "latency (ms)" }, type: "linear" }, legend: { orientation: "h" },
      shapes: bands(data.spikes, "#dc2626").concat(bands(data.faults, "#f59e0b"))
    };
    Plotly.newPlot(div, traces, layout, CONFIG);
    timeCharts.push(div);
    var toggle = document.getElementById("log-toggle");
    toggle.addEventListener("click", function () {
      var toLog = div.layout.yaxis.type !== "log";
      Plotly.relayout(div, { "yaxis.type": toLog ? "log" : "linear" });
      toggle.textContent = toLog ? "linear axis" : "log axis";
    });
  }

  function drawSignals() {
    var host = document.getElementById("signal-panels");
    if (!host) { return; }
    data.signals.forEach(function (series, index) {
      var title = document.createElement("h3");
      title.textContent = series.name + (series.unit ? " (" + series.unit + ")" : "");
      var div = document.createElement("div");
      div.className = "panel-chart";
      div.id = "signal-" + index;
      host.appendChild(title);
      host.appendChild(div);
      Plotly.newPlot(div, [{ x: series.x, y: series.y, mode: "lines", name: plain(series.name),
                             line: { color: "#4b5563", width: 1 } }],
        { margin: { l: 60, r: 20, t: 4, b: 30 }, xaxis: { title: { text: data.x_title }, range: data.x_range.slice() },
          yaxis: { title: { text: plain(series.unit) } }, showlegend: false,
          shapes: bands(data.spikes, "#dc2626").concat(bands(data.faults, "#f59e0b")) }, CONFIG);
      timeCharts.push(div);
    });
  }

  function drawStages() {
    var div = document.getElementById("stage-chart");
    if (!div || !data.stages.names.length) { return; }
    var names = data.stages.names.map(plain);
    Plotly.newPlot(div, [
      { type: "bar", orientation: "h", y: names, x: data.stages.p50, name: "P50" },
      { type: "bar", orientation: "h", y: names, x: data.stages.p99, name: "P99" }
    ], { margin: { l: 110, r: 20, t: 10, b: 40 }, barmode: "group", xaxis: { title: { text: "ms" } },
         yaxis: { autorange: "reversed" }, legend: { orientation: "h" } }, CONFIG);
  }

  drawLatency();
  drawSignals();
  timeCharts.forEach(syncTimeAxis);
  drawStages();
})();
