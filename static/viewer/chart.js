// The job page's utilization chart: uPlot (vendored) over /jobs/<key>/chart.json, redrawn from the
// series a finished trial's live response brings (#chart-data, static/viewer/live.js). Only glue
// here: uPlot draws.
(function () {
  "use strict";
  var el = document.getElementById("chart");
  if (!el || !window.uPlot) return;
  var plot = null;
  function load() {
    fetch(el.dataset.src, { headers: { Accept: "application/json" } })
      .then(function (r) { return r.json(); })
      .then(draw)
      .catch(function () {});
  }
  function draw(d) {
    if (!d.x.length) { el.textContent = "No attempt has started yet."; plot = null; return; }
    var data = [d.x, d.running, d.finished, d.busy];
    if (plot) { plot.setData(data); return; }
    el.textContent = "";
    plot = new uPlot({
      width: Math.max(320, el.clientWidth), height: 180,
      scales: { x: { time: false } },
      axes: [{ label: "seconds since start", stroke: "#8b96a1", grid: { stroke: "#262c33" } },
             { stroke: "#8b96a1", grid: { stroke: "#262c33" } }],
      series: [{}, { label: "running", stroke: "#7cb7ff", paths: uPlot.paths.stepped({ align: 1 }) },
               { label: "finished", stroke: "#5fd38a" },
               { label: "slots busy (runner's report)", stroke: "#ffc861", spanGaps: true,
                 points: { show: true } }],
    }, data, el);
  }
  load();
  document.body.addEventListener("htmx:oobAfterSwap", function (e) {
    if (e.target.id === "chart-data" && e.target.dataset.series) draw(JSON.parse(e.target.dataset.series));
  });
})();
