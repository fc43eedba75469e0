// The time slider: reload the run's page as of the transition time it points at.
document.addEventListener("DOMContentLoaded", function () {
  var slider = document.getElementById("slider");
  if (!slider) return;
  var moments = JSON.parse(slider.dataset.moments || "[]");
  slider.addEventListener("change", function () {
    var at = moments[Number(slider.value)];
    if (at) window.location = slider.dataset.base + "?at=" + encodeURIComponent(at);
  });
});
