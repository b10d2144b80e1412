// Files the user sent: name (as sent, shown as text), kind, size, what became of it, when.

import { bytes, el, replace, when } from "../dom.js";

export async function filesView(ctx, root) {
  let data;
  try {
    data = await ctx.api.get("files");
  } catch (err) {
    ctx.failed(err);
    return;
  }
  const list = el(
    "ul",
    { class: "cards", id: "files" },
    data.files.map((f) =>
      el(
        "li",
        { class: "card", dataset: { id: String(f.id) } },
        el("div", { class: "row" }, el("strong", { class: "name" }, f.name), el("span", { class: "badge" }, f.kind)),
        el(
          "div",
          { class: "small hint" },
          `${when(f.created_at)} · ${bytes(f.size)} · ${f.status}`,
          f.duration_s ? ` · ${f.duration_s} s` : "",
          f.text_chars ? ` · ${f.text_chars} characters of text` : "",
        ),
        f.detail ? el("div", { class: "small" }, f.detail) : null,
      ),
    ),
  );
  if (!data.files.length) list.append(el("li", { class: "empty" }, "You have not sent any files yet."));
  replace(root, list);
}
