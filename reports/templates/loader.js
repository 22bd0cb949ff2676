/* tailscope: unpack the embedded plotly.js (gzip + base64) with DecompressionStream, then run it.
   window.tailscopePlotly resolves with Plotly, or rejects when the browser cannot unpack it. */
(function () {
  "use strict";
  function unpack() {
    var inline = document.getElementById("plotly-inline");
    if (inline) { return Promise.resolve(window.Plotly); }
    var packed = document.getElementById("plotly-packed");
    if (typeof DecompressionStream === "undefined") {
      return Promise.reject(new Error("this browser has no DecompressionStream"));
    }
    var binary = atob(packed.textContent.trim());
    var bytes = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i += 1) { bytes[i] = binary.charCodeAt(i); }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(function (source) {
      (0, eval)(source);  /* indirect eval: global scope; plotly sets window.Plotly */
      return window.Plotly;
    });
  }
  window.tailscopePlotly = unpack();
})();
