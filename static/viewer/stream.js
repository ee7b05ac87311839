// The trial page's event stream: tabs, Focus/Full, per-kind filters, search, #e<n> anchors (and
// #c<line>, a model call by its trajectory line) and the
// keys j/k (next/previous step) and / (search). The server sends the stream a page at a time; the
// next page is asked for when the end of the last comes into view (or an anchor or a key needs it).
(function () {
  "use strict";
  var stream = document.getElementById("stream");
  var bar = document.getElementById("stream-bar");
  var tabs = document.getElementById("tabs");

  function show(name) {
    if (!tabs) return;
    tabs.querySelectorAll("button[data-tab]").forEach(function (b) {
      b.classList.toggle("on", b.dataset.tab === name);
    });
    document.querySelectorAll("section.tab").forEach(function (s) {
      s.hidden = s.id !== "tab-" + name;
    });
  }
  if (tabs) {
    tabs.addEventListener("click", function (ev) {
      var b = ev.target.closest("button[data-tab]");
      if (b) show(b.dataset.tab);
    });
    // the stream first; an attempt without one (a script agent's) opens on its files, where its
    // output is
    show(tabs.dataset.first || "stream");
  }
  if (!stream || !bar) return;

  var focusKinds = bar.dataset.focus.split(" ");
  var boxes = bar.querySelectorAll("input[data-kind]");
  var query = "";

  function applyFilters() {
    boxes.forEach(function (box) {
      stream.classList.toggle("hide-" + box.dataset.kind, !box.checked);
    });
  }
  function mode(name) {
    bar.querySelectorAll("button[data-mode]").forEach(function (b) {
      b.classList.toggle("on", b.dataset.mode === name);
    });
    boxes.forEach(function (box) {
      box.checked = name === "full" || focusKinds.indexOf(box.dataset.kind) >= 0;
    });
    applyFilters();
  }
  bar.addEventListener("click", function (ev) {
    var b = ev.target.closest("button[data-mode]");
    if (b) mode(b.dataset.mode);
  });
  bar.addEventListener("change", function (ev) {
    if (ev.target.dataset.kind) {
      bar.querySelectorAll("button[data-mode]").forEach(function (b) { b.classList.remove("on"); });
      applyFilters();
    }
  });
  mode("focus");

  // ---- pages --------------------------------------------------------------------------------
  var loading = null;
  function loadMore() {
    if (loading) return loading;
    var more = stream.querySelector(".more");
    if (!more) return Promise.resolve(false);
    loading = fetch(more.dataset.url, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        more.insertAdjacentHTML("beforebegin", html);
        more.remove();
        mark();
        watch();
        return true;
      })
      .catch(function () { return false; })
      .finally(function () { loading = null; });
    return loading;
  }
  var observer = window.IntersectionObserver
    ? new IntersectionObserver(function (entries) {
        if (entries.some(function (e) { return e.isIntersecting; })) loadMore();
      }, { rootMargin: "600px" })
    : null;
  function watch() {
    var more = stream.querySelector(".more");
    if (observer && more) observer.observe(more);
  }
  stream.addEventListener("click", function (ev) {
    if (ev.target.closest(".more button")) loadMore();
  });
  watch();

  // ---- anchors and keys ---------------------------------------------------------------------
  function visible() {
    return Array.prototype.filter.call(stream.querySelectorAll(":scope > details.ev"), function (d) {
      return d.offsetParent !== null;
    });
  }
  function select(el, setHash) {
    stream.querySelectorAll("details.ev.cur").forEach(function (d) { d.classList.remove("cur"); });
    el.classList.add("cur");
    var box = bar.querySelector('input[data-kind="' + el.dataset.kind + '"]');
    if (box && !box.checked) { box.checked = true; applyFilters(); }
    el.open = true;
    el.scrollIntoView({ block: "start" });
    if (setHash) history.replaceState(null, "", "#" + el.id);
    var step = document.getElementById("note-step");
    if (step) step.value = el.id; // a note written now is on this step
  }
  // #c<line>: the item of the model call on that line of the trajectory (a search hit's link);
  // a stream read from a session log numbers its calls in order, so a call it lacks falls back to
  // the nearest call before it.
  function callItem(line) {
    var best = null;
    stream.querySelectorAll(":scope > details.ev > summary > span.ca").forEach(function (s) {
      if (+s.dataset.call <= line) best = s;
    });
    return best;
  }
  function passed(line) {
    var last = stream.querySelectorAll(":scope > details.ev > summary > span.ca");
    return last.length && +last[last.length - 1].dataset.call >= line;
  }
  async function goTo(id) {
    var call = /^c(\d+)$/.exec(id);
    for (var tries = 0; !document.getElementById(id) && tries < 1000; tries++) {
      if (call && passed(+call[1])) break;
      if (!(await loadMore())) break;
    }
    var el = document.getElementById(id) || (call && callItem(+call[1]));
    if (el) el = el.closest("details.ev");
    if (el) { show("stream"); select(el, false); }
  }
  function fromHash() {
    var m = /^#([ec]\d+)$/.exec(location.hash);
    if (m) goTo(m[1]);
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();

  async function step(by) {
    var items = visible();
    var at = items.findIndex(function (d) { return d.classList.contains("cur"); });
    var next = at + by;
    if (next >= items.length && (await loadMore())) items = visible();
    if (next < 0 || next >= items.length) return;
    select(items[next], true);
  }
  document.addEventListener("keydown", function (ev) {
    var t = ev.target;
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    var typing = t && t.tagName === "INPUT" && ["checkbox", "radio", "button"].indexOf(t.type) < 0;
    if (t && (typing || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable)) {
      if (ev.key === "Escape") t.blur();
      return;
    }
    if (ev.key === "j") { ev.preventDefault(); step(1); }
    else if (ev.key === "k") { ev.preventDefault(); step(-1); }
    else if (ev.key === "/") { ev.preventDefault(); show("stream"); search.focus(); }
  });

  // ---- search -------------------------------------------------------------------------------
  var search = document.getElementById("stream-q");
  var hits = document.getElementById("stream-hits");
  function mark() {
    stream.querySelectorAll("details.ev").forEach(function (d) {
      var on = query && d.textContent.toLowerCase().indexOf(query) >= 0;
      d.classList.toggle("hit", !!on);
    });
  }
  function ask(url, into) {
    fetch(url, { credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        if (into) into.insertAdjacentHTML("beforebegin", html), into.remove();
        else hits.innerHTML = html;
      });
  }
  search.addEventListener("keydown", function (ev) {
    if (ev.key !== "Enter") return;
    ev.preventDefault();
    query = search.value.trim().toLowerCase();
    mark();
    hits.innerHTML = "";
    if (query) ask(search.dataset.url + "&q=" + encodeURIComponent(search.value.trim()), null);
  });
  hits.addEventListener("click", function (ev) {
    var more = ev.target.closest(".hits-more");
    if (more) { ask(more.dataset.url, more); return; }
    var link = ev.target.closest("a.hit-link");
    if (link) { ev.preventDefault(); history.replaceState(null, "", link.getAttribute("href")); goTo(link.getAttribute("href").slice(1)); }
  });
})();
