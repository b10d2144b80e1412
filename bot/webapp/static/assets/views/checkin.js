// The check-in card at the top of the Reminders view: when it comes (in the user's zone), the next look,
// its back-off, what the last one sent contained, and a form to set it or turn it off (POST /api/checkin,
// checked as /checkin checks it).

import { button, el, replace, usd } from "../dom.js";

const DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const KINDS = { goal: "Goal", reminder: "Reminder", task: "Task", cap: "Cap", memory: "Memory" };
const STATES = { still: "still on", done: "done", dropped: "dropped", snoozed: "snoozed" };

export async function checkinCard(ctx) {
  const card = el("li", { class: "card", id: "checkin" });

  async function reload() {
    let data;
    try {
      data = await ctx.api.get("checkin");
    } catch (err) {
      replace(card, el("p", { class: "hint" }, "Check-ins are not available."));
      return;
    }
    draw(data.checkin);
  }

  function draw(c) {
    const rows = [
      el(
        "div",
        { class: "row" },
        el("strong", {}, "Check-in"),
        el("span", { class: `badge ${c.enabled ? "active" : "paused"}` }, c.enabled ? "on" : "off"),
      ),
    ];
    if (c.enabled) {
      rows.push(el("p", { class: "content" }, `${c.description}${c.digest ? ", as an LLM digest" : ""}`));
      if (c.next) rows.push(el("div", { class: "small" }, `Next look: ${c.next}`));
      if (c.backoff) rows.push(el("div", { class: "small warn-text" }, `Backed off to ${c.backoff} (ignored check-ins)`));
      if (c.digest) rows.push(el("div", { class: "small" }, "Each digest: about ", usd(c.digest_price_usd)));
    } else {
      rows.push(el("p", { class: "hint" }, "Off. When on, I look at your goals, reminders, tasks and caps at that time and write only when something is due."));
    }
    if (c.last_sent) {
      const items = c.last_items || [];
      rows.push(el("div", { class: "small" }, `Last check-in: ${c.last_sent}, ${items.length} item(s)`));
      rows.push(
        el(
          "ul",
          { class: "small", id: "checkin-last" },
          items.map((i) =>
            el("li", {}, `${KINDS[i.kind] || "Item"}: ${i.text} (${i.why})${i.state ? ` — ${STATES[i.state] || i.state}` : ""}`),
          ),
        ),
      );
    } else if (c.last_run) {
      rows.push(el("div", { class: "small hint" }, `Last look ${c.last_run}: nothing was due, nothing sent.`));
    }
    rows.push(form(c));
    replace(card, rows);
  }

  function form(c) {
    const cadence = el(
      "select",
      { name: "cadence", "aria-label": "How often" },
      el("option", { value: "daily" }, "daily"),
      el("option", { value: "weekly" }, "weekly"),
    );
    cadence.value = c.cadence || "daily";
    const day = el("select", { name: "weekday", "aria-label": "Day" }, DAYS.map((d) => el("option", { value: d }, d)));
    day.value = c.weekday || "mon";
    const at = el("input", { name: "at", type: "time", value: c.at || "09:00", "aria-label": "Time" });
    const digest = el("input", { name: "digest", type: "checkbox", checked: Boolean(c.digest) });
    const actions = [button(c.enabled ? "Save" : "Turn on", () => save({ cadence: cadence.value, weekday: day.value, at: at.value, digest: digest.checked }))];
    if (c.enabled) actions.push(button("Turn off", () => save({ cadence: "off" }), "danger"));
    return el(
      "div",
      { class: "actions" },
      cadence,
      day,
      at,
      el("label", { class: "small" }, digest, " digest"),
      actions,
    );
  }

  async function save(body) {
    try {
      const data = await ctx.api.post("checkin", body);
      ctx.toast(body.cadence === "off" ? "Check-ins are off." : "Check-in set.");
      draw(data.checkin);
    } catch (err) {
      ctx.failed(err);
    }
  }

  await reload();
  return card;
}
