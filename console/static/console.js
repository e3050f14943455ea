// Switchyard console: reloads the page's <main> every data-refresh
// seconds while "live" is ticked, and submits a picker form when one of
// its selects changes. Hand-written, no library.
(function () {
  "use strict";
  var body = document.body;
  var every = parseInt(body.getAttribute("data-refresh") || "0", 10);
  var live = document.getElementById("live");
  var key = "switchyard-console-live";

  document.querySelectorAll("select[data-autosubmit]").forEach(function (s) {
    s.addEventListener("change", function () { if (s.form) { s.form.submit(); } });
  });

  if (!every || !live) { return; }
  try { live.checked = window.localStorage.getItem(key) !== "off"; } catch (e) { /* storage may be disabled */ }
  live.addEventListener("change", function () {
    try { window.localStorage.setItem(key, live.checked ? "on" : "off"); } catch (e) { /* ignore */ }
  });

  var busy = false;
  function reload() {
    if (busy || !live.checked || document.hidden) { return; }
    busy = true;
    fetch(window.location.href, { headers: { "Accept": "text/html" }, cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var next = doc.getElementById("main"), cur = document.getElementById("main");
        var clock = doc.getElementById("clock"), curClock = document.getElementById("clock");
        if (next && cur) { cur.replaceWith(next); }
        if (clock && curClock) { curClock.textContent = clock.textContent; }
        document.querySelectorAll("select[data-autosubmit]").forEach(function (s) {
          s.addEventListener("change", function () { if (s.form) { s.form.submit(); } });
        });
      })
      .catch(function () { /* the server is away; try again at the next tick */ })
      .then(function () { busy = false; });
  }
  window.setInterval(reload, every * 1000);
}());
