// An exported file's one behaviour of its own: a link to a trial (#j0-name, from the grid or a
// table) opens that trial's section and brings it into view.
(function () {
  "use strict";
  function open() {
    if (!location.hash) return;
    var el = document.getElementById(location.hash.slice(1)) || document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (el && el.tagName === "DETAILS") { el.open = true; el.scrollIntoView(); }
  }
  window.addEventListener("hashchange", open);
  open();
})();
