// Reminders and tasks: next times in the user's zone, pause, resume, cancel, and a task's spend this month.

import { button, el, replace, usd } from "../dom.js";
import { checkinCard } from "./checkin.js";

const LABELS = { pause: "Pause", resume: "Resume", cancel: "Cancel" };

export async function schedulesView(ctx, root) {
  const list = el("ul", { class: "cards", id: "schedules" });
  const head = el("p", { class: "hint" });
  const checkin = el("ul", { class: "cards" });
  replace(root, checkin, head, list);
  checkinCard(ctx).then((card) => replace(checkin, card));

  async function reload() {
    let data;
    try {
      data = await ctx.api.get("schedules");
    } catch (err) {
      ctx.failed(err);
      return;
    }
    head.textContent = `Times are in ${data.timezone} (change it with /timezone in the chat).`;
    replace(list, data.schedules.map(card));
    if (!data.schedules.length) {
      list.append(
        el("li", { class: "empty" }, "No reminders or scheduled tasks. Ask in the chat, e.g. “remind me tomorrow at 9”."),
      );
    }
  }

  function card(s) {
    const kind = s.kind === "task" ? "task" : "reminder";
    const state = s.state || s.status; // "snoozed" while a snooze is pending, never the "done" of the fired one
    const next = s.snoozed_until ? [`snoozed until ${s.snoozed_until}`] : s.next;
    const rows = [
      el("div", { class: "row" }, el("strong", {}, `#${s.id} ${kind}`), el("span", { class: `badge ${state}` }, state)),
      el("p", { class: "content" }, s.text),
      el("div", { class: "small" }, "Next: ", next.length ? next.join(" · ") : "no further time", ` (${s.timezone})`),
    ];
    if (s.repeat) rows.push(el("div", { class: "small hint" }, s.description));
    if (s.paused_why) rows.push(el("div", { class: "small warn-text" }, `Paused: ${s.paused_why}`));
    if (s.kind === "task") {
      rows.push(el("div", { class: "small" }, "Spend this month: ", el("span", { class: "spend" }, usd(s.spend_month_usd))));
    }
    rows.push(
      el(
        "div",
        { class: "actions" },
        s.actions.map((a) => button(LABELS[a], () => act(s.id, a), a === "cancel" ? "danger" : "")),
      ),
    );
    return el("li", { class: "card", dataset: { id: String(s.id) } }, rows);
  }

  async function act(id, action) {
    try {
      await ctx.api.post(`schedules/${id}/${action}`);
      ctx.toast(`${LABELS[action]}: done.`);
    } catch (err) {
      ctx.failed(err);
    }
    await reload();
  }

  await reload();
}
