// The utilization chart: uPlot (vendored) over a job's series: fetched from /jobs/<key>/chart.json
// (data-src), or read from a JSON script inside the element (an export); the job page's #chart is
// redrawn from the series a finished trial's live response brings (#chart-data, live.js).
(function () {
  "use strict";
  if (!window.uPlot) return;
  function wide(u, values) {  // the y axis as wide as its longest label ("10,000" whole)
    if (!values) return 48;
    var n = 0;
    values.forEach(function (v) { n = Math.max(n, String(v).length); });
    return 22 + 7.5 * n;
  }
  function shown(u, v) { return v == null ? "–" : String(v); }
  function setup(el) {
    var plot = null, inline = el.querySelector("script[type='application/json']");
    function draw(d) {
      if (!d.x.length) { el.textContent = "No attempt has started yet."; plot = null; return; }
      var data = [d.x, d.running, d.finished, d.busy];
      if (plot) { plot.setData(data); return; }
      el.textContent = "";
      plot = new uPlot({
        width: Math.max(320, el.clientWidth), height: 200,
        scales: { x: { time: false } },
        axes: [{ label: "seconds since start", stroke: "#8b96a1", grid: { stroke: "#262c33" } },
               { label: "trials", stroke: "#8b96a1", grid: { stroke: "#262c33" }, size: wide }],
        series: [{ label: "at", value: function (u, v) { return v == null ? "–" : v.toFixed(1) + " s"; } },
                 { label: "running", stroke: "#7cb7ff", value: shown, paths: uPlot.paths.stepped({ align: 1 }) },
                 { label: "finished", stroke: "#5fd38a", value: shown, paths: uPlot.paths.stepped({ align: 1 }) },
                 { label: "slots busy (runner's report)", stroke: "#ffc861", value: shown, spanGaps: true,
                   points: { show: true } }],
      }, data, el);
    }
    if (inline) draw(JSON.parse(inline.textContent));
    else if (el.dataset.src) {
      fetch(el.dataset.src, { headers: { Accept: "application/json" } })
        .then(function (r) { return r.json(); })
        .then(draw)
        .catch(function () {});
    }
    return draw;
  }
  var draws = {};
  document.querySelectorAll(".chart").forEach(function (el) { draws[el.id] = setup(el); });
  document.body.addEventListener("htmx:oobAfterSwap", function (e) {
    if (e.target.id === "chart-data" && e.target.dataset.series && draws.chart) draws.chart(JSON.parse(e.target.dataset.series));
  });
})();
