// Live hints for the dashboard's pages: one websocket per page; each hint (job, seq, kind, trial)
// makes the page's htmx parts fetch what changed over HTTP. No polling: the socket pushes, and a
// page that reconnects asks what it missed (?after=<seq>) before it listens again.
(function () {
  "use strict";
  var body = document.body;
  var path = body.dataset.ws;
  if (!path || !window.WebSocket) return;
  var seq = Number(body.dataset.seq || 0);
  var eventsUrl = body.dataset.events || "";
  var trial = body.dataset.trial || "";
  var badge = document.getElementById("live");
  var delay = 500;
  var pending = {};
  var lastSeq = 0; // of the last hint: the job's (job page) or the newest event's (jobs list)

  // Hints arrive in bursts: one refresh per kind of change every 50 ms, and never one lost
  // (a hint after a refresh was sent schedules the next).
  function fire(name) {
    if (pending[name]) return;
    pending[name] = true;
    setTimeout(function () {
      pending[name] = false;
      htmx.trigger(body, name);
    }, 50);
  }

  var FINISHED = ["attempt_finished", "attempt_cancelled", "job_finished", "job_started", "indexed", "resync", "regraded"];

  function changed(kind, who) {
    fire("bench:changed");
    if (FINISHED.indexOf(kind) !== -1) fire("bench:finished");
    if (trial && (who === trial || kind === "resync" || kind === "indexed")) fire("bench:trial");
  }

  function catchUp() {
    if (!eventsUrl) { changed("resync", ""); return; }
    fetch(eventsUrl + "?after=" + seq, { headers: { Accept: "application/json" } })
      .then(function (r) { return r.json(); })
      .then(function (d) {
        if (d.last_seq > seq) {
          seq = d.last_seq;
          changed("resync", "");
        }
      })
      .catch(function () {});
  }

  function open(first) {
    var ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + path);
    ws.onopen = function () {
      delay = 500;
      if (badge) { badge.textContent = "live"; badge.classList.add("on"); }
      // what happened between the page's render (or the last socket) and this one
      if (!first || eventsUrl) catchUp();
    };
    ws.onmessage = function (m) {
      var h = JSON.parse(m.data);
      if (eventsUrl && h.seq) seq = Math.max(seq, h.seq);
      lastSeq = eventsUrl ? seq : 0;
      changed(h.kind, h.trial || "");
    };
    ws.onclose = function () {
      if (badge) { badge.textContent = "reconnecting…"; badge.classList.remove("on"); }
      setTimeout(function () { open(false); }, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }
  // Tell the server which state a fragment request is for: fifty pages asking after one hint
  // share one render (viewer/fragments.py).
  body.addEventListener("htmx:configRequest", function (e) {
    if (lastSeq) e.detail.headers["X-Bench-Seq"] = String(lastSeq);
  });
  open(true);
})();
