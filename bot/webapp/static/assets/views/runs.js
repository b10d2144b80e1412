// Code runs: status, duration, error category; one run's code, output and files.

import { button, bytes, duration, el, replace, when } from "../dom.js";

export async function runsView(ctx, root) {
  let data;
  try {
    data = await ctx.api.get("code_runs?limit=50");
  } catch (err) {
    ctx.failed(err);
    return;
  }
  const list = el("ul", { class: "cards", id: "runs" }, data.runs.map(row));
  if (!data.runs.length) list.append(el("li", { class: "empty" }, "No code runs yet."));
  replace(root, list);

  function row(r) {
    return el(
      "li",
      { class: "card clickable", dataset: { id: r.id }, tabindex: "0", onclick: () => open(r.id) },
      el(
        "div",
        { class: "row" },
        el("strong", {}, `${r.status === "ok" ? "✓" : "✗"} ${r.language}`),
        el("span", { class: `badge ${r.status}` }, r.status === "ok" ? "ok" : r.error_category || "failed"),
      ),
      r.code_line ? el("code", { class: "code-line" }, r.code_line) : null, // a text node: markup shows as text
      el("div", { class: "small hint" }, `${when(r.created_at)} · ${duration(r.duration_ms)}`, r.files ? ` · ${r.files} file(s)` : ""),
    );
  }

  async function open(id) {
    let run;
    try {
      run = (await ctx.api.get(`code_runs/${encodeURIComponent(id)}`)).run;
    } catch (err) {
      ctx.failed(err);
      return;
    }
    const block = (title, text) =>
      text ? [el("h3", {}, title), el("pre", { class: "code" }, el("code", {}, text))] : [];
    replace(
      root,
      button("← All runs", () => runsView(ctx, root)),
      el("h2", {}, `${run.status === "ok" ? "✓" : "✗"} ${run.language} run`),
      el(
        "p",
        { class: "small" },
        `${when(run.created_at)} · ${duration(run.duration_ms)} · exit code ${run.exit_code ?? "–"}`,
        run.error_category ? ` · ${run.error_category}` : "",
        run.truncated ? " · output cut" : "",
      ),
      block("Code", run.code),
      block("Output", run.stdout),
      block("Errors", run.stderr),
      run.files_out.length
        ? [el("h3", {}, "Files it wrote"), el("ul", { class: "plain" }, run.files_out.map((f) => el("li", {}, f.name, ` (${bytes(f.size)})`)))]
        : [],
    );
  }
}
