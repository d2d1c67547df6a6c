// trajkit view: unfold/fold every folded part of a trajectory; lay out the token trace; show a token's details.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const toggle = document.getElementById("toggle-all");
  if (toggle) {
    toggle.addEventListener("click", () => {
      const open = toggle.textContent === "unfold all";
      document.querySelectorAll("details.fold").forEach((d) => { d.open = open; });
      toggle.textContent = open ? "fold all" : "unfold all";
    });
  }
  const tokens = document.getElementById("tokens");
  const info = document.getElementById("token-info");
  if (tokens) {
    // the trace arrives as JSON in an attribute; each token becomes a span (text, never markup)
    const trace = JSON.parse(tokens.dataset.trace);
    const frag = document.createDocumentFragment();
    trace.ids.forEach((id, i) => {
      const span = document.createElement("span");
      span.className = "tok m" + trace.mask[i];
      span.textContent = trace.text ? trace.text[i] : String(id) + " ";
      const lp = trace.logprobs[i];
      span.title = "id " + id + " · mask " + trace.mask[i] + (lp === null ? "" : " · logprob " + lp.toFixed(4));
      frag.appendChild(span);
    });
    tokens.appendChild(frag);
  }
  if (tokens && info) {
    tokens.addEventListener("mouseover", (e) => {
      if (e.target.classList.contains("tok")) info.textContent = e.target.title;
    });
  }
});

// The review flow: one key per decision. A decision is POSTed (the page's CSRF token; the browser sends
// the Origin) and the server answers with the next row's HTML, rendered and escaped server-side, which
// replaces the current one; next, previous and skip fetch it with a GET. Keys pressed while a request
// is on its way wait their turn.
document.addEventListener("DOMContentLoaded", () => {
  const flow = document.getElementById("flow");
  if (!flow) return;
  const keys = JSON.parse(flow.dataset.keys);
  let queue = Promise.resolve();

  function current() {
    const row = document.getElementById("flow-row");
    return row ? row.dataset.traj : "";
  }
  function show(html) {
    flow.innerHTML = html;
    const at = current();
    const url = new URL(flow.dataset.page, window.location.href);
    if (at) url.searchParams.set("at", at);
    window.history.replaceState(null, "", url);
  }
  function decide(action) {
    const at = current();
    if (!at) return Promise.resolve();
    const note = document.getElementById("flow-note");
    const body = new URLSearchParams({csrf: flow.dataset.csrf, traj_id: at, action: action, fragment: "1"});
    if (note && note.value) body.set("note", note.value);
    return fetch(flow.dataset.decide, {method: "POST", body: body, credentials: "same-origin"})
      .then((r) => r.ok ? r.text() : Promise.reject(new Error(r.status + " " + r.statusText)))
      .then(show);
  }
  function go(where) {
    const url = new URL(flow.dataset.step, window.location.href);
    url.searchParams.set("go", where);
    url.searchParams.set("at", current());
    return fetch(url, {credentials: "same-origin"})
      .then((r) => r.ok ? r.text() : Promise.reject(new Error(r.status + " " + r.statusText)))
      .then(show);
  }
  const moves = {next: "next", previous: "prev", skip: "todo"};
  function act(what) {
    queue = queue.then(() => (what in moves ? go(moves[what]) : decide(what)))
      .catch((e) => { flow.dataset.error = String(e); });
  }
  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.target.closest && e.target.closest("input, textarea, select")) return;
    const what = keys[e.key];
    if (!what) return;
    e.preventDefault();
    act(what);
  });
  flow.addEventListener("click", (e) => {  // the row's buttons do what their keys do, without a page load
    const button = e.target.closest("button");
    if (!button) return;
    e.preventDefault();
    if (button.dataset.go) act({next: "next", prev: "previous", todo: "skip"}[button.dataset.go]);
    else act(button.value);
  });
});
