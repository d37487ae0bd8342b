// sentinel ui: clicking graph nodes, and polling /api/live for what changed.
// Values go into the page as text only (textContent), never as markup.
"use strict";

function showNode(node) {
  const panel = document.getElementById("node-text");
  if (!panel) return;
  document.querySelectorAll("#graph .node.chosen").forEach((n) => n.classList.remove("chosen"));
  node.classList.add("chosen");
  panel.textContent = "";
  const lang = document.createElement("div");
  lang.className = "lang";
  lang.textContent = node.getAttribute("data-lang") || "";
  const text = document.createElement("pre");
  text.className = "text";
  text.textContent = node.getAttribute("data-text");
  panel.append(lang, text);
}

function wireGraph() {
  document.querySelectorAll("#graph .node").forEach((node) => {
    node.addEventListener("click", () => showNode(node));
    node.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") showNode(node);
    });
  });
}

// The outbox's figures and the cursors, as the page compares them.
function outboxFigures(outbox, cursors) {
  return JSON.stringify([outbox, cursors]);
}

async function poll() {
  if (document.hidden) return; // a tab nobody looks at asks nothing
  let live;
  try {
    const response = await fetch("/api/live", { cache: "no-store" });
    if (!response.ok) return;
    live = await response.json();
  } catch (err) {
    return; // the server is away for a moment: try again at the next tick
  }
  // Compared with what the log held when the page was read: its newest
  // firing, and how many firings had an id from data-from on (a firing
  // committed after a newer one adds to the count, not to the newest id).
  const banner = document.getElementById("new-firings");
  if (banner && live.latest_firing !== null) {
    const latest = Number(banner.getAttribute("data-latest"));
    const from = Number(banner.getAttribute("data-from"));
    const count = Number(banner.getAttribute("data-count"));
    const firings = live.firings || null;
    if (
      live.latest_firing > latest ||
      (firings !== null && firings.from === from && firings.count > count)
    ) {
      banner.hidden = false;
    }
  }
  const changed = document.getElementById("outbox-changed");
  if (changed) {
    // a reading that began before the page's figures were read is older
    // than what the page shows: nothing is taken from it
    const readAt = Number(changed.getAttribute("data-read-at"));
    if (typeof live.read_at === "number" && live.read_at < readAt) return;
  }
  document.querySelectorAll("[data-live]").forEach((cell) => {
    const [group, key] = cell.getAttribute("data-live").split(".");
    if (live[group] && key in live[group]) cell.textContent = String(live[group][key]);
  });
  if (changed) {
    const shown = JSON.parse(changed.getAttribute("data-figures"));
    const now = outboxFigures(
      live.outbox,
      live.cursors.map((c) => [c.name, c.position, c.holder]),
    );
    if (now !== outboxFigures(shown.outbox, shown.cursors)) changed.hidden = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  wireGraph();
  if (document.getElementById("new-firings") || document.getElementById("outbox-changed")) {
    const every = Number(document.body.getAttribute("data-poll-ms")) || 2000;
    poll();
    setInterval(poll, every);
  }
});
