// Live hints for the dashboard's pages: one websocket per page; each hint (job, seq, kind, trial)
// makes the page fetch what changed over HTTP. No polling: the socket pushes, and a page that
// reconnects asks what it missed (?after=<seq>) before it listens again.
//
// The job page asks for everything a hint changed in one request (data-live: progress, the
// trials page it shows, and after a finished or regraded trial the grid, the chart's series and
// the regrades; each part replaces its namesake, htmx out-of-band swaps). It asks at once, not
// after a timer; hints that arrive while a request is out are answered by one more request when
// it returns, so none is lost and a burst costs two. Other pages' parts listen for bench:* events (htmx queues the
// last trigger of an element while its request is out).
(function () {
  "use strict";
  var body = document.body;
  var path = body.dataset.ws;
  if (!path || !window.WebSocket) return;
  var seq = Number(body.dataset.seq || 0);
  var eventsUrl = body.dataset.events || "";
  var liveUrl = body.dataset.live || "";
  var trial = body.dataset.trial || "";
  var badge = document.getElementById("live");
  var delay = 500;
  var lastSeq = 0; // of the last hint: the job's (job page) or 0 (jobs list: no job state)
  var out = false; // a live request is out
  var wanted = null; // what the hints since it was sent ask for: null, "changed" or "finished"

  // The kinds come from the server (runs/events.py, in the page as JSON). "resync" is this
  // script's own: the page missed hints while its socket was down, and anything may have changed.
  var RESYNC = "resync";
  var kinds = JSON.parse(document.getElementById("bench-kinds").textContent);
  var FINISHED = kinds.finished.concat([RESYNC]);
  var STATE = kinds.state.concat([RESYNC]);
  var ALL_TRIALS = kinds.all_trials.concat([RESYNC]);

  function ask() {
    var query = [];
    var trials = document.getElementById("trials");
    var own = trials ? (trials.dataset.query || "").replace(/^\?/, "") : "";
    if (own) query.push(own);
    if (wanted === "finished") query.push("parts=finished");
    wanted = null;
    out = true;
    var url = liveUrl + (query.length ? "?" + query.join("&") : "");
    var headers = { "HX-Request": "true" };
    if (lastSeq) headers["X-Bench-Seq"] = String(lastSeq);
    // a session that ended is sent to the login page: not followed, nothing swapped
    fetch(url, { headers: headers, credentials: "same-origin", redirect: "manual" })
      .then(function (r) { return r.ok ? r.text() : ""; })
      .then(function (html) { if (html) htmx.swap(body, html, { swapStyle: "none", ignoreTitle: true }); })
      .catch(function () {})
      .then(function () {
        out = false;
        if (wanted) ask();
      });
  }

  function changed(kind, who) {
    var finished = FINISHED.indexOf(kind) !== -1;
    if (liveUrl) {
      wanted = finished || wanted === "finished" ? "finished" : "changed";
      if (!out) ask();
    } else {
      htmx.trigger(body, "bench:changed");
      if (finished) htmx.trigger(body, "bench:finished");
    }
    if (STATE.indexOf(kind) !== -1) htmx.trigger(body, "bench:state");
    if (trial && (who === trial || ALL_TRIALS.indexOf(kind) !== -1)) htmx.trigger(body, "bench:trial");
  }

  function catchUp() {
    if (!eventsUrl) { changed(RESYNC, ""); return; }
    fetch(eventsUrl + "?after=" + seq, { headers: { Accept: "application/json" } })
      .then(function (r) { return r.json(); })
      .then(function (d) {
        if (d.last_seq > seq) {
          seq = d.last_seq;
          lastSeq = seq;
          changed(RESYNC, "");
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
  // Listen once htmx has processed the page: a hint handled before that (a socket that opened
  // while a deferred script was still loading) fires bench:state with no listener yet, and a job
  // that ended then keeps its running controls. htmx processes the page on DOMContentLoaded, in a
  // listener added before this one (its script runs first). A deferred script runs while
  // readyState is already "interactive", before DOMContentLoaded: only "complete" means it fired.
  var started = false;
  function start() {
    if (started) return;
    started = true;
    open(true);
  }
  if (document.readyState === "complete") {
    start();
  } else {
    document.addEventListener("DOMContentLoaded", start);
    window.addEventListener("load", start);
  }
})();
