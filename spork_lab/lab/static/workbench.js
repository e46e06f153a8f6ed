// spork_lab workbench view. Python computes every view as HTML (state.views);
// this module only shows the selected tab and reports clicks back to Python.

function draw(model, root) {
  const state = model.get("state");
  const views = state.views || {};
  const current = model.get("view");
  const tabs = (state.tabs || [])
    .map(([key, label]) =>
      `<button class="sl-tab${key === current ? " sl-tab-active" : ""}" data-view="${key}">${label}</button>`)
    .join("");
  root.innerHTML =
    (views.header || "") +
    `<div class="sl-tabs">${tabs}</div>` +
    `<div class="sl-view sl-view-${current}">${views[current] || ""}</div>`;
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
    const line = event.target.closest("[data-stmt]");
    if (line) {
      model.set("selected", Number(line.dataset.stmt));
      model.save_changes();
    }
  };
  const redraw = () => draw(model, root);
  root.addEventListener("click", onClick);
  model.on("change:state", redraw);
  model.on("change:view", redraw);
  redraw();
  return () => {
    root.removeEventListener("click", onClick);
    model.off("change:state", redraw);
    model.off("change:view", redraw);
  };
}

export default { render };
