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

// A live run page patches itself: it fetches the tasks changed since its last look (JSON,
// /runs/RUN/tasks.json?since=CURSOR) and updates their boxes and rows, the run's state and
// its counts, without re-rendering. When the run's own state changes (it started, ended),
// the whole page is fetched again: its forms and timeline change with it.
function patchRun(body, reload) {
  var url = body.dataset.patch + "?since=" + encodeURIComponent(body.dataset.cursor || "");
  return fetch(url, {credentials: "same-origin"})
    .then(function (response) { return response.ok ? response.json() : null; })
    .then(function (data) {
      if (data === null) return;
      body.dataset.cursor = data.cursor;
      var state = document.getElementById("run-state");
      if (state && state.textContent !== data.run_state) return reload();
      var counts = document.getElementById("counts");
      if (counts) {
        counts.textContent = "";
        Object.keys(data.counts).forEach(function (name) {
          var span = document.createElement("span");
          span.className = "count state-" + name;
          span.textContent = name + " " + data.counts[name];
          counts.appendChild(span);
          counts.appendChild(document.createTextNode(" "));
        });
      }
      Object.keys(data.tasks).forEach(function (key) {
        var task = data.tasks[key], quoted = CSS.escape(key);
        var box = document.querySelector('#dag g.task[data-key="' + quoted + '"]');
        if (box) {
          box.setAttribute("class", "task state-" + task.state);
          var small = box.querySelector("text.small");
          if (small) small.textContent = task.state + " · attempt " + task.attempt;
        }
        var row = document.querySelector('#tasks tr[data-key="' + quoted + '"]');
        if (row) {
          var cell = row.querySelector("td span.state");
          cell.className = "state state-" + task.state;
          cell.textContent = task.state;
          var attempt = row.querySelector("td.attempt");
          attempt.textContent = task.attempt + " of " + attempt.dataset.max;
        }
      });
      body.dataset.patched = String(Number(body.dataset.patched || 0) + 1);
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
    var body = document.body;
    if (body.dataset.patch) {
      patchRun(body, reload).finally(function () { busy = false; if (again) setTimeout(retry, 250); });
      return;
    }
    reload().finally(function () { busy = false; if (again) setTimeout(retry, 250); });
  }

  function reload() {
    return fetch(window.location.href, {credentials: "same-origin"})
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.querySelector("main");
        var open = document.getElementById("submit");
        if (fresh) {
          main.innerHTML = fresh.innerHTML;
          var submit = document.getElementById("submit");
          if (open && submit) submit.open = open.open;
          document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
          wireSlider();
          wireZoom();
        }
        if (doc.body && doc.body.dataset.cursor) document.body.dataset.cursor = doc.body.dataset.cursor;
      });
  }

  function retry() { if (again) refresh(); }

  var source = new EventSource(url);
  source.addEventListener("change", refresh);
  // A browser holds few connections per server: a page left behind lets its stream go.
  window.addEventListener("pagehide", function () { source.close(); });
}

// The graph zooms: its buttons, the keys + - 0 f on its frame, or Ctrl (or Alt, or
// Cmd) with the wheel over it. The SVG keeps its viewBox; its size is scaled, so the
// frame scrolls over the zoomed picture. A live page's reload keeps the scale.
var dagScale = 1;
var ZOOM_STEP = 1.25, ZOOM_MIN = 0.05, ZOOM_MAX = 4;

function wireZoom() {
  var svg = document.getElementById("dag");
  var frame = document.getElementById("dag-frame");
  var bar = document.getElementById("dag-zoom");
  if (!svg || !frame || !bar) return;
  var box = svg.viewBox.baseVal;
  function apply(scale) {
    dagScale = Math.min(ZOOM_MAX, Math.max(ZOOM_MIN, scale));
    svg.setAttribute("width", String(Math.round(box.width * dagScale)));
    svg.setAttribute("height", String(Math.round(box.height * dagScale)));
    svg.dataset.scale = String(dagScale);
    document.getElementById("dag-scale").textContent = Math.round(dagScale * 100) + "%";
  }
  function zoom(how) {
    if (how === "in") apply(dagScale * ZOOM_STEP);
    else if (how === "out") apply(dagScale / ZOOM_STEP);
    else if (how === "reset") apply(1);
    else if (how === "fit") {
      apply(Math.min(frame.clientWidth / box.width, frame.clientHeight / box.height, 1));
    }
  }
  bar.addEventListener("click", function (event) {
    var how = event.target.closest("button") && event.target.closest("button").dataset.zoom;
    if (how) zoom(how);
  });
  var keys = {"+": "in", "=": "in", "-": "out", "0": "reset", "f": "fit"};
  frame.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || !keys[event.key]) return;
    event.preventDefault();
    zoom(keys[event.key]);
  });
  frame.addEventListener("wheel", function (event) {
    if (!(event.ctrlKey || event.metaKey || event.altKey)) return;  // a plain wheel scrolls
    event.preventDefault();
    zoom(event.deltaY < 0 ? "in" : "out");
  }, {passive: false});
  apply(dagScale);
}

document.addEventListener("DOMContentLoaded", function () {
  wireSlider();
  wireZoom();
  if (document.body.dataset.live) followChanges(document.body.dataset.live);
});
