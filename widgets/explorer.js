// tracekit explorer: the browser side of `tk.explore(x)`.
// A plain ES module for anywidget: no build step, no imports, nothing loaded from a CDN.
// The Python side (tracekit/explore.py) sends the graphviz SVG (`svg`) and one JSON record per
// drawn element (`nodes`); this file draws them, handles pan / zoom / hover / click / search /
// collapse / stepping, and shows the details, kernels, pass history and backend comparison.

const XLINK = "http://www.w3.org/1999/xlink";
const SVGNS = "http://www.w3.org/2000/svg";
const PX_PER_PT = 96 / 72; // graphviz draws in points
const MAX_FIT_SCALE = 1.6; // px per point: small graphs are not blown up
const ZOOM_BAR_PX = 40; // the zoom buttons' strip at the bottom of a pane
const VIEWS = [
  ["forward", "Forward", "the traced graph"],
  ["backward", "Forward + backward", "the backward graph (tk.vjp) beside its forward graph"],
  ["compiled", "Compiled", "fused kernels as clusters; click one for its generated source"],
  ["passes", "Passes", "each optimisation pass: before and after, changes highlighted"],
];

// ------------------------------------------------------------------ small helpers
function h(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function num(x) {
  if (x === null || x === undefined) return "–";
  if (typeof x !== "number") return String(x);
  if (!isFinite(x)) return String(x);
  if (x === 0) return "0";
  const a = Math.abs(x);
  if (a >= 1e5 || a < 1e-3) return x.toExponential(3);
  return String(Number(x.toPrecision(5)));
}

function fmtTime(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1e-3) return (s * 1e6).toFixed(1) + " µs";
  if (s < 1) return (s * 1e3).toFixed(2) + " ms";
  return s.toFixed(2) + " s";
}

// ------------------------------------------------------------------ syntax highlighting
// A tiny Python highlighter for the generated kernel source (no CDN, no dependency).
const PY_KEYWORDS = new Set(
  ("False None True and as assert async await break class continue def del elif else except " +
    "finally for from global if import in is lambda nonlocal not or pass raise return try while " +
    "with yield").split(" "),
);
const PY_BUILTINS = new Set(
  ("abs all any bool complex float int len max min pow print range round sum tuple zip np numba " +
    "prange math cuda").split(" "),
);
const PY_TOKEN =
  /(#[^\n]*)|("""[\s\S]*?"""|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')|(@[\w.]+)|\b(0[xX][\da-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?j?|\.\d+(?:[eE][+-]?\d+)?)\b|([A-Za-z_]\w*)/g;

export function highlightPython(src) {
  let out = "";
  let last = 0;
  let afterDef = false;
  src = String(src ?? "");
  for (const m of src.matchAll(PY_TOKEN)) {
    out += esc(src.slice(last, m.index));
    last = m.index + m[0].length;
    const t = esc(m[0]);
    if (m[1]) out += `<span class="tk-hl-c">${t}</span>`;
    else if (m[2]) out += `<span class="tk-hl-s">${t}</span>`;
    else if (m[3]) out += `<span class="tk-hl-d">${t}</span>`;
    else if (m[4]) out += `<span class="tk-hl-n">${t}</span>`;
    else if (afterDef) out += `<span class="tk-hl-f">${t}</span>`;
    else if (PY_KEYWORDS.has(m[0])) out += `<span class="tk-hl-k">${t}</span>`;
    else if (PY_BUILTINS.has(m[0])) out += `<span class="tk-hl-b">${t}</span>`;
    else out += t;
    afterDef = m[5] === "def" || m[5] === "class";
  }
  return out + esc(src.slice(last));
}

// The graph listing (`%7: f32[128,64] = add(%5, %6)`): names, types and the op.
export function highlightListing(line) {
  return esc(line)
    .replace(/(%[\w.#]+)/g, '<span class="tk-hl-v">$1</span>')
    .replace(/\b((?:bool|[iufc]\d+)\[[\d,]*\]~?)/g, '<span class="tk-hl-t">$1</span>')
    .replace(/= (\w+)\(/, '= <span class="tk-hl-o">$1</span>(');
}

// ------------------------------------------------------------------ one pan/zoom graph pane
class GraphPane {
  constructor(app, host, title) {
    this.app = app;
    this.host = host;
    host.classList.add("tk-pane");
    this.titleEl = h("div", "tk-pane-title", title || "");
    if (!title) this.titleEl.hidden = true;
    this.stage = h("div", "tk-stage");
    this.stage.tabIndex = -1;
    this.tip = h("div", "tk-tip");
    this.tip.hidden = true;
    const zoom = h("div", "tk-zoom");
    const mk = (label, title, fn, cls) => {
      const b = h("button", "tk-zoom-btn " + (cls || ""), label);
      b.title = title;
      b.type = "button";
      b.addEventListener("click", (e) => {
        e.stopPropagation();
        fn();
      });
      zoom.append(b);
      return b;
    };
    mk("−", "zoom out (-)", () => this.zoomBy(1 / 1.4), "tk-zoom-out");
    this.zoomLabel = h("span", "tk-zoom-level", "100%");
    zoom.append(this.zoomLabel);
    mk("+", "zoom in (+)", () => this.zoomBy(1.4), "tk-zoom-in");
    mk("Fit", "fit the whole graph (0)", () => this.fit(), "tk-zoom-fit");
    host.append(this.titleEl, this.stage, zoom, this.tip);
    this.svg = null;
    this.els = new Map(); // element id -> <g>
    this.tips = new Map(); // element id -> graphviz tooltip text
    this.edgesOf = new Map(); // node id -> [edge <g>]
    this.marks = new Map(); // element -> step state
    this.overlays = new Map(); // cluster id -> overlay <g>
    this.selectedEls = [];
    this._bind();
    this.observer = new ResizeObserver(() => this.resized());
    this.observer.observe(this.stage);
  }

  dispose() {
    this.observer.disconnect();
    clearTimeout(this._still);
    if (this._frame) cancelAnimationFrame(this._frame);
    this.host.remove();
  }

  // -------------------------------------------------------------- loading
  load(text) {
    this._size = null;
    this.view = null;
    this.els.clear();
    this.tips.clear();
    this.edgesOf.clear();
    this.marks.clear();
    this.overlays.clear();
    this.selectedEls = [];
    this.hideTip();
    if (!text) {
      this.stage.replaceChildren(h("div", "tk-empty", "nothing drawn"));
      this.svg = null;
      return;
    }
    const doc = new DOMParser().parseFromString(text, "image/svg+xml");
    const root = doc.documentElement;
    if (!root || root.nodeName.toLowerCase() !== "svg") {
      this.stage.replaceChildren(h("div", "tk-empty", "could not read the drawing"));
      this.svg = null;
      return;
    }
    const svg = document.importNode(root, true);
    const vb = (svg.getAttribute("viewBox") || "").trim().split(/[\s,]+/).map(Number);
    let full;
    if (vb.length === 4 && vb.every(isFinite)) full = { x: vb[0], y: vb[1], w: vb[2], h: vb[3] };
    else {
      const w = parseFloat(svg.getAttribute("width")) || 100;
      const hh = parseFloat(svg.getAttribute("height")) || 100;
      full = { x: 0, y: 0, w, h: hh };
    }
    this.full = full;
    // drawn at its natural size (1 unit = 1 px); pan and zoom move a CSS transform on the
    // wrapper, so the browser never lays the SVG out again (2,000 nodes stay smooth)
    for (const a of ["style"]) svg.removeAttribute(a);
    svg.setAttribute("width", full.w);
    svg.setAttribute("height", full.h);
    svg.setAttribute("viewBox", `${full.x} ${full.y} ${full.w} ${full.h}`);
    svg.classList.add("tk-svg");
    // graphviz's <title> and xlink:title give native tooltips; ours replace them
    const nameToId = new Map();
    const edges = [];
    for (const g of svg.querySelectorAll("g.node, g.cluster, g.edge")) {
      const title = g.querySelector(":scope > title");
      const name = title ? title.textContent : "";
      if (title) title.remove();
      let tip = "";
      for (const a of g.querySelectorAll("a")) {
        tip = tip || a.getAttributeNS(XLINK, "title") || a.getAttribute("xlink:title") || a.getAttribute("title") || "";
        a.removeAttributeNS(XLINK, "title");
        a.removeAttribute("title");
      }
      const id = g.id;
      if (!id) continue;
      this.tips.set(id, tip);
      if (g.classList.contains("edge")) edges.push([g, name]);
      else {
        this.els.set(id, g);
        if (name) nameToId.set(name, id);
      }
    }
    for (const t of svg.querySelectorAll("title")) t.remove();
    for (const [g, name] of edges) {
      const i = name.indexOf("->");
      if (i < 0) continue;
      const tail = nameToId.get(name.slice(0, i)) ?? name.slice(0, i);
      const head = nameToId.get(name.slice(i + 2)) ?? name.slice(i + 2);
      g.dataset.tail = tail;
      g.dataset.head = head;
      for (const end of [tail, head]) {
        if (!this.edgesOf.has(end)) this.edgesOf.set(end, []);
        this.edgesOf.get(end).push(g);
      }
    }
    this.svg = svg;
    this.canvas = h("div", "tk-canvas");
    this.canvas.append(svg);
    this.stage.replaceChildren(this.canvas);
    this.fit();
  }

  // -------------------------------------------------------------- pan / zoom
  // The view is a scale `s` (px per SVG unit) and the stage position (tx, ty) of the
  // drawing's top-left corner; `apply` writes them as one CSS transform, once per frame.
  size() {
    if (!this._size) this._size = { w: this.stage.clientWidth || 600, h: this.stage.clientHeight || 400 };
    return this._size;
  }

  resized() {
    const old = this._size;
    this._size = null;
    const now = this.size();
    if (!this.view) return;
    // a fitted view stays fitted; a view the user moved keeps its centre
    if (this.fitted) this.fit();
    else if (old) this.setView(this.view.s, this.view.tx + (now.w - old.w) / 2, this.view.ty + (now.h - old.h) / 2);
  }

  setView(sc, tx, ty) {
    this.view = { s: sc, tx, ty };
    this.zoomLabel.textContent = Math.round((sc / PX_PER_PT) * 100) + "%";
    this.stage.dataset.zoom = sc.toFixed(6);
    this.stage.dataset.tx = tx.toFixed(2);
    this.stage.dataset.ty = ty.toFixed(2);
    if (!this._frame) this._frame = requestAnimationFrame(() => this.apply());
  }

  apply() {
    this._frame = 0;
    if (!this.canvas || !this.view) return;
    const v = this.view;
    this.canvas.style.transform = `translate(${v.tx}px, ${v.ty}px) scale(${v.s})`;
  }

  // while the view moves, the browser scales the drawing as an image; when it stops, it
  // draws it again sharply at the new scale
  moving() {
    if (!this.canvas) return;
    this.canvas.style.willChange = "transform";
    clearTimeout(this._still);
    this._still = setTimeout(() => {
      if (this.canvas) this.canvas.style.willChange = "auto";
    }, 250);
  }

  fit() {
    if (!this.full) return;
    const f = this.full;
    const pad = Math.max(f.w, f.h) * 0.02;
    const s = this.size();
    const hh = Math.max(s.h - ZOOM_BAR_PX, s.h / 2); // keep the zoom buttons off the drawing
    const sc = Math.min(s.w / (f.w + 2 * pad), hh / (f.h + 2 * pad), MAX_FIT_SCALE);
    this.setView(sc, (s.w - f.w * sc) / 2, (hh - f.h * sc) / 2);
    this.fitted = true;
  }

  zoomBy(factor, cx, cy) {
    if (!this.view || !this.full) return;
    const r = this.stage.getBoundingClientRect();
    const px = cx === undefined ? r.width / 2 : cx - r.left;
    const py = cy === undefined ? r.height / 2 : cy - r.top;
    const v = this.view;
    const s = this.size();
    const fitScale = Math.min(s.w / this.full.w, s.h / this.full.h);
    const sc = Math.min(Math.max(v.s * factor, Math.min(fitScale / 4, 0.05)), 12);
    const k = sc / v.s;
    this.fitted = false;
    this.moving();
    this.setView(sc, px - (px - v.tx) * k, py - (py - v.ty) * k);
  }

  panBy(dxPx, dyPx) {
    const v = this.view;
    this.fitted = false;
    this.moving();
    this.setView(v.s, v.tx + dxPx, v.ty + dyPx);
  }

  bboxOf(el) {
    // the element's box in the drawing's own units (origin at its top-left corner)
    try {
      const b = el.getBBox();
      const m = el.getCTM();
      const pts = [new DOMPoint(b.x, b.y), new DOMPoint(b.x + b.width, b.y + b.height)].map((p) =>
        p.matrixTransform(m),
      );
      return {
        x: Math.min(pts[0].x, pts[1].x),
        y: Math.min(pts[0].y, pts[1].y),
        w: Math.abs(pts[1].x - pts[0].x),
        h: Math.abs(pts[1].y - pts[0].y),
      };
    } catch (e) {
      return null;
    }
  }

  ensureVisible(id, center) {
    const el = this.els.get(id);
    if (!el || !this.view) return;
    const b = this.bboxOf(el);
    if (!b) return;
    const v = this.view;
    const s = this.size();
    const x0 = v.tx + b.x * v.s;
    const y0 = v.ty + b.y * v.s;
    const inside = x0 >= 0 && y0 >= 0 && x0 + b.w * v.s <= s.w && y0 + b.h * v.s <= s.h;
    if (inside && !center) return;
    this.fitted = false;
    this.setView(v.s, s.w / 2 - (b.x + b.w / 2) * v.s, s.h / 2 - (b.y + b.h / 2) * v.s);
  }

  // -------------------------------------------------------------- events
  _bind() {
    const st = this.stage;
    let down = null;
    st.addEventListener("pointerdown", (e) => {
      if (e.button !== 0 || !this.svg) return;
      down = { x: e.clientX, y: e.clientY, target: e.target, moved: false, id: e.pointerId };
    });
    st.addEventListener("pointermove", (e) => {
      if (down && down.id === e.pointerId) {
        const dx = e.clientX - down.x;
        const dy = e.clientY - down.y;
        if (!down.moved && Math.hypot(dx, dy) > 4) {
          down.moved = true;
          st.setPointerCapture(e.pointerId);
          st.classList.add("tk-panning");
          this.hideTip();
        }
        if (down.moved) {
          this.panBy(e.clientX - (down.lx ?? down.x), e.clientY - (down.ly ?? down.y));
          down.lx = e.clientX;
          down.ly = e.clientY;
        }
        return;
      }
      this._hover(e);
    });
    const up = (e) => {
      if (!down || down.id !== e.pointerId) return;
      const d = down;
      down = null;
      st.classList.remove("tk-panning");
      if (st.hasPointerCapture(e.pointerId)) st.releasePointerCapture(e.pointerId);
      if (!d.moved && e.type === "pointerup") this._click(d.target, e);
    };
    st.addEventListener("pointerup", up);
    st.addEventListener("pointercancel", up);
    st.addEventListener(
      "wheel",
      (e) => {
        if (!this.svg) return;
        e.preventDefault();
        const dy = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
        this.zoomBy(Math.exp(-dy * 0.0015), e.clientX, e.clientY);
      },
      { passive: false },
    );
    st.addEventListener("mouseleave", () => this.hideTip());
    st.addEventListener("dblclick", (e) => {
      const g = e.target.closest && e.target.closest("g.node");
      if (g) this.ensureVisible(g.id, true);
    });
  }

  _target(t) {
    if (!t || !t.closest) return null;
    return t.closest(".tk-overlay, g.node, g.edge, g.cluster");
  }

  _hover(e) {
    const g = this._target(e.target);
    if (!g) return this.hideTip();
    const html = this.app.tooltipHTML(this, g);
    if (!html) return this.hideTip();
    if (this.tipFor !== g) {
      this.tip.innerHTML = html;
      this.tipFor = g;
    }
    this.tip.hidden = false;
    const r = this.host.getBoundingClientRect();
    let x = e.clientX - r.left + 14;
    let y = e.clientY - r.top + 16;
    const tw = this.tip.offsetWidth;
    const th = this.tip.offsetHeight;
    if (x + tw > r.width - 4) x = Math.max(4, e.clientX - r.left - tw - 10);
    if (y + th > r.height - 4) y = Math.max(4, e.clientY - r.top - th - 10);
    this.tip.style.left = x + "px";
    this.tip.style.top = y + "px";
  }

  hideTip() {
    this.tip.hidden = true;
    this.tipFor = null;
  }

  _click(target, e) {
    const g = this._target(target);
    if (!g) return;
    this.hideTip();
    if (g.classList.contains("tk-overlay")) return this.app.toggleCluster(g.dataset.cluster);
    if (g.classList.contains("edge")) {
      // an edge selects its producer
      if (g.dataset.tail) this.app.select(g.dataset.tail);
      return;
    }
    if (g.classList.contains("cluster")) {
      if (g.classList.contains("kernel")) return this.app.select(g.id);
      if (g.classList.contains("scope")) return this.app.toggleCluster(g.id);
      return;
    }
    this.app.select(g.id);
  }

  // -------------------------------------------------------------- marking
  highlight(ids) {
    for (const el of this.selectedEls) el.classList.remove("tk-selected", "tk-adjacent");
    this.selectedEls = [];
    for (const id of ids) {
      const el = this.els.get(id);
      if (!el) continue;
      el.classList.add("tk-selected");
      this.selectedEls.push(el);
      for (const e of this.edgesOf.get(id) || []) {
        e.classList.add("tk-adjacent");
        this.selectedEls.push(e);
      }
    }
  }

  setState(el, state) {
    if (this.marks.get(el) === state) return;
    el.classList.remove("tk-done", "tk-current", "tk-pending");
    if (state) el.classList.add("tk-" + state);
    if (state) this.marks.set(el, state);
    else this.marks.delete(el);
  }

  clearStates() {
    for (const el of [...this.marks.keys()]) this.setState(el, null);
  }

  collapse(id, lines) {
    if (this.overlays.has(id) || !this.svg) return;
    const el = this.els.get(id);
    if (!el) return;
    const bb = this.bboxOf(el);
    if (!bb) return;
    const b = { x: bb.x + this.full.x, y: bb.y + this.full.y, w: bb.w, h: bb.h };
    const g = document.createElementNS(SVGNS, "g");
    g.setAttribute("class", "tk-overlay");
    g.dataset.cluster = id;
    const rect = document.createElementNS(SVGNS, "rect");
    for (const [k, v] of Object.entries({ x: b.x, y: b.y, width: b.w, height: b.h, rx: 6, ry: 6 }))
      rect.setAttribute(k, v);
    g.append(rect);
    const fs = Math.max(10, Math.min(16, b.w / 8));
    lines.forEach((line, i) => {
      const t = document.createElementNS(SVGNS, "text");
      t.setAttribute("x", b.x + b.w / 2);
      t.setAttribute("y", b.y + b.h / 2 + (i - (lines.length - 1) / 2) * fs * 1.3 + fs / 3);
      t.setAttribute("text-anchor", "middle");
      t.setAttribute("font-size", i === 0 ? fs + 1 : fs);
      if (i === 0) t.setAttribute("font-weight", "bold");
      t.textContent = line;
      g.append(t);
    });
    this.svg.append(g);
    this.overlays.set(id, g);
    el.classList.add("tk-collapsed");
  }

  expand(id) {
    const g = this.overlays.get(id);
    if (g) g.remove();
    this.overlays.delete(id);
    const el = this.els.get(id);
    if (el) el.classList.remove("tk-collapsed");
  }
}

// ------------------------------------------------------------------ the explorer
class Explorer {
  constructor(model, el) {
    this.model = model;
    this.el = el;
    this.handlers = [];
    this.meta = new Map();
    this.order = [];
    this.matches = [];
    this.matchAt = -1;
    this.playing = null;
    this._build();
    this._listen();
    this.applyHeight();
    this.refresh();
  }

  // -------------------------------------------------------------- DOM
  _build() {
    const root = h("div", "tk-explorer");
    root.tabIndex = 0;
    this.root = root;

    const bar = h("div", "tk-toolbar");
    const views = h("div", "tk-views");
    this.viewBtns = new Map();
    for (const [v, label, title] of VIEWS) {
      const b = h("button", "tk-view-btn", label);
      b.type = "button";
      b.dataset.view = v;
      b.title = title;
      b.addEventListener("click", () => this.setModel({ view: v }));
      views.append(b);
      this.viewBtns.set(v, b);
    }
    const searchBox = h("div", "tk-search");
    this.search = h("input", "tk-search-input");
    this.search.type = "search";
    this.search.placeholder = "Search name, op or scope  (/)";
    this.searchCount = h("span", "tk-search-count", "");
    searchBox.append(this.search, this.searchCount);
    this.compareBtn = h("button", "tk-compare-btn", "Compare backends");
    this.compareBtn.type = "button";
    this.compareBtn.title = "run the interpreter, NumPy and the compiled targets; time them";
    this.compareBtn.addEventListener("click", () => this.model.send({ action: "compare" }));
    this.busyEl = h("span", "tk-busy", "");
    this.titleEl = h("span", "tk-title", "");
    bar.append(this.titleEl, views, searchBox, h("span", "tk-spacer"), this.busyEl, this.compareBtn);

    this.messageEl = h("div", "tk-message", "");
    this.messageEl.hidden = true;
    this.passBar = h("div", "tk-passbar");
    this.passBar.hidden = true;

    this.main = h("div", "tk-main");
    this.panesEl = h("div", "tk-panes");
    this.details = h("div", "tk-details");
    this.main.append(this.panesEl, this.details);
    this.panes = [new GraphPane(this, h("div"))];
    this.panesEl.append(this.panes[0].host);

    const step = h("div", "tk-stepbar");
    this.playBtn = h("button", "tk-play", "▶");
    this.playBtn.type = "button";
    this.playBtn.title = "play: run the interpreter node by node";
    this.playBtn.addEventListener("click", () => this.togglePlay());
    this.slider = h("input", "tk-slider");
    this.slider.type = "range";
    this.slider.min = "0";
    this.slider.step = "1";
    this.slider.title = "step through the execution order (← →)";
    this.slider.addEventListener("input", () => this.setStep(Number(this.slider.value)));
    this.stepLabel = h("span", "tk-step-label", "");
    this.stepValue = h("div", "tk-step-value", "");
    const stepText = h("div", "tk-step-text");
    stepText.append(this.stepLabel, this.stepValue);
    step.append(this.playBtn, this.slider, stepText);
    this.stepBar = step;

    this.compareEl = h("div", "tk-compare");
    this.compareEl.hidden = true;

    root.append(bar, this.messageEl, this.passBar, this.main, step, this.compareEl);
    this.el.append(root);

    this.details.addEventListener("click", (e) => {
      const a = e.target.closest && e.target.closest("[data-select]");
      if (a) {
        e.preventDefault();
        this.select(a.dataset.select, true);
      }
    });
    let timer = null;
    this.search.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => this.runSearch(), 120);
    });
    this.search.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        this.runSearch();
        this.nextMatch(e.shiftKey ? -1 : 1);
      } else if (e.key === "Escape") {
        this.search.value = "";
        this.runSearch();
        this.root.focus();
      }
      e.stopPropagation();
    });
    root.addEventListener("keydown", (e) => this._key(e));
  }

  _key(e) {
    if (e.target !== this.root && !this.root.contains(e.target)) return;
    if (e.target.tagName === "INPUT" && e.target.type !== "range") return;
    const pane = this.panes[this.panes.length - 1];
    const k = e.key;
    if (k === "+" || k === "=") pane.zoomBy(1.4);
    else if (k === "-") pane.zoomBy(1 / 1.4);
    else if (k === "0" || k === "f") pane.fit();
    else if (k === "/") this.search.focus();
    else if (k === "Escape") this.setModel({ selected: "" });
    else if (k === "ArrowRight" && e.target.type !== "range") this.setStep(Math.min(this.nSteps(), this.model.get("step") + 1));
    else if (k === "ArrowLeft" && e.target.type !== "range") this.setStep(Math.max(0, this.model.get("step") - 1));
    else return;
    e.preventDefault();
    e.stopPropagation();
  }

  _listen() {
    const on = (names, fn) => {
      for (const n of names.split(" ")) {
        const ev = "change:" + n;
        this.model.on(ev, fn);
        this.handlers.push([ev, fn]);
      }
    };
    let pending = false;
    const later = () => {
      if (pending) return;
      pending = true;
      queueMicrotask(() => {
        pending = false;
        this.refresh();
      });
    };
    on("svg svg_before nodes passes kernels", later);
    on("view", () => this.showViewButtons());
    on("selected details", () => this.showSelection());
    on("step n_steps", () => this.showStep());
    on("step_info", () => this.showStepInfo());
    on("message busy", () => this.showMessage());
    on("compare_result", () => this.showCompare());
    on("collapsed", () => this.applyCollapsed());
    on("height", () => this.applyHeight());
  }

  destroy() {
    for (const [ev, fn] of this.handlers) this.model.off(ev, fn);
    for (const p of this.panes) p.dispose();
    this.stopPlay();
  }

  setModel(values) {
    for (const [k, v] of Object.entries(values)) this.model.set(k, v);
    this.model.save_changes();
  }

  applyHeight() {
    this.main.style.height = (this.model.get("height") || 560) + "px";
  }

  // -------------------------------------------------------------- full refresh (new drawing)
  showViewButtons() {
    const view = this.model.get("view");
    for (const [v, b] of this.viewBtns) b.classList.toggle("tk-active", v === view);
  }

  refresh() {
    const t0 = performance.now();
    const view = this.model.get("view");
    this.showViewButtons();
    this.titleEl.textContent = this.model.get("title") || "";
    const nodes = this.model.get("nodes") || [];
    this.meta = new Map(nodes.map((r) => [r.id, r]));
    this.order = nodes.filter((r) => r.main && r.type === "op").sort((a, b) => a.index - b.index);
    const two = view === "passes";
    const wanted = two ? 2 : 1;
    while (this.panes.length < wanted) {
      const p = new GraphPane(this, h("div"));
      this.panes.unshift(p);
      this.panesEl.prepend(p.host);
    }
    while (this.panes.length > wanted) this.panes.shift().dispose();
    this.panesEl.classList.toggle("tk-two", two);
    const passes = this.model.get("passes") || [];
    const pi = this.model.get("pass_index") || 0;
    if (two) {
      const name = passes[pi] ? passes[pi].name : "";
      this.panes[0].titleEl.textContent = `before ${name}`;
      this.panes[1].titleEl.textContent = `after ${name}`;
      for (const p of this.panes) p.titleEl.hidden = false;
      this.panes[0].load(this.model.get("svg_before"));
      this.panes[1].load(this.model.get("svg"));
    } else {
      this.panes[0].titleEl.hidden = true;
      this.panes[0].load(this.model.get("svg"));
    }
    this.showPassBar(passes, pi, two);
    this.markPassChanges(passes[pi], two);
    this.collapsedShown = new Set();
    this.applyCollapsed();
    this.runSearch();
    this.showSelection();
    this.showStep();
    this.showStepInfo();
    this.showMessage();
    this.showCompare();
    this.root.dataset.refreshMs = (performance.now() - t0).toFixed(1);
  }

  paneOf(id) {
    for (const p of this.panes) if (p.els.has(id)) return p;
    return null;
  }

  unitOf(id) {
    const m = this.meta.get(id);
    if (m && m.unit) return m.unit;
    return id;
  }

  // -------------------------------------------------------------- tooltips
  tooltipHTML(pane, g) {
    if (g.classList.contains("tk-overlay")) return `<b>${esc(g.dataset.cluster.replace(/^.*?cluster-/, ""))}</b><div class="tk-tip-dim">collapsed scope: click to expand</div>`;
    const id = g.id;
    const m = this.meta.get(id);
    const gv = pane.tips.get(id) || "";
    if (g.classList.contains("edge")) return gv ? `<code>${esc(gv)}</code>` : "";
    if (!m) return gv ? `<pre>${esc(gv)}</pre>` : "";
    let s = "";
    if (m.type === "op") {
      s += `<div><b>${esc(m.title)}</b> <span class="tk-badge tk-k-${esc(m.kind)}">${esc(m.kind)}</span></div>`;
      s += `<code class="tk-tip-code">${highlightListing(m.label)}</code>`;
      if (m.source) s += `<div class="tk-tip-src">${esc(m.source.short)}:${m.source.line} <code>${esc((m.source.text || "").trim())}</code></div>`;
      if (m.scope && m.scope.length) s += `<div class="tk-tip-dim">scope ${esc(m.scope.join(" › "))}</div>`;
      if (m.guards) s += `<div class="tk-tip-guard">${esc(m.guards.join("; "))}</div>`;
    } else if (m.type === "cluster") {
      const collapsed = (this.model.get("collapsed") || []).includes(id);
      s += `<div><b>${esc(m.scope.join(" › "))}</b></div><div class="tk-tip-dim">scope, ${m.members.length} op(s): click to ${collapsed ? "expand" : "collapse"}</div>`;
    } else if (m.type === "kernel") {
      s += `<div><b>${esc(m.title)}</b> <span class="tk-badge">${esc(m.kind)}</span></div><div class="tk-tip-dim">${m.members.length} node(s): click for the generated source</div>`;
    } else if (m.type === "group") {
      s += `<div><b>${esc(m.scope.join(" › "))}</b> <span class="tk-badge">${esc(m.kind)}</span></div><div class="tk-tip-dim">${m.members.length} op(s), collapsed by the renderer</div>`;
    } else {
      s += `<div><b>${esc(m.title)}</b> <span class="tk-badge">${esc(m.type)}</span></div><code class="tk-tip-code">${highlightListing(m.label)}</code>`;
      if (m.source) s += `<div class="tk-tip-src">${esc(m.source.short)}:${m.source.line}</div>`;
    }
    return s;
  }

  // -------------------------------------------------------------- selection + details
  select(id, reveal) {
    if (!id) return;
    this.setModel({ selected: id });
    if (reveal) {
      const unit = this.unitOf(id);
      const p = this.paneOf(unit);
      if (p) p.ensureVisible(unit);
    }
  }

  showSelection() {
    const id = this.model.get("selected") || "";
    for (const p of this.panes) p.highlight(id ? [this.unitOf(id)] : []);
    this.renderDetails(id);
  }

  renderDetails(id) {
    const d = this.model.get("details") || {};
    const det = d.id === id ? d : null;
    const m = this.meta.get(id) || (det && det.meta) || null;
    if (!id) {
      this.details.innerHTML = `<div class="tk-d-empty"><b>Click a node</b> to see its op, shapes, source line and values.<br><br>Drag to pan, wheel to zoom, click a scope box to collapse it, <kbd>/</kbd> to search.</div>`;
      return;
    }
    if (det && det.kernel) return this.renderKernel(det.kernel);
    const kern = (this.model.get("kernels") || []).find((k) => k.id === id);
    if (kern) return this.renderKernel(kern);
    if (!m) {
      this.details.innerHTML = `<div class="tk-d-empty">${esc((det && det.error) || "no details for " + id)}</div>`;
      return;
    }
    let s = "";
    const badge = m.type === "op" ? m.kind : m.type;
    s += `<div class="tk-d-head"><span class="tk-d-op">${esc(m.title)}</span> <span class="tk-badge tk-k-${esc(badge)}">${esc(badge)}</span>`;
    if (m.var) s += ` <span class="tk-d-var">%${esc(m.var)}</span>`;
    s += `</div>`;
    if (m.graph && this.model.get("view") !== "forward") s += `<div class="tk-d-graph">${esc(m.graph)}</div>`;
    s += `<pre class="tk-d-label">${highlightListing(m.label)}</pre>`;
    const rows = [];
    const ref = (r) => {
      if (r.const !== undefined) return `<code>${esc(r.const)}</code>`;
      const t = `<code>%${esc(r.name)}</code> <span class="tk-type">${esc(r.type)}</span>`;
      return r.id && r.id !== id ? `<a href="#" class="tk-ref" data-select="${esc(r.id)}">${t}</a>` : t;
    };
    if (m.inputs && m.inputs.length) rows.push(["inputs", m.inputs.map(ref).join("<br>")]);
    if (m.outputs && m.outputs.length) rows.push(["outputs", m.outputs.map(ref).join("<br>")]);
    for (const [k, v] of Object.entries(m.attrs || {})) rows.push([k, `<code>${esc(v)}</code>`]);
    if (m.scope && m.scope.length) rows.push(["scope", esc(m.scope.join(" › "))]);
    if (m.members) rows.push(["ops", String(m.members.length)]);
    if (rows.length) s += `<table class="tk-d-table">${rows.map(([k, v]) => `<tr><th>${esc(k)}</th><td>${v}</td></tr>`).join("")}</table>`;
    if (m.plan) s += `<div class="tk-d-sec">Plan</div><ul class="tk-d-list">${m.plan.map((p) => `<li>${esc(p)}</li>`).join("")}</ul>`;
    if (m.source) {
      const src = m.source;
      s += `<div class="tk-d-sec">Source <span class="tk-d-where" title="${esc(src.file)}">${esc(src.where || src.short + ":" + src.line)}${src.function ? " in " + esc(src.function) : ""}</span></div>`;
      s += `<pre class="tk-src">`;
      for (const [no, text] of src.context || []) {
        s += `<span class="tk-src-line${no === src.line ? " tk-src-here" : ""}"><span class="tk-src-no">${no}</span>${highlightPython(text) || " "}</span>`;
      }
      s += `</pre>`;
    }
    if (m.guards && m.guards.length) s += `<div class="tk-d-sec">Guards</div><ul class="tk-d-list tk-guards">${m.guards.map((g) => `<li>${esc(g)}</li>`).join("")}</ul>`;
    if (m.members && m.members.length) {
      s += `<div class="tk-d-sec">Ops</div><ul class="tk-d-list">` +
        m.members.slice(0, 40).map((x) => {
          const r = this.meta.get(x);
          return `<li><a href="#" class="tk-ref" data-select="${esc(x)}"><code>${r ? highlightListing(r.label) : esc(x)}</code></a></li>`;
        }).join("") + (m.members.length > 40 ? `<li>… ${m.members.length - 40} more</li>` : "") + `</ul>`;
    }
    if (det && det.value) s += this.valueHTML(det.value);
    else if (m.type === "op" || m.type === "input" || m.type === "output") s += `<div class="tk-d-sec">Value</div><div class="tk-d-dim">computing…</div>`;
    if (det && det.loop) s += this.loopHTML(det.loop);
    this.details.innerHTML = s;
    const slider = this.details.querySelector(".tk-iter");
    if (slider) slider.addEventListener("input", () => this.setModel({ iteration: Number(slider.value) }));
  }

  // a loop (or a node of its body) is selected: the iteration the body's values are from
  loopHTML(loop) {
    let s = `<div class="tk-d-sec">Iterations <span class="tk-d-where">${esc(loop.header || "")}</span></div>`;
    if (loop.error) return s + `<div class="tk-d-dim">${esc(loop.error)}</div>`;
    const last = Math.max(0, loop.count - 1);
    const traced = loop.count === loop.trips ? "" : ` (${loop.trips} when traced)`;
    s += `<div class="tk-iterbar"><input type="range" class="tk-iter" min="0" max="${last}" step="1" value="${loop.iteration}" title="the iteration whose values the body shows">`;
    s += `<span class="tk-iter-label">iteration ${loop.iteration} of ${loop.count}${esc(traced)}${loop.while ? ", a while loop" : ""}</span></div>`;
    for (const c of loop.carried || []) {
      s += `<div class="tk-d-dim">carried <code>%${esc(c.of)}</code> → <code>%${esc(c.name)}</code> after iteration ${loop.iteration}</div>`;
      s += this.valueHTML(c.value);
    }
    return s;
  }

  valueHTML(v) {
    let s = `<div class="tk-d-sec">Value <span class="tk-d-where">${esc(v.source || "")}</span></div>`;
    if (v.pending) return s + `<div class="tk-d-dim">${esc(v.pending)}</div>`;
    if (v.unavailable) return s + `<div class="tk-d-dim">${esc(v.unavailable)}</div>`;
    s += `<div class="tk-stats">`;
    const cell = (k, x, cls) => `<div class="tk-stat ${cls || ""}"><span>${k}</span><b>${x}</b></div>`;
    s += cell("type", esc(v.type));
    if (v.min !== undefined) {
      s += cell("min", num(v.min)) + cell("max", num(v.max)) + cell("mean", num(v.mean)) + cell("std", num(v.std));
    }
    if (v.nan !== undefined) {
      s += cell("NaN", v.nan, v.nan ? "tk-bad" : "") + cell("inf", v.inf, v.inf ? "tk-bad" : "");
    }
    s += `</div>`;
    if (v.note) s += `<div class="tk-d-dim">${esc(v.note)}</div>`;
    if (v.hist) s += histogramSVG(v.hist);
    if (v.array !== undefined) s += `<pre class="tk-array">${esc(v.array)}</pre>`;
    return s;
  }

  renderKernel(k) {
    let s = `<div class="tk-d-head"><span class="tk-d-op">kernel ${esc(k.name)}</span> <span class="tk-badge">${esc(k.kind)}</span></div>`;
    if (k.plan) s += `<pre class="tk-d-label">${esc(k.plan)}</pre>`;
    s += `<div class="tk-d-sec">Nodes (${k.nodes.length})</div><ul class="tk-d-list">`;
    k.nodes.forEach((id, i) => {
      s += `<li><a href="#" class="tk-ref" data-select="${esc(id)}"><code>${highlightListing(k.labels[i] || id)}</code></a></li>`;
    });
    s += `</ul>`;
    if (k.reasons && k.reasons.length) s += `<div class="tk-d-sec">Refused fusions</div><ul class="tk-d-list tk-refused">${k.reasons.map((r) => `<li>${esc(r)}</li>`).join("")}</ul>`;
    s += `<div class="tk-d-sec">Generated source</div><pre class="tk-code">${highlightPython(k.source)}</pre>`;
    const plan = this.model.get("plan");
    if (plan) s += `<details class="tk-plan"><summary>Whole plan</summary><pre>${esc(plan)}</pre></details>`;
    this.details.innerHTML = s;
  }

  // -------------------------------------------------------------- search
  runSearch() {
    const q = this.search.value.trim().toLowerCase();
    for (const p of this.panes) {
      if (!p.svg) continue;
      p.svg.classList.toggle("tk-searching", !!q);
      for (const el of p.svg.querySelectorAll(".tk-match")) el.classList.remove("tk-match");
    }
    this.matches = [];
    this.matchAt = -1;
    if (!q) {
      this.searchCount.textContent = "";
      return;
    }
    const seen = new Set();
    for (const m of this.meta.values()) {
      if (m.type === "cluster" || m.type === "kernel") continue;
      const hay = [m.id, m.var ? "%" + m.var : "", m.op, m.title, (m.scope || []).join("/"), m.label].join("\n").toLowerCase();
      if (!hay.includes(q)) continue;
      const unit = m.unit || m.id;
      const p = this.paneOf(unit);
      if (!p || seen.has(unit)) continue;
      seen.add(unit);
      p.els.get(unit).classList.add("tk-match");
      this.matches.push(m.id);
    }
    this.searchCount.textContent = this.matches.length ? `${this.matches.length} found` : "no match";
  }

  nextMatch(dir) {
    if (!this.matches.length) return;
    this.matchAt = (this.matchAt + dir + this.matches.length) % this.matches.length;
    const id = this.matches[this.matchAt];
    this.searchCount.textContent = `${this.matchAt + 1} / ${this.matches.length}`;
    this.select(id, false);
    const unit = this.unitOf(id);
    const p = this.paneOf(unit);
    if (p) p.ensureVisible(unit, true);
  }

  // -------------------------------------------------------------- collapse
  toggleCluster(id) {
    const cur = new Set(this.model.get("collapsed") || []);
    if (cur.has(id)) cur.delete(id);
    else cur.add(id);
    this.setModel({ collapsed: [...cur] });
  }

  applyCollapsed() {
    const want = new Set(this.model.get("collapsed") || []);
    for (const p of this.panes) {
      for (const id of [...p.overlays.keys()]) if (!want.has(id)) p.expand(id);
      // outer clusters first so inner overlays are not drawn over them
      const ids = [...want].filter((id) => p.els.has(id)).sort((a, b) => a.length - b.length);
      for (const id of ids) {
        const m = this.meta.get(id);
        const name = m ? m.title : id;
        const n = m && m.members ? m.members.length : 0;
        p.collapse(id, [`▸ ${name}`, `${n} op${n === 1 ? "" : "s"} · click to expand`]);
      }
    }
  }

  // -------------------------------------------------------------- stepping
  nSteps() {
    return this.model.get("n_steps") || 0;
  }

  setStep(k) {
    if (this.model.get("step") === k) return;
    this.setModel({ step: k });
  }

  togglePlay() {
    if (this.playing) return this.stopPlay();
    const n = this.nSteps();
    if (!n) return;
    if (this.model.get("step") >= n) this.setStep(0);
    this.playBtn.textContent = "❚❚";
    this.playBtn.classList.add("tk-playing");
    this.playing = setInterval(() => {
      const k = this.model.get("step");
      if (k >= this.nSteps()) return this.stopPlay();
      this.setStep(k + 1);
      const cur = this.order[k];
      if (cur) {
        const p = this.paneOf(this.unitOf(cur.id));
        if (p) p.ensureVisible(this.unitOf(cur.id));
      }
    }, 450);
  }

  stopPlay() {
    if (this.playing) clearInterval(this.playing);
    this.playing = null;
    this.playBtn.textContent = "▶";
    this.playBtn.classList.remove("tk-playing");
  }

  showStep() {
    const k = this.model.get("step") || 0;
    const n = this.nSteps();
    this.slider.max = String(n);
    this.slider.value = String(k);
    this.slider.disabled = n === 0;
    this.playBtn.disabled = n === 0;
    const pane = this.panes[this.panes.length - 1];
    if (!pane.svg) return;
    if (k === 0) {
      pane.clearStates();
      pane.svg.classList.remove("tk-stepping");
      this.stepLabel.textContent = `step 0 / ${n}`;
      this.stepValue.textContent = "move the slider or press ▶ to run the interpreter node by node";
      return;
    }
    pane.svg.classList.add("tk-stepping");
    const state = new Map(); // unit id -> state
    const put = (unit, st) => {
      const old = state.get(unit);
      // a group is current if it holds the current op, else pending until all its ops ran
      if (old === undefined || st === "current" || (st === "pending" && old === "done")) state.set(unit, st);
    };
    this.order.forEach((m, i) => put(m.unit || m.id, i < k - 1 ? "done" : i === k - 1 ? "current" : "pending"));
    const byVar = new Map(this.order.map((m, i) => [m.var, i]));
    for (const m of this.meta.values()) {
      if (!m.main) continue;
      if (m.type === "input" && m.unit) state.set(m.unit, "done");
      if (m.type === "output" && m.unit) {
        const i = byVar.get(m.var);
        state.set(m.unit, i === undefined || i < k ? "done" : "pending");
      }
    }
    for (const [unit, st] of state) {
      const el = pane.els.get(unit);
      if (el) pane.setState(el, st);
    }
    for (const [id, edges] of pane.edgesOf) {
      const st = state.get(id);
      for (const e of edges) if (e.dataset.head === id) pane.setState(e, st === "pending" ? "pending" : st ? "done" : null);
    }
    const cur = this.order[k - 1];
    this.stepLabel.textContent = `step ${k} / ${n}`;
    if (cur) this.stepValue.innerHTML = `<code>${highlightListing(cur.label)}</code>`;
  }

  showStepInfo() {
    const info = this.model.get("step_info") || {};
    const k = this.model.get("step") || 0;
    if (!k || info.step !== k) return;
    let s = info.label ? `<code>${highlightListing(info.label)}</code>` : "";
    if (info.error) s += ` <span class="tk-bad">${esc(info.error)}</span>`;
    const v = info.value;
    if (v) {
      s += ` <span class="tk-step-stats">`;
      if (v.min !== undefined) s += `min <b>${num(v.min)}</b> max <b>${num(v.max)}</b> mean <b>${num(v.mean)}</b> std <b>${num(v.std)}</b>`;
      if (v.nan || v.inf) s += ` <span class="tk-bad">NaN ${v.nan} inf ${v.inf}</span>`;
      s += `</span>`;
      if (v.array !== undefined && v.size <= 12) s += ` <code class="tk-step-array">${esc(v.array.replace(/\s+/g, " "))}</code>`;
    }
    this.stepValue.innerHTML = s;
  }

  // -------------------------------------------------------------- pass history
  showPassBar(passes, pi, show) {
    this.passBar.hidden = !show;
    if (!show) return;
    this.passBar.replaceChildren(h("span", "tk-passbar-label", "pass:"));
    passes.forEach((p, i) => {
      const b = h("button", "tk-pass-btn" + (i === pi ? " tk-active" : "") + (p.changed ? " tk-changed" : ""));
      b.type = "button";
      b.innerHTML = `<b>${i + 1}. ${esc(p.name)}</b> <span>${p.changed ? `${p.n_before} → ${p.n_after} nodes` : "no change"}</span>`;
      b.addEventListener("click", () => this.setModel({ pass_index: i }));
      this.passBar.append(b);
    });
    const cur = passes[pi];
    if (cur && cur.added) {
      const legend = h("span", "tk-pass-legend");
      legend.innerHTML = `<i class="tk-lg-added"></i>added ${cur.added.length} <i class="tk-lg-modified"></i>changed ${cur.modified.length} <i class="tk-lg-removed"></i>removed ${cur.removed.length}`;
      this.passBar.append(legend);
    }
  }

  markPassChanges(p, two) {
    if (!two || !p || !p.added) return;
    const [before, after] = this.panes;
    const mark = (pane, names, prefix, cls) => {
      for (const n of names) {
        const el = pane.els.get(prefix + "node-" + n);
        if (el) el.classList.add(cls);
      }
    };
    mark(after, p.added, "", "tk-added");
    mark(after, p.modified, "", "tk-modified");
    mark(before, p.removed, "b4-", "tk-removed");
    mark(before, p.modified, "b4-", "tk-modified");
  }

  // -------------------------------------------------------------- messages + compare
  showMessage() {
    const msg = this.model.get("message") || "";
    this.messageEl.textContent = msg;
    this.messageEl.hidden = !msg;
    const busy = this.model.get("busy") || "";
    this.busyEl.textContent = busy;
    this.busyEl.classList.toggle("tk-on", !!busy);
    this.compareBtn.disabled = !!busy;
  }

  showCompare() {
    const r = this.model.get("compare_result") || {};
    if (!r.targets) {
      this.compareEl.hidden = true;
      return;
    }
    this.compareEl.hidden = false;
    const ok = r.targets.filter((t) => !t.error && t.seconds);
    const maxT = Math.max(...ok.map((t) => t.seconds), 1e-12);
    const ref = r.targets.find((t) => t.name === r.reference);
    let s = `<div class="tk-cmp-head"><b>Backends</b> on the example inputs <span class="tk-d-dim">best time per call; differences against the ${esc(r.reference)}</span><button type="button" class="tk-cmp-close" title="hide">×</button></div>`;
    s += `<div class="tk-cmp-grid"><div class="tk-bars" role="img" aria-label="time per call">`;
    for (const t of r.targets) {
      s += `<div class="tk-bar-row"><span class="tk-bar-name">${esc(t.name)}</span>`;
      if (t.error) {
        s += `<span class="tk-bar-err" title="${esc(t.error)}">unavailable: ${esc(t.error.slice(0, 100))}</span></div>`;
        continue;
      }
      const w = Math.max(0.5, (t.seconds / maxT) * 100);
      const speed = ref && ref.seconds && t.name !== ref.name ? `×${(ref.seconds / t.seconds).toFixed(1)}` : "";
      s += `<span class="tk-bar-track"><span class="tk-bar tk-bar-${esc(t.name)}" style="width:${w.toFixed(2)}%"></span></span>`;
      s += `<span class="tk-bar-val"><b>${fmtTime(t.seconds)}</b>${speed ? ` <span class="tk-speed">${speed}</span>` : ""}${t.compile_seconds != null ? ` <span class="tk-d-dim">compile ${t.compile_seconds.toFixed(2)} s</span>` : ""}</span></div>`;
    }
    s += `</div>`;
    s += `<table class="tk-cmp-table"><tr><th>output</th><th>target</th><th>max abs diff</th><th>max rel diff</th></tr>`;
    for (const o of r.outputs || []) {
      for (const [name, d] of Object.entries(o.diffs)) {
        s += `<tr><td>${o.index} <span class="tk-type">${esc(o.type)}</span></td><td>${esc(name)}</td><td>${num(d.max_abs)}</td><td>${num(d.max_rel)}</td></tr>`;
      }
    }
    s += `</table></div>`;
    this.compareEl.innerHTML = s;
    this.compareEl.querySelector(".tk-cmp-close").addEventListener("click", () => {
      this.compareEl.hidden = true;
    });
  }
}

function histogramSVG(hist) {
  const counts = hist.counts;
  const edges = hist.edges;
  const W = 300;
  const H = 70;
  const top = Math.max(...counts, 1);
  const bw = W / counts.length;
  let s = `<svg class="tk-hist" viewBox="0 0 ${W} ${H + 16}" width="100%" role="img" aria-label="histogram">`;
  counts.forEach((c, i) => {
    const hh = (c / top) * H;
    s += `<rect x="${(i * bw + 0.5).toFixed(2)}" y="${(H - hh).toFixed(2)}" width="${Math.max(0.5, bw - 1).toFixed(2)}" height="${hh.toFixed(2)}"><title>[${num(edges[i])}, ${num(edges[i + 1])}): ${c}</title></rect>`;
  });
  s += `<line x1="0" y1="${H + 0.5}" x2="${W}" y2="${H + 0.5}" class="tk-hist-axis"></line>`;
  s += `<text x="0" y="${H + 13}" class="tk-hist-lbl">${esc(num(edges[0]))}</text>`;
  s += `<text x="${W}" y="${H + 13}" text-anchor="end" class="tk-hist-lbl">${esc(num(edges[edges.length - 1]))}</text>`;
  s += `</svg>`;
  return s;
}

function render({ model, el }) {
  const app = new Explorer(model, el);
  return () => app.destroy();
}

export default { render };
