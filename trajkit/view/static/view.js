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
