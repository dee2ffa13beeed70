// Conch inspector: small progressive enhancements only (every page works without script).
document.addEventListener("keydown", (e) => {
  // Left/right arrows step through the history timeline (time travel).
  if (e.target && ["INPUT", "SELECT", "TEXTAREA"].includes(e.target.tagName)) return;
  const dots = Array.from(document.querySelectorAll("svg.timeline a.commit"));
  if (!dots.length) return;
  const at = dots.findIndex((d) => d.classList.contains("on"));
  const next = e.key === "ArrowLeft" ? at - 1 : e.key === "ArrowRight" ? at + 1 : null;
  if (next !== null && next >= 0 && next < dots.length) {
    window.location = dots[next].getAttribute("href");
  }
});
