// The "XLA" tab of TensorBoard: did XLA pay off in each run, and why not.
// A plain ES module: TensorBoard imports it and calls render(). Every
// value from a report is put on the page as text (textContent), never as
// markup. Data comes from this plugin's routes, relative to the page
// (runs, report?run=, compare?a=&b=); the CSS from static/style.css.

const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "onclick" || key === "onchange") node[key] = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined) node.setAttribute(key, value);
  }
  for (const child of children.flat()) if (child) node.append(child);
  return node;
}

function num(value, digits = 2) {
  if (value === null || value === undefined) return "-";
  return Number(value).toLocaleString("en-US", {
    minimumFractionDigits: digits,
    maximumFractionDigits: digits,
  });
}

function shape(value) {
  return Array.isArray(value) ? `[${value.join(", ")}]` : "-";
}

function shapes(value) {
  return Object.entries(value || {})
    .map(([name, s]) => `${name} ${shape(s)}`)
    .join(", ");
}

async function getJSON(path) {
  const response = await fetch(path);
  if (!response.ok) {
    throw new Error(`${path}: ${response.status} ${await response.text()}`);
  }
  return response.json();
}

// The verdict in one word, and its colour class.
function status(verdict) {
  if (!verdict) return ["No verdict yet", "unknown"];
  if (!verdict.xla_enabled) return ["XLA off", "off"];
  if (verdict.speedup === null) return ["Unknown: no baseline", "unknown"];
  if (verdict.speedup <= 1) return ["Did not pay off: slower", "bad"];
  if (verdict.paid_back) return ["Paid off", "good"];
  return ["Not paid off yet", "bad"];
}

function figure(label, value, note) {
  return el(
    "div",
    { class: "figure" },
    el("div", { class: "figure-value", text: value }),
    el("div", { class: "figure-label", text: label }),
    note ? el("div", { class: "figure-note", text: note }) : null,
  );
}

function verdictCard(view) {
  const v = view.verdict;
  const [word, kind] = status(v);
  const card = el("section", { class: `card verdict ${kind}`, id: "verdict" });
  card.append(
    el("div", { class: "verdict-word", text: word }),
    el("p", { class: "headline", text: v ? v.headline : "" }),
  );
  if (!v) return card;
  const breakEven =
    v.break_even_steps === null ? "-" : num(v.break_even_steps, 0);
  card.append(
    el(
      "div",
      { class: "figures" },
      figure("speedup (no-XLA step / XLA step)", v.speedup === null
        ? "-" : `${num(v.speedup)}x`,
        v.baseline_step_ms === null ? null
          : `${num(v.baseline_step_ms)} -> ${num(v.xla_step_ms)} ms`),
      figure("compile seconds", num(v.compile_seconds, 1)),
      figure("break-even steps", breakEven,
        `against ${num(v.train_steps ?? view.train_steps, 0)} trained`),
      figure("compilations", String(view.markers.length),
        `${view.recompilations.length} recompilations`),
    ),
  );
  if (v.next_steps && v.next_steps.length) {
    const list = el("ol", { class: "next-steps" });
    for (const step of v.next_steps) {
      list.append(
        el(
          "li",
          {},
          el("code", { class: "code", text: step.code }),
          el("span", {
            class: "seconds",
            text: step.seconds === null ? " " : ` ${num(step.seconds, 1)} s `,
          }),
          el("span", { class: "fix" }, prose(step.fix)),
        ),
      );
    }
    card.append(el("h3", { text: "Next steps, by seconds" }), list);
  }
  return card;
}

// A tick of the log-scale axis: ms below a second, seconds from one on.
function tick(ms) {
  return ms >= 1000 ? `${ms / 1000} s` : `${ms} ms`;
}

// The step-time chart: one point per train call (log scale), a marker per
// compilation at the step it happened, labelled with its cause.
function stepChart(view, onSelect) {
  const series = view.series;
  const marks = view.markers;
  const steps = series.map((p) => p[0]).concat(marks.map((m) => m.global_step));
  const maxStep = Math.max(1, ...steps);
  const W = 1000, L = 60, R = 20, B = 40, ROW = 15;
  const x0 = (step) => L + ((W - L - R) * step) / maxStep;
  // Labels above the plot, in as many rows as they need not to overlap.
  const rows = [];
  // A label that would run past the plot's right edge goes to the left
  // of its marker.
  const flipped = marks.map(
    (m) => x0(m.global_step) + 4 + 7.2 * markerLabel(m).length > W,
  );
  const labelRow = marks.map((m, i) => {
    const width = 7.2 * markerLabel(m).length;
    const start = flipped[i] ? x0(m.global_step) - 4 - width
      : x0(m.global_step) + 4;
    const end = start + width;
    let row = rows.findIndex((last) => last < start - 6);
    if (row < 0) row = rows.push(0) - 1;
    rows[row] = end;
    return row;
  });
  const T = 28 + ROW * Math.max(1, rows.length);
  const H = T + 220 + B;
  const values = series.map((p) => p[1]).filter((v) => v > 0);
  const lo = values.length ? Math.min(...values) : 1;
  const hi = values.length ? Math.max(...values) : 10;
  const logLo = Math.floor(Math.log10(lo));
  const logHi = Math.max(logLo + 1, Math.ceil(Math.log10(hi)));
  const x = x0;
  const y = (ms) =>
    T + (H - T - B) * (1 - (Math.log10(Math.max(ms, 10 ** logLo)) - logLo) /
      (logHi - logLo));
  const chart = svg("svg", {
    viewBox: `0 0 ${W} ${H}`,
    class: "chart",
    role: "img",
    "aria-label": "step time per train call, compilations marked",
  });
  for (let e = logLo; e <= logHi; e++) {
    chart.append(
      svg("line", { x1: L, x2: W - R, y1: y(10 ** e), y2: y(10 ** e),
        class: "grid" }),
      svg("text", { x: L - 6, y: y(10 ** e) + 4, class: "axis",
        "text-anchor": "end" }, document.createTextNode(tick(10 ** e))),
    );
  }
  chart.append(
    svg("text", { x: W - R, y: H - 8, class: "axis", "text-anchor": "end" },
      document.createTextNode(`global train step (0 - ${maxStep})`)),
  );
  if (series.length) {
    const d = series
      .map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`)
      .join(" ");
    chart.append(svg("path", { d, class: "series" }));
    for (const [step, ms] of series) {
      const dot = svg("circle", { cx: x(step), cy: y(ms), r: 2.5,
        class: "point" });
      dot.append(svg("title", {}, document.createTextNode(
        `step ${step}: ${num(ms)} ms`)));
      chart.append(dot);
    }
  }
  // Steps that stood out with no compilation: ringed by what explains
  // them (a wait for the batch, a warm-up call, nothing).
  for (const s of view.slow_steps || []) {
    const ring = svg("circle", { cx: x(s.global_step), cy: y(s.ms), r: 6,
      class: `slow ${s.kind}` });
    ring.append(svg("title", {}, document.createTextNode(
      `step ${s.global_step}: ${num(s.ms)} ms, ${num(s.seconds, 3)} s over ` +
      `the median: ${SLOW_KINDS[s.kind] || s.kind}`)));
    chart.append(ring);
  }
  // Epoch boundaries, faint, named at the bottom.
  let start = 0;
  for (const e of view.epochs) {
    if (start > 0) {
      const ex = x(start - 0.5);
      chart.append(
        svg("line", { x1: ex, x2: ex, y1: T, y2: H - B, class: "epoch" }),
        svg("text", { x: ex + 4, y: H - B + 16, class: "axis" },
          document.createTextNode(`epoch ${e.epoch}`)),
      );
    }
    start += e.steps;
  }
  // The baseline windows: XLA and no-XLA calls in turn, shaded, so their
  // steps (and the no-XLA function's first call) read as what they are.
  const band = view.baseline;
  if (band) {
    const bx = x(band.start - 0.5), bw = Math.max(x(band.end + 0.5) - bx, 2);
    const rect = svg("rect", { x: bx, y: T, width: bw, height: H - B - T,
      class: "baseline-band" });
    rect.append(svg("title", {}, document.createTextNode(baselineText(band))));
    chart.prepend(rect);  // behind the grid, the series and the markers
    chart.append(svg("text", { x: bx + 4, y: H - B - 6, class: "axis" },
      document.createTextNode("no-XLA baseline windows")));
  }
  // The recompilation guard's fallback: no XLA from its step to the end.
  const off = view.guard;
  if (off) {
    const gx = x(off.global_step - 0.5);
    const rect = svg("rect", { x: gx, y: T, width: Math.max(W - R - gx, 2),
      height: H - B - T, class: "guard-band" });
    rect.append(svg("title", {}, document.createTextNode(guardText(off))));
    chart.prepend(rect);
    const label = {
      per_shape: "new shapes without XLA from here (recompilation storm)",
      bucket: "padded to buckets from here (recompilation storm)",
    }[off.action] || "no XLA from here (recompilation storm)";
    chart.append(svg("text", { x: gx + 4, y: T + 14, class: "axis" },
      document.createTextNode(label)));
  }
  // Markers: one per compilation, a rule at its step and its head above
  // the plot; the labels above the heads, in rows, drawn after every
  // rule so no rule crosses a label.
  const rules = svg("g", { class: "rules" });
  chart.append(rules);
  marks.forEach((m, i) => {
    const kind = m.validation ? "validation" : m.label === "first compile"
      ? "first" : "recompile";
    const mx = x(m.global_step);
    const top = T - 18 - ROW * labelRow[i];
    rules.append(svg("line", { x1: mx, x2: mx, y1: top - 4, y2: H - B,
      class: `rule ${kind}` }));
    const g = svg("g", { class: `marker ${kind}`, tabindex: 0,
      "data-step": m.global_step });
    g.append(
      m.validation
        ? svg("rect", { x: mx - 5, y: T - 11, width: 10, height: 10,
          transform: `rotate(45 ${mx} ${T - 6})`, class: "head" })
        : svg("circle", { cx: mx, cy: T - 6, r: 6, class: "head" }),
      svg("text", { x: flipped[i] ? mx - 4 : mx + 4, y: top,
        class: "marker-label",
        "text-anchor": flipped[i] ? "end" : "start" },
        document.createTextNode(markerLabel(m))),
    );
    g.append(svg("title", {}, document.createTextNode(markerText(m))));
    g.addEventListener("mouseenter", () => onSelect(m));
    g.addEventListener("focus", () => onSelect(m));
    g.addEventListener("click", () => onSelect(m));
    chart.append(g);
  });
  return chart;
}

const SLOW_NAMES = {
  input: "input wait", "warm-up": "warm-up", unexplained: "unexplained",
};

const SLOW_KINDS = {
  input: "it waited for its batch (the input pipeline)",
  "warm-up": "a first call (of a function or an epoch), or a baseline's " +
    "no-XLA call",
  unexplained: "nothing explains it (a host pause, another process, " +
    "a callback)",
};

function baselineText(band) {
  return [
    `no-XLA baseline windows, global steps ${band.start} - ${band.end}:`,
    "XLA and no-XLA windows in turn; the no-XLA function's first call " +
      `builds its graph (${num(band.first_call_seconds)} s), no compile`,
    `median step: no XLA ${num(band.no_xla_step_ms)} ms, ` +
      `XLA ${num(band.xla_step_ms)} ms`,
  ].join("\n");
}

function guardText(off) {
  const dims = off.dims || [];
  const where = off.input ? `\`${off.input}\`` + (dims.length === 0 ? ""
    : ` dimension${dims.length > 1 ? "s" : ""} ${dims.join(", ")}`)
    : "the inputs";
  const avoided = off.projected_compilations
    ? `; ${Math.round(off.projected_compilations)} compilations ` +
      `(${num(off.projected_seconds)} s) avoided`
    : "";
  const storm = `${off.recompilations} recompilations for new ` +
    `sizes of ${where} (${num(off.compile_seconds)} s)${avoided}`;
  if (off.action === "bucket") {
    return `from global step ${off.global_step} the recompilation guard ` +
      `padded ${where} up to ${(off.edges || []).join(", ")}: ${storm}`;
  }
  if (off.action !== "per_shape") {
    return `the recompilation guard turned XLA off at global step ` +
      `${off.global_step}: ${storm}`;
  }
  const side = (steps, seconds, how) => `${steps} steps ${how} ` +
    `(${num(seconds)} s` +
    (steps ? `, ${num(seconds / steps * 1000)} ms each)` : ")");
  return [
    `from global step ${off.global_step} the recompilation guard ran ` +
      `XLA's program for the ${off.kept_shapes} shapes it compiled and ` +
      `new shapes without XLA: ${storm}`,
    `${side(off.xla_steps, off.xla_seconds, "ran XLA")}, ` +
      side(off.plain_steps, off.plain_seconds, "without XLA"),
  ].join("\n");
}

function markerLabel(m) {
  return `${m.validation ? "validation: " : ""}${m.label}`;
}

// Text with `code` spans (as the fixes write them) as <code> elements.
function prose(text) {
  return String(text ?? "").split("`").map((part, i) =>
    i % 2 ? el("code", { text: part }) : part);
}

function markerText(m) {
  const where = m.validation
    ? `${m.function} (validation), end of epoch ${m.epoch}`
    : `train, epoch ${m.epoch} step ${m.step} (global ${m.global_step})`;
  const lines = [`${m.label}: ${where}`, `compile ${num(m.seconds)} s`];
  if (m.input !== null) {
    lines.push(`input ${m.input} dim ${m.dim}: ${shape(m.before)} -> ` +
      `${shape(m.after)}`);
  } else {
    lines.push(`shapes ${shapes(m.shapes)}`);
  }
  if (m.cache) lines.push(`compile cache: ${m.cache}`);
  return lines.join("\n");
}

function markerDetails(m) {
  const box = el("div", { class: "marker-details", id: "marker-details" });
  if (!m) {
    box.append(el("span", { class: "muted",
      text: "Hover or click a marker for its input, dimension, shapes " +
        "and seconds." }));
    return box;
  }
  const dl = el("dl");
  const add = (term, value) =>
    dl.append(el("dt", { text: term }), el("dd", { text: value }));
  add("cause", m.label);
  add("where", m.validation
    ? `${m.function} (validation) at the end of epoch ${m.epoch}`
    : `train, epoch ${m.epoch}, step ${m.step} (global step ${m.global_step})`);
  if (m.input !== null) {
    add("input", `${m.input}, dimension ${m.dim}`);
    add("shape", `${shape(m.before)} -> ${shape(m.after)}`);
  } else {
    add("shapes", shapes(m.shapes));
  }
  add("compile", `${num(m.seconds)} s`);
  if (m.cache) add("compile cache", m.cache);
  box.append(dl);
  return box;
}

function chartCard(view) {
  const card = el("section", { class: "card", id: "steps" });
  card.append(el("h2", { text: "Step time, with each compilation marked" }));
  const legend = el("div", { class: "legend" },
    el("span", { class: "key first", text: "first compile" }),
    el("span", { class: "key recompile", text: "recompilation (cause)" }),
    el("span", { class: "key validation", text: "validation compile" }),
    ...(view.baseline ? [el("span", { class: "key baseline",
      text: "no-XLA baseline windows" })] : []),
    ...[...new Set((view.slow_steps || []).map((s) => s.kind))].map(
      (kind) => el("span", { class: `key slow ${kind}`,
        text: `slow: ${SLOW_NAMES[kind] || kind}` })),
    el("span", { class: "muted", text: "xla/step_time_ms, log scale" }),
  );
  let details = markerDetails(null);
  const select = (m) => {
    const next = markerDetails(m);
    details.replaceWith(next);
    details = next;
  };
  card.append(legend, stepChart(view, select), details);
  const firstRecompile = view.markers.find(
    (m) => m.label !== "first compile" && !m.validation);
  if (firstRecompile) select(firstRecompile);
  if (!view.series.length) {
    card.append(el("p", { class: "muted",
      text: "No xla/step_time_ms points in this run yet." }));
  }
  return card;
}

function table(headers, rows, attrs = {}) {
  const t = el("table", attrs);
  t.append(el("thead", {}, el("tr", {},
    headers.map(([h, cls]) => el("th", { class: cls, text: h })))));
  const body = el("tbody");
  for (const row of rows) body.append(row);
  t.append(body);
  return t;
}

function recompilationCard(view) {
  const card = el("section", { class: "card", id: "recompilations" });
  card.append(el("h2", {
    text: `Recompilations (${view.recompilations.length})` }));
  if (!view.recompilations.length) {
    card.append(el("p", { class: "muted",
      text: "None: each function compiled once per shape it needed." }));
    return card;
  }
  const rows = view.recompilations.map((r) =>
    el("tr", { class: "recompilation" },
      el("td", { class: "nowrap", text: r.function }),
      el("td", { class: "num", text: String(r.epoch) }),
      el("td", { class: "num", text: String(r.step) }),
      el("td", { class: "nowrap", text: r.input ?? "-" }),
      el("td", { class: "num", text: r.dim ?? "-" }),
      el("td", { class: "nowrap mono",
        text: `${shape(r.before)} -> ${shape(r.after)}` }),
      el("td", { class: "nowrap" }, el("code", { class: "code",
        text: r.code ?? r.cause })),
      el("td", { class: "num", text: num(r.compile_seconds) }),
      el("td", { class: "prose" }, prose(r.fix)),
    ));
  card.append(table(
    [["function", "nowrap"], ["epoch", "num"], ["step", "num"],
      ["input", "nowrap"], ["dim", "num"], ["before -> after", "nowrap"],
      ["cause", "nowrap"], ["seconds", "num"], ["fix", "prose"]],
    rows));
  return card;
}

function findingsCard(view) {
  const card = el("section", { class: "card", id: "findings" });
  card.append(el("h2", { text: `Findings (${view.findings.length})` }));
  if (!view.findings.length) {
    card.append(el("p", { class: "muted", text: "None." }));
    return card;
  }
  const rows = view.findings.map((f) =>
    el("tr", { class: `finding ${f.severity}` },
      el("td", { class: "nowrap" }, el("code", { class: "code",
        text: f.code })),
      el("td", { class: "nowrap", text: f.severity }),
      el("td", { class: "num", text: String(f.count) }),
      el("td", { class: "num", text: num(f.compile_seconds) }),
      el("td", { class: "prose" }, prose(f.message)),
      el("td", { class: "prose" }, prose(f.fix)),
    ));
  card.append(table(
    [["code", "nowrap"], ["severity", "nowrap"], ["count", "num"],
      ["compile s", "num"], ["what", "prose"], ["fix", "prose"]],
    rows));
  return card;
}

function jobCard(job) {
  // A job across workers (keras_xla.core.job): the chief's report, shown
  // on every worker's run; this run's worker and the slowest marked.
  const card = el("section", { class: "card", id: "job" });
  card.append(el("h2", { text: "The job" }));
  card.append(el("p", { class: "prose", text: job.headline }));
  const rows = job.workers.map((w) =>
    el("tr", { class: w.this ? "this-worker" : null },
      el("td", { class: "nowrap", text: String(w.worker) +
        (w.this ? " (this run)" : "") +
        (w.made_wait ? " - the others waited for it" : "") }),
      el("td", { class: "nowrap", text: w.host ?? "-" }),
      el("td", { class: "num", text: String(w.compilations) }),
      el("td", { class: "num", text: String(w.recompilations) }),
      el("td", { class: "num", text: num(w.compile_seconds) }),
      el("td", { class: "num", text: num(w.step_ms) }),
      el("td", { class: "num", text: String(w.steps) }),
    ));
  for (const index of job.missing) {
    rows.push(el("tr", { class: "finding warning" },
      el("td", { class: "nowrap", text: String(index) }),
      el("td", { class: "nowrap", text: "(no report)" }),
      ...[0, 1, 2, 3, 4].map(() => el("td", { class: "num", text: "-" }))));
  }
  card.append(table(
    [["worker", "nowrap"], ["host", "nowrap"], ["compiles", "num"],
      ["recompiles", "num"], ["compile s", "num"], ["median ms", "num"],
      ["steps", "num"]],
    rows));
  for (const f of job.findings) {
    card.append(el("p", { class: "prose finding warning" },
      el("code", { class: "code", text: f.code }),
      ` worker ${f.worker}` + (f.seconds ? ` (${num(f.seconds)} s)` : "") +
        ": ", prose(f.message), " Fix: ", prose(f.fix)));
  }
  return card;
}

function xlaCard(view) {
  const x = view.xla;
  const card = el("section", { class: "card", id: "xla" });
  card.append(el("h2", { text: "XLA in this run" }));
  const dl = el("dl", { class: "facts" });
  const add = (term, value) => {
    if (value === null || value === undefined || value === "") return;
    dl.append(el("dt", { text: term }), el("dd", { text: value }));
  };
  add("mode", x.mode);
  add("asked / on", `${JSON.stringify(x.requested)} / ${x.enabled ? "on" : "off"}`);
  add("why", x.reason);
  const clusters = Object.entries(x.clusters || {});
  if (clusters.length) {
    add("clusters", clusters.map(([k, v]) => `${k}: ${v}`).join(", "));
  }
  if (x.cluster_share !== null) {
    add("ops in clusters", `${num(100 * x.cluster_share, 0)}%`);
  }
  if (x.hlo) {
    const h = x.hlo;
    add("HLO", `${h.kernels_per_step} kernels per step, ${h.fusions} ` +
      `fusions, fusion ratio ${num(h.fusion_ratio)}` +
      (h.unfused_converts ? `, ${h.unfused_converts} unfused converts` : ""));
    add("FLOPs per step", num(h.flops_per_step, 0));
    if (h.achieved_tflops !== null) {
      add("achieved TFLOP/s", num(h.achieved_tflops, 4) +
        (h.utilization !== null ? ` (${num(100 * h.utilization, 1)}% of peak)`
          : ""));
    }
    add("HLO from", h.source);
  }
  if (x.cache) {
    add("compile cache", `${x.cache.active ? "on" : "off"}: ` +
      `${x.cache.hits} hits, ${x.cache.misses} misses` +
      (x.cache.seconds_saved !== null
        ? `, ${num(x.cache.seconds_saved, 1)} s saved` : ""));
  }
  if (x.decision) {
    const d = x.decision;
    add("auto decision", `${d.status}: ${d.winner ?? "none"}` +
      (d.speedup_vs_default !== null
        ? ` (${num(d.speedup_vs_default)}x Keras's default` +
          (d.speedup_low !== null && d.speedup_high !== null
            ? `, ${num(d.speedup_low)}-${num(d.speedup_high)}` : "") + ")"
        : ""));
    add("decided because", d.reason);
    for (const c of d.candidates) {
      add(`  ${c.name}`, `${num(c.median_step_ms)} ms per step, compile ` +
        `${num(c.compile_seconds, 1)} s`);
    }
  }
  card.append(dl);
  return card;
}

function epochsCard(view) {
  // The columns are the report's figures (keras_xla.core.figures), as
  // the summary's epoch table shows them: [header, digits or null].
  const card = el("section", { class: "card", id: "epochs" });
  card.append(el("h2", { text: "Epochs" }));
  const { columns, rows } = view.epoch_table;
  const cell = (value, digits) => value === null || value === undefined
    ? "-" : digits === null ? String(value) : num(value, digits);
  card.append(table(
    columns.map(([header]) => [header, "num"]),
    rows.map((row) => el("tr", {}, ...row.map((value, i) =>
      el("td", { class: "num", text: cell(value, columns[i][1]) }))))));
  return card;
}

function compareCard(result) {
  const [a, b] = result.labels;
  const card = el("section", { class: "card", id: "compare" });
  card.append(el("h2", { text: `${a} vs ${b}` }));
  const rows = [el("tr", {},
    el("td", { class: "nowrap", text: "XLA" }),
    ...result.xla.map((on) => el("td", { class: "num",
      text: on === null ? "-" : on ? "on" : "off" })),
    el("td", {}), el("td", {}))];
  for (const row of result.rows) {
    const digits = row.digits === null ? 0 : row.digits;
    rows.push(el("tr", { class: "compare-row" },
      el("td", { class: "nowrap", text: row.label }),
      ...row.values.map((v) => el("td", { class: "num", text: num(v, digits) })),
      el("td", { class: "num", text: row.ratio === null ? "-"
        : `${num(row.ratio)}x` }),
      el("td", { class: "nowrap better", text: row.better ?? "" }),
    ));
  }
  card.append(
    table([["", "nowrap"], [`A: ${a}`, "num"], [`B: ${b}`, "num"],
      ["B / A", "num"],
      ["better", "nowrap"]], rows, { class: "compare" }),
    el("p", { class: "conclusion", text: result.conclusion }),
  );
  result.headlines.forEach((h, i) => {
    if (h) card.append(el("p", { class: "headline" },
      el("b", { text: `${result.labels[i]}: ` }), h));
  });
  return card;
}

function comparisonCard(c, choose) {
  // keras-xla run --compare: which backend and XLA setting trained the
  // script fastest here; each row opens its configuration's run.
  const card = el("section", { class: "card", id: "comparison" });
  card.append(el("h2", { text: `Backends and XLA settings: ${c.script}` }));
  card.append(el("p", { class: "prose answer", text: c.answer }));
  const rows = c.rows.map((r) => {
    // The script's exit codes where one was not 0 (its fits still count).
    const codes = (r.exit_codes ?? []).filter((code) => code !== 0);
    const exited = codes.length ? `(exit code ${codes.join(", ")}) ` : "";
    const tr = el("tr", { class: r.runs.length ? "comparison-row" : null },
      el("td", { class: "nowrap", text: r.configuration }),
      ...(r.ok ? [
        el("td", { class: "num", text: String(r.steps) }),
        el("td", { class: "num", text: String(r.compilations) }),
        el("td", { class: "num", text: num(r.compile_seconds) }),
        el("td", { class: "num", text: num(r.step_ms) }),
        el("td", { class: "num", text: num(r.seconds) }),
        el("td", { class: "prose", text: exited + (r.headline ?? "") }),
      ] : [
        el("td", { class: "prose finding warning", colspan: "6",
          text: `cannot run: ${r.why}` }),
      ]));
    if (r.runs.length) tr.addEventListener("click", () => choose(r.runs[0]));
    return tr;
  });
  card.append(table([["configuration", "nowrap"], ["steps", "num"],
    ["compiles", "num"], ["compile s", "num"], ["step ms", "num"],
    ["fit s", "num"], ["verdict", "prose"]], rows));
  return card;
}

function runsCard(runs, state, choose) {
  const card = el("section", { class: "card", id: "runs" });
  card.append(el("h2", { text: "Runs" }));
  const rows = runs.map((r) => {
    const [word, kind] = status(r.xla_enabled === null ? null : r);
    const tr = el("tr", { class: `run-row${r.run === state.run ? " selected"
      : ""}` },
      el("td", { class: "nowrap mono", text: r.run }),
      el("td", { class: "nowrap" }, el("span", { class: `pill ${kind}`,
        text: word })),
      el("td", { class: "num", text: String(r.compilations) }),
      el("td", { class: "num", text: String(r.recompilations) }),
      el("td", { class: "prose", text: r.headline }),
    );
    tr.addEventListener("click", () => choose(r.run));
    return tr;
  });
  card.append(table([["run", "nowrap"], ["verdict", "nowrap"],
    ["compiles", "num"], ["recompiles", "num"], ["headline", "prose"]],
  rows));
  return card;
}

function emptyPage(root, empty) {
  root.append(el("section", { class: "card empty", id: "empty" },
    el("h2", { text: empty.title }),
    el("p", { text: empty.text }),
    el("pre", { text: empty.code }),
    el("p", { text: "Then start TensorBoard on that log dir:" }),
    el("pre", { text: empty.then }),
  ));
}

function picker(label, id, runs, value, none, onchange) {
  const select = el("select", { id, onchange });
  if (none) select.append(el("option", { value: "", text: none }));
  for (const r of runs) {
    select.append(el("option", { value: r.run, text: r.run,
      selected: r.run === value }));
  }
  select.value = value || "";
  return el("label", { class: "picker" }, `${label} `, select);
}

export async function render() {
  document.head.append(el("link", { rel: "stylesheet",
    href: "static/style.css" }));
  const root = el("main", { id: "xla-dashboard" });
  document.body.append(root);
  const params = new URLSearchParams(window.location.search);
  const state = { run: params.get("run"), compare: params.get("compare") };
  let runs;
  let comparisons = [];
  try {
    const listing = await getJSON("runs");
    runs = listing.runs;
    comparisons = listing.comparisons ?? [];
    if (!runs.length) {
      emptyPage(root, listing.empty);
      return;
    }
  } catch (error) {
    root.append(el("p", { class: "error", text: String(error) }));
    return;
  }
  if (!runs.some((r) => r.run === state.run)) state.run = runs[0].run;

  async function show() {
    const view = await getJSON(`report?run=${encodeURIComponent(state.run)}`);
    const comparison = state.compare && state.compare !== state.run
      ? await getJSON(`compare?a=${encodeURIComponent(state.run)}&b=` +
        encodeURIComponent(state.compare))
      : null;
    const bar = el("header", { class: "bar" },
      el("h1", { text: "XLA" }),
      picker("Run", "run", runs, state.run, null, (e) => {
        state.run = e.target.value; refresh();
      }),
      picker("Compare with", "compare-with", runs, state.compare,
        "(none)", (e) => { state.compare = e.target.value; refresh(); }),
    );
    const choose = (run) => {
      if (runs.some((r) => r.run === run)) { state.run = run; refresh(); }
    };
    const parts = [
      bar,
      ...comparisons.map((c) => comparisonCard(c, choose)),
      runs.length > 1 ? runsCard(runs, state, (run) => {
        state.run = run; refresh();
      }) : null,
      el("h2", { class: "run-title", text: `Run ${view.run}` }),
      view.job ? jobCard(view.job) : null,
      verdictCard(view),
      chartCard(view),
      recompilationCard(view),
      findingsCard(view),
      comparison ? compareCard(comparison) : null,
      el("div", { class: "columns" }, xlaCard(view), epochsCard(view)),
    ];
    root.replaceChildren(...parts.filter((part) => part));
    root.dataset.ready = "true";
  }

  function refresh() {
    show().catch((error) => {
      root.append(el("p", { class: "error", text: String(error) }));
    });
  }
  await show().catch((error) => {
    root.append(el("p", { class: "error", text: String(error) }));
  });
}
