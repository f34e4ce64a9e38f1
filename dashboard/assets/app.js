// loopx dashboard: live updates. The server sends a `change` event at each commit to a
// watched project; the page fetches itself again and swaps its main content, so what a person
// is typing into a form is kept unless the form itself changed.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var pending = false;

  function refresh() {
    pending = false;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (text) {
        var next = new DOMParser().parseFromString(text, "text/html").getElementById("main");
        var main = document.getElementById("main");
        if (!next || !main) { return; }
        var active = document.activeElement;
        var typing = active && main.contains(active) && (active.tagName === "INPUT" || active.tagName === "SELECT");
        if (typing) {
          // Keep the form being filled in; refresh everything else.
          var form = active.form;
          var same = form && form.getAttribute("action");
          var fresh = same && next.querySelector('form[action="' + CSS.escape(same) + '"]');
          if (fresh) { fresh.replaceWith(form); }
        }
        main.replaceWith(next);
        if (typing && document.activeElement !== active) { active.focus(); }
        document.body.dataset.updated = String(Date.now());
      })
      .catch(function () { if (live) { live.classList.add("stale"); } });
  }

  function connect() {
    // The token rides in the query, as on every request (never in a cookie).
    var token = new URLSearchParams(window.location.search).get("token") || "";
    var source = new EventSource("/events?token=" + encodeURIComponent(token));
    source.addEventListener("open", function () { if (live) { live.classList.remove("stale"); live.classList.add("on"); } });
    source.addEventListener("change", function () {
      if (!pending) { pending = true; setTimeout(refresh, 80); }
    });
    source.addEventListener("error", function () { if (live) { live.classList.remove("on"); live.classList.add("stale"); } });
  }

  if (window.EventSource) { connect(); }
})();
