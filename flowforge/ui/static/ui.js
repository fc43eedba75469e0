// FlowForge's UI: the time slider, and live updates of a page shown "now".

// The time slider: reload the run's page as of the transition time it points at.
function wireSlider() {
  var slider = document.getElementById("slider");
  if (!slider) return;
  var moments = JSON.parse(slider.dataset.moments || "[]");
  slider.addEventListener("change", function () {
    var at = moments[Number(slider.value)];
    if (at) window.location = slider.dataset.base + "?at=" + encodeURIComponent(at);
  });
}

// Live updates: the server's event stream says when something changed (flowforge/ui/live.py);
// the page fetches itself again and swaps its <main>, at most once a second, never while
// the user is typing in one of its forms (it swaps once they leave it).
function followChanges(url) {
  var main = document.querySelector("main");
  var busy = false, again = false, last = 0;

  function typing() {
    var active = document.activeElement;
    return active && active.form && main.contains(active);
  }

  function refresh() {
    var wait = 1000 - (Date.now() - last);
    if (busy || typing() || wait > 0) {
      again = true;
      if (!busy) setTimeout(retry, Math.max(wait, 250));
      return;
    }
    busy = true; again = false; last = Date.now();
    fetch(window.location.href, {credentials: "same-origin"})
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main");
        var open = document.getElementById("submit");
        if (fresh) {
          main.innerHTML = fresh.innerHTML;
          var submit = document.getElementById("submit");
          if (open && submit) submit.open = open.open;
          document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
          wireSlider();
        }
      })
      .finally(function () { busy = false; if (again) setTimeout(retry, 250); });
  }

  function retry() { if (again) refresh(); }

  var source = new EventSource(url);
  source.addEventListener("change", refresh);
  // A browser holds few connections per server: a page left behind lets its stream go.
  window.addEventListener("pagehide", function () { source.close(); });
}

document.addEventListener("DOMContentLoaded", function () {
  wireSlider();
  if (document.body.dataset.live) followChanges(document.body.dataset.live);
});
