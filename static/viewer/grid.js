// The outcomes grid, drawn on a canvas from its compact JSON (runs/results/outcomes.py says what
// each character means): rows of tasks, a column per job, one square per trial; a tooltip on
// hover, the trial's page on click. A big single job is drawn as a flow of small squares instead
// (a summary), so 100,000 trials are one canvas, not 100,000 elements.
(function () {
  "use strict";
  var LEVELS = "abcdefghijk", ERR = "lmnopqrstuv";
  var STATES = { R: "running", W: "waiting", N: "not run", C: "cancelled", x: "unscored", X: "unscored" };
  var COLORS = {
    fail: "#d0584c", levels: ["#d0584c", "#1f3f66", "#23497a", "#27548d", "#2b5fa1", "#3069b4",
      "#3674c6", "#3e80d6", "#4a8ce3", "#5a9aee", "#6fb0ff"],
    amber: "#ffb020", bar: "#f2f5f8", hollow: "#5b6672", running: "#7cb7ff", bg: "#111418",
    text: "#c9d2dc", muted: "#8b96a1",
  };
  var hatch = null;
  function hatchPattern(ctx) {
    if (hatch) return hatch;
    var c = document.createElement("canvas");
    c.width = c.height = 6;
    var h = c.getContext("2d");
    h.fillStyle = "#3a4048"; h.fillRect(0, 0, 6, 6);
    h.strokeStyle = "#9aa3ad"; h.lineWidth = 1.5;
    h.beginPath(); h.moveTo(0, 6); h.lineTo(6, 0); h.moveTo(-3, 3); h.lineTo(3, -3); h.moveTo(3, 9); h.lineTo(9, 3); h.stroke();
    hatch = ctx.createPattern(c, "repeat");
    return hatch;
  }
  function info(ch) {
    var i = LEVELS.indexOf(ch.toLowerCase()), e = false;
    if (i < 0) { i = ERR.indexOf(ch.toLowerCase()); e = i >= 0; }
    return { level: i, errored: e, retried: ch !== ch.toLowerCase() && ch !== "R" && ch !== "W" && ch !== "N" && ch !== "C",
      state: i >= 0 ? "" : (STATES[ch] || ch) };
  }
  function square(ctx, ch, x, y, s) {
    var f = info(ch);
    if (f.level >= 0) {
      ctx.fillStyle = COLORS.levels[f.level]; ctx.fillRect(x, y, s, s);
      if (f.errored) { ctx.strokeStyle = COLORS.amber; ctx.lineWidth = Math.max(1, s / 6); ctx.strokeRect(x + 0.75, y + 0.75, s - 1.5, s - 1.5); }
    } else if (ch === "x" || ch === "X") {
      ctx.fillStyle = hatchPattern(ctx); ctx.fillRect(x, y, s, s);
    } else if (ch === "R") {  // running: a light-blue ring with a dot
      ctx.strokeStyle = COLORS.running; ctx.lineWidth = Math.max(1, s / 6); ctx.strokeRect(x + 1, y + 1, s - 2, s - 2);
      ctx.fillStyle = COLORS.running; ctx.fillRect(x + s / 2 - s / 8, y + s / 2 - s / 8, Math.max(1, s / 4), Math.max(1, s / 4));
    } else {  // waiting, not run, cancelled: hollow
      ctx.strokeStyle = COLORS.hollow; ctx.lineWidth = 1; ctx.strokeRect(x + 0.5, y + 0.5, s - 1, s - 1);
      if (ch === "C") { ctx.beginPath(); ctx.moveTo(x + 1, y + s - 1); ctx.lineTo(x + s - 1, y + 1); ctx.stroke(); }
    }
    if (f.retried && s >= 6) { ctx.fillStyle = COLORS.bar; ctx.fillRect(x + 1, y + 1, s - 2, Math.max(1, Math.round(s / 5))); }
  }
  function pairName(task, k) { return k === 0 ? task : task + "#" + k; }
  function describe(d, col, row, k) {
    var c = d.columns[col], ch = c.cells[row][k], place = c.starts[row] + k, ex = c.extra[String(place)] || [null, null, null];
    var f = info(ch), name = ex[0] || pairName(d.tasks[row], k), what;
    if (f.level >= 0) what = "reward " + (ex[1] != null ? ex[1].toFixed(2) : (f.level / 10).toFixed(2)) + (f.errored ? " (errored but scored)" : "");
    else what = f.state;
    if (ex[2]) what += " — " + ex[2];
    if (f.retried) what += " · retried";
    return { name: name, text: name + ": " + what + (d.columns.length > 1 ? "\n" + c.label : ""),
      href: c.href + encodeURIComponent(name) + c.suffix };
  }
  function counts(d) {
    var n = { passed: 0, failed: 0, partial: 0, unscored: 0, other: 0 };
    d.columns.forEach(function (c) { c.cells.forEach(function (cell) {
      for (var i = 0; i < cell.length; i++) {
        var f = info(cell[i]);
        if (f.level === 10) n.passed++; else if (f.level === 0) n.failed++; else if (f.level > 0) n.partial++;
        else if (cell[i] === "x" || cell[i] === "X") n.unscored++; else n.other++;
      }
    }); });
    return n;
  }
  function layout(d, width) {
    var ncol = d.columns.length, nrow = d.tasks.length, total = 0;
    d.columns.forEach(function (c) { c.cells.forEach(function (cell) { total += cell.length; }); });
    if (ncol === 1 && nrow > 200) {  // a summary: every trial in row order, wrapped
      var s = Math.max(3, Math.min(12, Math.floor(Math.sqrt(width * 2400 / Math.max(1, total)))));
      var step = s + (s >= 8 ? 2 : 1), per = Math.max(1, Math.floor(width / step));
      return { flow: true, s: s, step: step, per: per, height: Math.ceil(total / per) * step + 4, total: total };
    }
    var labelW = Math.min(240, Math.max(80, width * 0.22)), s = nrow * ncol > 4000 ? 8 : 12, step = s + 2;
    var free = width - labelW - 50, maxLen = d.columns.map(function (c) { return Math.max(1, Math.max.apply(null, c.cells.map(function (x) { return x.length; }).concat([1]))); });
    var colW = maxLen.map(function (m) { return Math.max(Math.min(190, Math.floor(free / ncol) - 8), Math.min(m * step, Math.floor(free / ncol) - 8)); });
    var per = colW.map(function (w, i) { return Math.max(1, Math.min(maxLen[i], Math.floor((w - 6) / step))); });
    var rowH = [], y = 62;
    var tops = d.tasks.map(function (t, r) {
      var lines = 1;
      d.columns.forEach(function (c, i) { lines = Math.max(lines, Math.ceil(c.cells[r].length / per[i])); });
      var top = y; rowH.push(lines * step); y += lines * step + 3; return top;
    });
    var xs = [], x = labelW;
    colW.forEach(function (w) { xs.push(x); x += w + 8; });
    return { flow: false, s: s, step: step, labelW: labelW, colW: colW, per: per, xs: xs, tops: tops, rowH: rowH, height: y + 4 };
  }
  function fit(ctx, text, w) {
    if (ctx.measureText(text).width <= w) return text;
    while (text.length > 1 && ctx.measureText(text + "…").width > w) text = text.slice(0, -1);
    return text + "…";
  }
  function draw(box) {
    var script = box.querySelector("script[type='application/json']"), canvas = box.querySelector("canvas");
    if (!script || !canvas) return;
    var d = JSON.parse(script.textContent);
    d.columns.forEach(function (c) {  // each row's first place in the column, when not sent
      if (c.starts) return;
      var at = 0;
      c.starts = c.cells.map(function (cell) { var s = at; at += cell.length; return s; });
    });
    var width = Math.max(320, box.clientWidth || 900), L = layout(d, width);
    var ratio = window.devicePixelRatio || 1;
    canvas.width = width * ratio; canvas.height = L.height * ratio;
    canvas.style.width = width + "px"; canvas.style.height = L.height + "px";
    var ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio); ctx.font = "12px system-ui, sans-serif"; ctx.textBaseline = "middle";
    var hits = [];
    if (!d.tasks.length) { ctx.fillStyle = COLORS.muted; ctx.fillText(d.hidden_rows ? "No task matches the filter." : "No trial yet.", 4, 14); }
    else if (L.flow) {
      var i = 0, c = d.columns[0];
      c.cells.forEach(function (cell, r) {
        for (var k = 0; k < cell.length; k++, i++) {
          var x = (i % L.per) * L.step, y = Math.floor(i / L.per) * L.step + 2;
          square(ctx, cell[k], x, y, L.s);
        }
      });
      box._hit = function (px, py) {
        var n = Math.floor((py - 2) / L.step) * L.per + Math.floor(px / L.step);
        if (px >= L.per * L.step || n < 0 || n >= L.total) return null;
        var r = 0;
        for (var lo = 0, hi = c.starts.length - 1; lo <= hi;) { var m = (lo + hi) >> 1; if (c.starts[m] <= n) { r = m; lo = m + 1; } else hi = m - 1; }
        return describe(d, 0, r, n - c.starts[r]);
      };
    } else {
      d.columns.forEach(function (c, i) {
        var parts = c.label.split(" · "), name = parts.length > 1 ? parts.slice(1).join(" · ") : c.label;
        ctx.fillStyle = COLORS.text; ctx.fillText(fit(ctx, name, L.colW[i]), L.xs[i], 9);
        ctx.fillStyle = COLORS.muted;
        if (parts.length > 1) ctx.fillText(fit(ctx, parts[0], L.colW[i]), L.xs[i], 26);
        var p = c.pass1 == null ? "pass@1 –" : "pass@1 " + c.pass1.toFixed(2) + (c.ci ? " [" + c.ci[0].toFixed(2) + ", " + c.ci[1].toFixed(2) + "]" : "");
        ctx.fillText(fit(ctx, p, L.colW[i]), L.xs[i], 43);
      });
      var right = L.xs[L.xs.length - 1] + L.colW[L.colW.length - 1] + 8;
      ctx.fillStyle = COLORS.muted; ctx.fillText("passed", right, 43);
      d.tasks.forEach(function (task, r) {
        ctx.fillStyle = COLORS.text; ctx.fillText(fit(ctx, task, L.labelW - 10), 0, L.tops[r] + L.step / 2);
        var passed = 0, scored = 0;  // the row's passed / scored trials, across the columns
        d.columns.forEach(function (c) { for (var k = 0; k < c.cells[r].length; k++) { var f = info(c.cells[r][k]); if (f.level >= 0) { scored++; if (f.level === 10) passed++; } } });
        ctx.fillStyle = COLORS.muted; ctx.fillText(scored ? passed + "/" + scored : "–", right, L.tops[r] + L.step / 2);
        d.columns.forEach(function (c, i) {
          var cell = c.cells[r];
          for (var k = 0; k < cell.length; k++) square(ctx, cell[k], L.xs[i] + (k % L.per[i]) * L.step, L.tops[r] + Math.floor(k / L.per[i]) * L.step, L.s);
        });
      });
      box._hit = function (px, py) {
        var r = -1;
        for (var lo = 0, hi = L.tops.length - 1; lo <= hi;) { var m = (lo + hi) >> 1; if (L.tops[m] <= py) { r = m; lo = m + 1; } else hi = m - 1; }
        if (r < 0 || py > L.tops[r] + L.rowH[r]) return null;
        for (var i = 0; i < d.columns.length; i++) {
          if (px < L.xs[i] || px >= L.xs[i] + L.per[i] * L.step) continue;
          var k = Math.floor((py - L.tops[r]) / L.step) * L.per[i] + Math.floor((px - L.xs[i]) / L.step);
          if (k < d.columns[i].cells[r].length) return describe(d, i, r, k);
        }
        return null;
      };
    }
    var n = counts(d);
    canvas.dataset.passed = n.passed; canvas.dataset.failed = n.failed; canvas.dataset.unscored = n.unscored;
    canvas.dataset.drawn = "1";
    var sum = box.querySelector(".grid-sum");
    if (sum) sum.textContent = n.passed + " passed, " + n.failed + " failed (reward 0), " + n.partial + " partial, " + n.unscored + " unscored, " + n.other + " running, waiting or not run";
  }
  function wire(box) {
    if (box._wired) return;
    box._wired = true;
    var canvas = box.querySelector("canvas"), tip = box.querySelector(".grid-tip");
    function at(e) { var b = canvas.getBoundingClientRect(); return box._hit ? box._hit(e.clientX - b.left, e.clientY - b.top) : null; }
    canvas.addEventListener("mousemove", function (e) {
      var h = at(e);
      canvas.style.cursor = h ? "pointer" : "default";
      if (!tip) return;
      if (!h) { tip.hidden = true; return; }
      tip.textContent = h.text; tip.hidden = false;
      var b = box.getBoundingClientRect();
      tip.style.left = Math.min(e.clientX - b.left + 14, b.width - 260) + "px"; tip.style.top = (e.clientY - b.top + 14) + "px";
    });
    canvas.addEventListener("mouseleave", function () { if (tip) tip.hidden = true; });
    canvas.addEventListener("click", function (e) { var h = at(e); if (h) window.location.href = h.href; });
  }
  function all() {
    document.querySelectorAll(".outcomes").forEach(function (box) {
      if (box._drawn === box.querySelector("script")) return;
      box._drawn = box.querySelector("script");
      wire(box); draw(box);
    });
  }
  window.benchGrid = { drawAll: all };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", all); else all();
  document.addEventListener("htmx:afterSettle", all);
  document.addEventListener("htmx:oobAfterSwap", all);
  var resized = null;
  window.addEventListener("resize", function () {
    clearTimeout(resized);
    resized = setTimeout(function () { document.querySelectorAll(".outcomes").forEach(draw); }, 150);
  });
})();
