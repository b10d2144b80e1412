// Stacked bars per day, drawn as SVG by hand (no chart library to vendor): one bar per day, one colour per
// series, a value axis with round ticks (every tick in one format), a legend, and each bar's figures in its
// tooltip.

import { el } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
export const PALETTE = ["#3a86ff", "#ff9f1c", "#2ec4b6", "#e71d36", "#8e7dbe", "#7cb518", "#f15bb5", "#9a8c98"];
const TICKS = 4; // about this many steps from 0 to the top of the value axis

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

/** Decimals needed to write `x` exactly (a tick step: 0.25 -> 2, 500 -> 0), at most 10. */
export function decimalsOf(x) {
  for (let d = 0; d < 10; d += 1) {
    if (Math.abs(Math.round(x * 10 ** d) - x * 10 ** d) < 1e-6) return d;
  }
  return 10;
}

/** Round ticks from 0 to at least `max`: a step of 1, 2, 2.5 or 5 times a power of ten. */
export function niceScale(max, count = TICKS) {
  if (!(max > 0)) return { step: 1, top: 1, values: [0, 1] };
  const raw = max / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / magnitude;
  const nice = norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 2.5 ? 2.5 : norm <= 5 ? 5 : 10;
  const step = nice * magnitude;
  const n = Math.max(1, Math.ceil(max / step - 1e-9));
  const values = Array.from({ length: n + 1 }, (_, i) => Number((i * step).toPrecision(12)));
  return { step, top: values[n], values };
}

/** The cost axis' labels: one number of decimals for every tick, from the step ($0.50 -> 2, $0.002 -> 3). */
export function usdTicks({ step }) {
  let decimals = decimalsOf(step);
  if (decimals > 0) decimals = Math.max(2, decimals); // cents, never "$0.5"
  return (x) => `$${x.toFixed(decimals)}`;
}

/** The token axis' labels: one unit (none, k or M) from the top tick and one number of decimals. */
export function tokenTicks({ step, top }) {
  const [unit, suffix] = top >= 1e6 ? [1e6, "M"] : top >= 1e3 ? [1e3, "k"] : [1, ""];
  const decimals = decimalsOf(step / unit);
  return (x) => `${(x / unit).toFixed(decimals)}${suffix}`;
}

/**
 * A stacked bar chart.
 * days: ["2026-06-01", ...]; series: [{name, values: [per day]}]; format: value -> text (the tooltips);
 * ticks: scale -> (value -> text), the value axis' labels (one format for every tick).
 */
export function stackedBars({ title, days, series, format, ticks }) {
  const width = 360;
  const height = 120;
  const totals = days.map((_, i) => series.reduce((sum, s) => sum + (s.values[i] || 0), 0));
  const max = Math.max(...totals, 0);
  const scale = niceScale(max);
  const slot = width / Math.max(days.length, 1);
  const bar = Math.max(2, slot * 0.72);
  // Stretched to the width of the page: only bars and grid lines inside, every text is HTML around it.
  const chart = svg("svg", {
    viewBox: `0 0 ${width} ${height}`,
    class: "chart",
    role: "img",
    "aria-label": title,
    preserveAspectRatio: "none",
  });
  for (const v of scale.values.slice(1)) {
    const y = height - (v / scale.top) * height;
    chart.append(svg("line", { x1: 0, x2: width, y1: y, y2: y, class: "grid", "vector-effect": "non-scaling-stroke" }));
  }
  days.forEach((day, i) => {
    let y = height;
    const x = i * slot + (slot - bar) / 2;
    const group = svg("g", { class: "day", "data-day": day });
    const parts = [];
    series.forEach((s, k) => {
      const value = s.values[i] || 0;
      if (value <= 0 || max <= 0) return;
      const h = Math.max(1, (value / scale.top) * height);
      y -= h;
      group.append(svg("rect", { x, y, width: bar, height: h, fill: PALETTE[k % PALETTE.length] }));
      parts.push(`${s.name}: ${format(value)}`);
    });
    group.append(svg("title", {}, `${day}: ${format(totals[i])}${parts.length ? `\n${parts.join("\n")}` : ""}`));
    chart.append(group);
  });
  const label = (ticks || (() => format))(scale);
  const axis = el(
    "div",
    { class: "y-axis small hint", "aria-hidden": "true" },
    max > 0 ? [...scale.values].reverse().map((v) => el("span", { class: "tick" }, label(v))) : [],
  );
  const xAxis = el(
    "div",
    { class: "axis-labels small hint" },
    el("span", {}, days.length ? days[0] : ""),
    max > 0 ? null : el("span", {}, "nothing yet"),
    el("span", {}, days.length > 1 ? days[days.length - 1] : ""),
  );
  const legend = el(
    "ul",
    { class: "legend" },
    series.map((s, k) => {
      const swatch = el("span", { class: "swatch" });
      swatch.style.background = PALETTE[k % PALETTE.length]; // CSSOM: the CSP allows no style attribute
      return el("li", {}, swatch, s.name);
    }),
  );
  return el(
    "figure",
    { class: "figure" },
    el("figcaption", {}, title),
    el("div", { class: "plot" }, axis, chart, el("span"), xAxis),
    legend,
  );
}
