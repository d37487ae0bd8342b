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

let outboxSeen = null;

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
  const banner = document.getElementById("new-firings");
  if (banner && live.latest_firing !== null) {
    const top = Number(banner.getAttribute("data-top"));
    if (live.latest_firing > top) banner.hidden = false;
  }
  document.querySelectorAll("[data-live]").forEach((cell) => {
    const [group, key] = cell.getAttribute("data-live").split(".");
    if (live[group] && key in live[group]) cell.textContent = String(live[group][key]);
  });
  const changed = document.getElementById("outbox-changed");
  if (changed) {
    const now = JSON.stringify([live.outbox, live.cursors.map((c) => [c.name, c.position, c.holder])]);
    if (outboxSeen !== null && now !== outboxSeen) changed.hidden = false;
    outboxSeen = now;
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
