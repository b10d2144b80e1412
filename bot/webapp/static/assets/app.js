// The app's page: reads Telegram's launch data, follows its theme, and shows one view at a time.

import { Api } from "./api.js";
import { button, el, replace, setZone } from "./dom.js";
import { applyTheme, listen, postEvent, readLaunch } from "./launch.js";
import { filesView } from "./views/files.js";
import { memoryView } from "./views/memory.js";
import { runsView } from "./views/runs.js";
import { schedulesView } from "./views/schedules.js";
import { usageView } from "./views/usage.js";

const VIEWS = { memory: memoryView, schedules: schedulesView, usage: usageView, runs: runsView, files: filesView };
// What the page says when it cannot start (the server's words are used when it gave some).
const MISSING = "No Telegram launch data: open the app from the chat with the bot (the menu button, or /app).";

const main = document.getElementById("view");
const tabs = document.getElementById("tabs");
const toastBox = document.getElementById("toast");
let toastTimer = null;

function fatal(message, reason) {
  tabs.hidden = true;
  replace(
    main,
    el(
      "section",
      { class: "fatal", id: "fatal", role: "alert", dataset: { reason: reason || "error" } },
      el("h2", {}, "The app cannot open"),
      el("p", {}, message),
    ),
  );
  document.body.dataset.ready = "refused";
}

function toast(message, actionLabel, action) {
  clearTimeout(toastTimer);
  replace(
    toastBox,
    el("span", {}, message),
    actionLabel ? button(actionLabel, () => { toastBox.hidden = true; action(); }, "link") : null,
  );
  toastBox.hidden = false;
  toastTimer = setTimeout(() => { toastBox.hidden = true; }, 6000);
}

function failed(err) {
  if (err.status === 401) {
    fatal(err.message, err.data.reason);
  } else if (err.status === 429) {
    toast(`Too many requests: wait ${err.data.retry_after || "a few"} s and try again.`);
  } else {
    toast(err.message);
  }
}

async function show(ctx, name) {
  for (const b of tabs.querySelectorAll("button")) b.setAttribute("aria-current", String(b.dataset.view === name));
  const root = el("div", { class: "pane", id: `pane-${name}` });
  replace(main, root);
  await VIEWS[name](ctx, root);
}

async function start() {
  const launch = readLaunch();
  applyTheme(launch && launch.theme);
  listen((theme) => applyTheme(theme));
  postEvent("web_app_ready");
  postEvent("web_app_expand");
  if (!launch || !launch.initData) {
    fatal(MISSING, "missing");
    return;
  }
  const api = new Api(launch.initData);
  let me;
  try {
    me = await api.get("me");
  } catch (err) {
    if (err.status === 401) fatal(err.message, err.data.reason);
    else fatal(err.message, "error");
    return;
  }
  setZone(me.timezone);
  const name = me.user.first_name || me.user.username || `user ${me.user.id}`;
  document.getElementById("title").textContent = me.owner ? `${name} (owner)` : name;
  const ctx = { api, me, toast, failed };
  tabs.hidden = false;
  for (const b of tabs.querySelectorAll("button")) b.addEventListener("click", () => show(ctx, b.dataset.view));
  await show(ctx, "memory");
  performance.mark("first-data");
  if (document.body.dataset.ready !== "refused") document.body.dataset.ready = "1";
}

start();
