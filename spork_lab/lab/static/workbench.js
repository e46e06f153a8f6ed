// spork_lab workbench view. Python computes every view as HTML (state.views);
// this module only shows the selected tab and reports clicks back to Python:
// an element with data-set="trait:value" sets that trait (data-goto="tab" also
// opens a tab).

function draw(model, root) {
  const state = model.get("state");
  const views = state.views || {};
  const current = model.get("view");
  const labels = model.get("labels") || {};  // newer than state's (the step count after new steps)
  const tabs = (state.tabs || [])
    .map(([key, label]) =>
      `<button class="sl-tab${key === current ? " sl-tab-active" : ""}" data-view="${key}">${labels[key] || label}</button>`)
    .join("");
  root.innerHTML =
    (model.get("header") || views.header || "") +
    `<div class="sl-tabs">${tabs}</div>` +
    `<div class="sl-view sl-view-${current}">${views[current] || ""}</div>`;
  // a long proc scrolls inside its box: keep the selected statement in sight (a third of the way down)
  const code = root.querySelector(".sl-code");
  const selected = code && code.querySelector(".sl-selected");
  if (selected) code.scrollTop = Math.max(0, selected.offsetTop - code.clientHeight / 3);
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "sl-wb sl-live";
  el.appendChild(root);

  const onClick = (event) => {
    const tab = event.target.closest("[data-view]");
    if (tab) {
      model.set("view", tab.dataset.view);
      model.save_changes();
      return;
    }
    const target = event.target.closest("[data-set]");
    if (target) {
      const text = target.dataset.set;
      const name = text.slice(0, text.indexOf(":"));
      const value = text.slice(text.indexOf(":") + 1);
      model.set(name, typeof model.get(name) === "number" ? Number(value) : value);
      if (target.dataset.goto) model.set("view", target.dataset.goto);
      model.save_changes();
    }
  };
  const redraw = () => draw(model, root);
  root.addEventListener("click", onClick);
  model.on("change:state", redraw);
  model.on("change:view", redraw);
  model.on("change:header", redraw);
  model.on("change:labels", redraw);
  redraw();
  return () => {
    root.removeEventListener("click", onClick);
    model.off("change:state", redraw);
    model.off("change:view", redraw);
    model.off("change:header", redraw);
    model.off("change:labels", redraw);
  };
}

export default { render };
