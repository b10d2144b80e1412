// Stacked bars per day, drawn as SVG by hand (no chart library to vendor): one bar per day, one colour per
// series, a legend, the largest day's total on the axis, and each bar's figures in its tooltip.

import { el } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
export const PALETTE = ["#3a86ff", "#ff9f1c", "#2ec4b6", "#e71d36", "#8e7dbe", "#7cb518", "#f15bb5", "#9a8c98"];

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

/**
 * A stacked bar chart.
 * days: ["2026-06-01", ...]; series: [{name, values: [per day]}]; format: value -> text.
 */
export function stackedBars({ title, days, series, format }) {
  const width = 360;
  const height = 120;
  const totals = days.map((_, i) => series.reduce((sum, s) => sum + (s.values[i] || 0), 0));
  const max = Math.max(...totals, 0);
  const slot = width / Math.max(days.length, 1);
  const bar = Math.max(2, slot * 0.72);
  // Stretched to the width of the page: only bars inside, every text is HTML around it.
  const chart = svg("svg", {
    viewBox: `0 0 ${width} ${height}`,
    class: "chart",
    role: "img",
    "aria-label": title,
    preserveAspectRatio: "none",
  });
  days.forEach((day, i) => {
    let y = height;
    const x = i * slot + (slot - bar) / 2;
    const group = svg("g");
    const parts = [];
    series.forEach((s, k) => {
      const value = s.values[i] || 0;
      if (value <= 0 || max <= 0) return;
      const h = Math.max(1, (value / max) * (height - 4));
      y -= h;
      group.append(svg("rect", { x, y, width: bar, height: h, fill: PALETTE[k % PALETTE.length] }));
      parts.push(`${s.name}: ${format(value)}`);
    });
    group.append(svg("title", {}, `${day}: ${format(totals[i])}${parts.length ? `\n${parts.join("\n")}` : ""}`));
    chart.append(group);
  });
  const axis = el(
    "div",
    { class: "axis-labels small hint" },
    el("span", {}, days.length ? days[0] : ""),
    el("span", {}, max > 0 ? `highest day ${format(max)}` : "nothing yet"),
    el("span", {}, days.length ? days[days.length - 1] : ""),
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
  return el("figure", { class: "figure" }, el("figcaption", {}, title), chart, axis, legend);
}
