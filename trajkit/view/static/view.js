// trajkit view: unfold/fold every folded part of a trajectory; show the hovered token's details.
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
  if (tokens && info) {
    tokens.addEventListener("mouseover", (e) => {
      if (e.target.classList.contains("tok")) info.textContent = e.target.title;
    });
  }
});
