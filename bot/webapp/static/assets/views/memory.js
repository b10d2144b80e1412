// Memory: by layer, search, edit the text, forget, history, undo; origin and untrusted marks as in /memory.

import { button, el, replace, when } from "../dom.js";

export async function memoryView(ctx, root) {
  const state = { layer: null, q: "", offset: 0, items: [], counts: {}, more: false, checked: null };
  const search = el("input", {
    type: "search",
    name: "q",
    placeholder: "Search your memories",
    "aria-label": "Search your memories",
    enterkeyhint: "search",
  });
  const form = el(
    "form",
    { class: "search", role: "search", onsubmit: (e) => { e.preventDefault(); state.q = search.value.trim(); reload(); } },
    search,
    el("button", { type: "submit" }, "Search"),
  );
  const chips = el("div", { class: "chips", role: "tablist", "aria-label": "Layers" });
  const list = el("ul", { class: "cards", id: "memories" });
  const more = el("div", { class: "more" });
  const checked = el("p", { class: "checked", id: "memory-checked" });
  replace(root, form, chips, list, more, checked);

  function drawChips() {
    const total = Object.values(state.counts).reduce((a, b) => a + b, 0);
    const entries = [[null, "All", total], ...Object.entries(ctx.me.layers).map(([k, t]) => [k, t, state.counts[k] || 0])];
    replace(
      chips,
      entries.map(([key, title, n]) =>
        el(
          "button",
          {
            type: "button",
            role: "tab",
            class: "chip",
            "aria-selected": String(state.layer === key),
            dataset: { layer: key || "all" },
            onclick: () => { state.layer = key; state.offset = 0; reload(); },
          },
          `${title} `,
          el("span", { class: "count" }, String(n)),
        ),
      ),
    );
  }

  async function load(offset) {
    const params = new URLSearchParams();
    if (state.layer) params.set("layer", state.layer);
    if (state.q) params.set("q", state.q);
    if (offset) params.set("offset", String(offset));
    const data = await ctx.api.get(`memories?${params}`);
    state.counts = data.counts;
    state.checked = data.checked || null;
    state.more = data.more;
    state.offset = offset;
    return data.memories;
  }

  async function reload() {
    try {
      state.items = await load(0);
    } catch (err) {
      ctx.failed(err);
      return;
    }
    draw();
  }

  function draw() {
    drawChips();
    checked.textContent = state.checked || "";  // the nightly self-check: "findable: 99.6 %, checked <date>"
    replace(list, state.items.map(card));
    if (!state.items.length) {
      list.append(el("li", { class: "empty" }, state.q ? "Nothing matches that." : "No memories here yet."));
    }
    replace(
      more,
      state.more
        ? button("Show more", async () => {
          try {
            const next = await load(state.offset + state.items.length);
            state.items = state.items.concat(next);
            draw();
          } catch (err) {
            ctx.failed(err);
          }
        })
        : null,
    );
  }

  function tags(m) {
    const out = [el("span", { class: "tag" }, m.layer_title), el("span", { class: "tag" }, m.category)];
    if (m.said_by) out.push(el("span", { class: "tag" }, `said by ${m.said_by}`));
    if (m.untrusted) out.push(el("span", { class: "tag warn", title: "saved while reading web or tool content" }, m.note));
    else if (m.note) out.push(el("span", { class: "tag" }, m.note));
    if (m.event_at) out.push(el("span", { class: "tag" }, `happened ${m.event_at.slice(0, 10)}`));
    if (m.relevance !== undefined && m.relevance !== null) out.push(el("span", { class: "tag" }, `match ${m.relevance.toFixed(2)}`));
    return out;
  }

  function card(m) {
    const text = el("p", { class: "content" }, m.content);
    const meta = el("div", { class: "meta" }, tags(m));
    const times = el(
      "div",
      { class: "hint small" },
      `saved ${when(m.created_at)}`,
      m.updated_at ? ` · changed ${when(m.updated_at)}` : "",
      m.expires_at ? ` · kept until ${when(m.expires_at)}` : "",
      ` · id ${m.id}`,
    );
    const history = el("div", { class: "history" });
    const actions = el("div", { class: "actions" });
    const item = el("li", { class: "card", dataset: { id: m.id } }, text, meta, times, actions, history);

    function showActions() {
      replace(
        actions,
        button("Edit", edit),
        button("History", () => toggleHistory()),
        button("Forget", forget, "danger"),
      );
    }

    function edit() {
      const area = el("textarea", { rows: "4", maxlength: "2000", "aria-label": "Memory text" });
      area.value = m.content;
      text.replaceWith(area);
      area.focus();
      replace(
        actions,
        button("Save", async () => {
          try {
            const data = await ctx.api.patch(`memories/${encodeURIComponent(m.id)}`, { content: area.value });
            Object.assign(m, data.memory);
            text.textContent = m.content;
            area.replaceWith(text);
            replace(meta, tags(m));
            showActions();
            ctx.toast("Saved.", "Undo", () => undo(m.id));
          } catch (err) {
            ctx.failed(err);
          }
        }, "primary"),
        button("Cancel", () => { area.replaceWith(text); showActions(); }),
      );
    }

    async function forget() {
      try {
        await ctx.api.delete(`memories/${encodeURIComponent(m.id)}`);
        item.remove();
        state.items = state.items.filter((x) => x.id !== m.id);
        ctx.toast("Forgotten.", "Undo", () => undo(m.id));
      } catch (err) {
        ctx.failed(err);
      }
    }

    async function toggleHistory(force) {
      if (history.childElementCount && !force) {
        history.replaceChildren();
        return;
      }
      try {
        const data = await ctx.api.get(`memories/${encodeURIComponent(m.id)}/history`);
        replace(
          history,
          el("ol", { class: "changes" }, data.changes.map(change)),
          data.changes.some((c) => !c.undone && c.action !== "undo")
            ? button("Undo the last change", () => undo(m.id))
            : null,
        );
      } catch (err) {
        ctx.failed(err);
      }
    }

    showActions();
    return item;
  }

  function change(c) {
    const head = `${when(c.at)} · ${c.action} by ${c.actor}${c.undone ? " (undone)" : ""}`;
    return el(
      "li",
      {},
      el("div", { class: "small" }, head),
      c.old_text && c.action !== "add" ? el("div", { class: "small old" }, "before: ", c.old_text) : null,
      c.new_text && c.action !== "forget" ? el("div", { class: "small" }, "after: ", c.new_text) : null,
      c.reason ? el("div", { class: "small hint" }, "why: ", c.reason) : null,
    );
  }

  async function undo(id) {
    try {
      const data = await ctx.api.post(`memories/${encodeURIComponent(id)}/undo`);
      ctx.toast(`Undone: ${data.undone.detail}.`);
      await reload();
    } catch (err) {
      ctx.failed(err);
    }
  }

  await reload();
}
