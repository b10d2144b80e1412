// Usage: tokens and cost per day over 30 days by purpose or model, the caps and what is left; the owner
// also sees everyone's month and caps.

import { stackedBars, tokenTicks, usdTicks } from "../chart.js";
import { el, replace, tokens, usd, when } from "../dom.js";

const DAYS = 30;
const MAX_SERIES = 7; // more purposes or models than this are summed as "other"
const MIN_DAYS = 7; // the charts start at the first day with data, but show at least this many days

/** The index of the first day the charts show: the first with data, at most MIN_DAYS before the last. */
export function firstShown(data) {
  const first = data.lines.reduce((low, line) => Math.min(low, line.day), data.days.length);
  return Math.max(0, Math.min(first, data.days.length - MIN_DAYS));
}

/** The series of one field (tokens or cost) by purpose or model, in the order of `names`, the rest summed;
 * from day `start` on. */
function seriesOf(data, names, by, field, start) {
  const kept = names.slice(0, MAX_SERIES);
  const shown = data.days.slice(start);
  const series = kept.map((name) => ({ name, values: shown.map(() => 0) }));
  const other = { name: "other", values: shown.map(() => 0) };
  for (const line of data.lines) {
    if (line.day < start) continue;
    const target = series.find((s) => s.name === line[by]) || other;
    target.values[line.day - start] += line[field] || 0;
  }
  if (other.values.some((v) => v > 0)) series.push(other);
  return series;
}

/** Purposes or models, most tokens first: both charts use this order, so a colour means one thing. */
function namesBy(data, by) {
  const totals = new Map();
  for (const line of data.lines) totals.set(line[by], (totals.get(line[by]) || 0) + line.tokens);
  return [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a) || String(a).localeCompare(String(b)));
}

function capLine(c) {
  const amount = c.kind === "cost" ? usd : (n) => `${tokens(n)} tokens`;
  const held = c.reserved > 0 ? `, ${amount(c.reserved)} held by requests running` : "";
  return el(
    "li",
    { class: c.left <= 0 ? "warn-text" : "" },
    `${c.period === "daily" ? "Daily" : "Monthly"} ${c.kind === "cost" ? "cost" : "token"} cap ${amount(c.limit)}: `,
    `${amount(c.spent)} spent${held}, ${amount(c.left)} left; resets ${when(c.resets_at)}`,
    c.source === "owner" ? " (set by the owner)" : "",
  );
}

export async function usageView(ctx, root) {
  let data;
  try {
    data = await ctx.api.get(`usage?days=${DAYS}`);
  } catch (err) {
    ctx.failed(err);
    return;
  }
  let by = "purpose";
  const charts = el("div", { class: "charts" });
  const toggle = el(
    "div",
    { class: "chips", role: "tablist", "aria-label": "Split by" },
    ["purpose", "model"].map((key) =>
      el("button", { type: "button", class: "chip", role: "tab", dataset: { by: key }, onclick: () => { by = key; draw(); } }, `by ${key}`),
    ),
  );
  const totalTokens = data.lines.reduce((a, l) => a + l.tokens, 0);
  const unknown = data.lines.some((l) => l.cost === null);
  const totalCost = data.lines.reduce((a, l) => a + (l.cost || 0), 0);
  const summary = el(
    "p",
    {},
    `Last ${data.days.length} days (${data.timezone}): ${tokens(totalTokens)} tokens, ${usd(totalCost)} estimated`,
    unknown ? " (some models have no price: their cost is not counted)" : "",
    ".",
  );

  function draw() {
    for (const b of toggle.children) b.setAttribute("aria-selected", String(b.dataset.by === by));
    const names = namesBy(data, by);
    const start = firstShown(data);
    const days = data.days.slice(start);
    replace(
      charts,
      stackedBars({
        title: "Tokens per day", days, series: seriesOf(data, names, by, "tokens", start), format: tokens, ticks: tokenTicks,
      }),
      stackedBars({
        title: "Cost per day (estimated)", days, series: seriesOf(data, names, by, "cost", start), format: usd, ticks: usdTicks,
      }),
    );
  }

  // Guest and inline answers (asked in other chats, made without your private data), marked as such.
  const elsewhere = (data.other_chats || []).map((o) =>
    el("li", {}, `${o.purpose}: ${o.label}, ${o.calls} requests, ${tokens(o.tokens)} tokens`, o.cost === null ? "" : `, ${usd(o.cost)}`),
  );
  const otherChats = elsewhere.length
    ? el("section", { id: "other-chats" }, el("h2", {}, "In other chats"), el("p", { class: "hint small" }, "Made without your memories, files or earlier conversation."), el("ul", { class: "plain" }, elsewhere))
    : null;
  const caps = data.caps.length
    ? el("ul", { class: "plain" }, data.caps.map(capLine))
    : el("p", { class: "hint" }, "No usage caps apply to you.");
  const parts = [summary, toggle, charts, ...(otherChats ? [otherChats] : []), el("h2", {}, "Caps"), caps];
  if (data.everyone) parts.push(everyone(data.everyone));
  replace(root, parts);
  draw();
}

function everyone(all) {
  const capText = (u) =>
    u.caps.length
      ? u.caps.map((c) => `${c.period} ${c.kind === "cost" ? usd(c.limit) : `${tokens(c.limit)} tokens`}${c.source === "owner" ? "*" : ""}`).join(", ")
      : "none";
  return el(
    "section",
    { id: "everyone" },
    el("h2", {}, "Everyone this month"),
    el("p", { class: "hint small" }, `Since ${when(all.period_start)}. Caps marked * are set with /budget.`),
    el(
      "div",
      { class: "scroll" },
      el(
        "table",
        {},
        el("thead", {}, el("tr", {}, ["User", "Tokens", "Cost", "Turns", "Caps"].map((h) => el("th", {}, h)))),
        el(
          "tbody",
          {},
          all.users.map((u) =>
            el(
              "tr",
              { class: u.reached ? "warn-text" : "" },
              el("td", {}, u.who),
              el("td", {}, tokens(u.tokens)),
              el("td", {}, usd(u.cost)),
              el("td", {}, String(u.turns)),
              el("td", {}, capText(u)),
            ),
          ),
          el(
            "tr",
            { class: "total" },
            el("td", {}, "Total"),
            el("td", {}, tokens(all.total.tokens)),
            el("td", {}, usd(all.total.cost)),
            el("td", {}, String(all.total.turns)),
            el("td", {}, ""),
          ),
        ),
      ),
    ),
  );
}
