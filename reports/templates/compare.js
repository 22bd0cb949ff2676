/* tailscope comparison report: both runs' distributions overlaid (see reports/compare_html.py). */
(function () {
  "use strict";
  var data = tailscope.chartData();
  tailscope.whenPlotly(function (Plotly) {
    return [function () {
      var hist = document.getElementById("histogram-chart");
      if (hist && data.sets.length) {
        tailscope.drawDistribution(Plotly, hist, document.getElementById("cdf-chart"), data.sets);
      }
    }];
  });
})();
