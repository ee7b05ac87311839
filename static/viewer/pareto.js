// The Pareto view: one point per job, the mean cost per trial (the measure ticked) against the
// mean reward, with 95% bootstrap whiskers on both, and the frontier joined by a line. Drawn on a
// canvas from the JSON runs/results/outcomes.py makes.
(function () {
  "use strict";
  var PALETTE = ["#6fb0ff", "#5fd38a", "#ffb020", "#d0584c", "#c58cff", "#4fd1c5", "#f2f5f8", "#ff8ad8"];
  function nice(v) {
    if (v <= 0) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v))), m = v / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }
  function fmt(v, measure) {
    if (measure === "cost_usd") return "$" + (v < 1 ? v.toPrecision(2) : v.toFixed(2));
    if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString("en-US");
    return String(Math.round(v * 100) / 100);
  }
  function draw(box) {
    var script = box.querySelector("script[type='application/json']"), canvas = box.querySelector("canvas");
    if (!script || !canvas) return;
    var d = JSON.parse(script.textContent), picked = box.querySelector("input[name='pareto-x']:checked");
    var m = picked ? picked.value : "cost_usd", width = Math.max(320, box.clientWidth || 800), height = 360;
    var ratio = window.devicePixelRatio || 1;
    canvas.width = width * ratio; canvas.height = height * ratio;
    canvas.style.width = width + "px"; canvas.style.height = height + "px";
    var ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio); ctx.font = "12px system-ui, sans-serif";
    var pts = d.points.filter(function (p) { return p.reward != null && p.means[m] != null; });
    var L = 70, R = 24, T = 16, B = 44, w = width - L - R, h = height - T - B;
    var xmax = nice(Math.max.apply(null, pts.map(function (p) { return p.cis[m] ? p.cis[m][1] : p.means[m]; }).concat([0])) * 1.05);
    function X(v) { return L + w * v / xmax; }
    function Y(v) { return T + h * (1 - v); }
    ctx.strokeStyle = "#262c33"; ctx.fillStyle = "#8b96a1"; ctx.lineWidth = 1;
    for (var i = 0; i <= 5; i++) {
      var gx = xmax * i / 5, gy = i / 5;
      ctx.beginPath(); ctx.moveTo(X(gx), T); ctx.lineTo(X(gx), T + h); ctx.moveTo(L, Y(gy)); ctx.lineTo(L + w, Y(gy)); ctx.stroke();
      ctx.textAlign = i === 5 ? "right" : i === 0 ? "left" : "center"; ctx.textBaseline = "top"; ctx.fillText(fmt(gx, m), X(gx), T + h + 6);
      ctx.textAlign = "right"; ctx.textBaseline = "middle"; ctx.fillText(gy.toFixed(1), L - 8, Y(gy));
    }
    ctx.textAlign = "center"; ctx.textBaseline = "bottom";
    ctx.fillText("mean " + (d.measures[m] || m) + " per trial", L + w / 2, height - 2);
    ctx.save(); ctx.translate(14, T + h / 2); ctx.rotate(-Math.PI / 2); ctx.textBaseline = "middle"; ctx.fillText("mean reward", 0, 0); ctx.restore();
    if (!pts.length) { ctx.textAlign = "left"; ctx.fillText("No job has both a reward and this measure.", L + 10, T + 20); }
    var front = pts.filter(function (p) { return p.frontier[m]; }).sort(function (a, b) { return a.means[m] - b.means[m]; });
    if (front.length > 1) {
      ctx.strokeStyle = "#5fd38a"; ctx.setLineDash([5, 4]); ctx.beginPath();
      front.forEach(function (p, i) { (i ? ctx.lineTo : ctx.moveTo).call(ctx, X(p.means[m]), Y(p.reward)); });
      ctx.stroke(); ctx.setLineDash([]);
    }
    ctx.textAlign = "left"; ctx.textBaseline = "bottom";
    pts.forEach(function (p, i) {
      var x = X(p.means[m]), y = Y(p.reward), c = PALETTE[i % PALETTE.length];
      ctx.strokeStyle = c; ctx.fillStyle = c; ctx.lineWidth = 1.5;
      if (p.cis[m]) { ctx.beginPath(); ctx.moveTo(X(p.cis[m][0]), y); ctx.lineTo(X(p.cis[m][1]), y); ctx.stroke(); }
      if (p.reward_ci) { ctx.beginPath(); ctx.moveTo(x, Y(p.reward_ci[0])); ctx.lineTo(x, Y(p.reward_ci[1])); ctx.stroke(); }
      ctx.beginPath(); ctx.arc(x, y, p.frontier[m] ? 6 : 4.5, 0, 2 * Math.PI);
      if (p.frontier[m]) ctx.fill(); else { ctx.fillStyle = "#111418"; ctx.fill(); ctx.stroke(); ctx.fillStyle = c; }
      var text = p.label.length > 42 ? p.label.slice(0, 41) + "…" : p.label;
      ctx.fillText(text, Math.min(x + 8, L + w - ctx.measureText(text).width), Math.max(T + 14, y - 6));
    });
    canvas.dataset.points = pts.length; canvas.dataset.frontier = front.length; canvas.dataset.drawn = "1";
  }
  function firstMeasure(box) {  // start on a measure the jobs have (an oracle run has no cost)
    var script = box.querySelector("script[type='application/json']");
    if (!script) return;
    var d = JSON.parse(script.textContent), radios = box.querySelectorAll("input[name='pareto-x']");
    for (var i = 0; i < radios.length; i++) {
      var m = radios[i].value;
      if (d.points.some(function (p) { return p.reward != null && p.means[m] != null; })) { radios[i].checked = true; return; }
    }
  }
  function fromUrl(box) {  // the measure a link or a reload names (?pareto=sandbox_s), if shown
    var m = new URLSearchParams(location.search).get("pareto");
    var radio = m && box.querySelector("input[name='pareto-x'][value='" + m.replace(/[^a-z_]/g, "") + "']");
    if (radio) { radio.checked = true; return true; }
    return false;
  }
  function remember(box) {  // the view's state lives in its URL: the measure ticked goes there
    var on = box.querySelector("input[name='pareto-x']:checked");
    if (!on || !/^https?:$/.test(location.protocol)) return;  // an exported file keeps its address
    var params = new URLSearchParams(location.search);
    params.set("pareto", on.value);
    history.replaceState(history.state, "", location.pathname + "?" + params.toString() + location.hash);
  }
  function all() {
    document.querySelectorAll(".pareto").forEach(function (box) {
      if (!box._wired && !fromUrl(box)) firstMeasure(box);
      draw(box);
      if (!box._wired) {
        box._wired = true;
        box.addEventListener("change", function () { draw(box); remember(box); });
      }
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", all); else all();
  window.addEventListener("resize", all);
})();
