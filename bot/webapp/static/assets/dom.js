// Building the page: every text goes in as a text node (textContent), never as HTML, so a memory or a file
// name that looks like markup is shown as the characters it is.

/** An element with attributes (on* names become listeners) and children (strings become text nodes). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      node.className = value;
    } else if (name === "dataset") {
      Object.assign(node.dataset, value);
    } else if (value === true) {
      node.setAttribute(name, "");
    } else {
      node.setAttribute(name, String(value));
    }
  }
  append(node, children);
  return node;
}

/** Append children: nodes as they are, strings and numbers as text, arrays flattened, null skipped. */
export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replace every child of `node`. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/** A button (type=button) with a click handler. */
export function button(label, onclick, cls = "") {
  return el("button", { type: "button", class: cls, onclick }, label);
}

/** Tokens as 950, 12.3k, 4.56M. */
export function tokens(n) {
  if (n < 1000) return String(Math.round(n));
  if (n < 1e6) return `${(n / 1000).toFixed(n < 1e4 ? 2 : 1)}k`;
  return `${(n / 1e6).toFixed(2)}M`;
}

/** US dollars: $0.0042, $1.23; "–" for an unknown amount. */
export function usd(x) {
  if (x === null || x === undefined) return "–";
  if (x === 0) return "$0";
  if (Math.abs(x) < 0.01) return `$${x.toFixed(4)}`;
  return `$${x.toFixed(2)}`;
}

/** Bytes as 512 B, 12.3 KB, 4.5 MB. */
export function bytes(n) {
  if (n === null || n === undefined) return "–";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

let zone;

/** Set the zone times are shown in (the user's, from /api/me); an unknown one falls back to the browser's. */
export function setZone(name) {
  try {
    new Intl.DateTimeFormat("en-GB", { timeZone: name });
    zone = name;
  } catch {
    zone = undefined;
  }
}

/** An ISO time as "12 Jun 2026, 09:30" in the user's zone. */
export function when(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  return new Intl.DateTimeFormat("en-GB", {
    timeZone: zone, day: "numeric", month: "short", year: "numeric", hour: "2-digit", minute: "2-digit",
  }).format(date);
}

/** Milliseconds as 850 ms, 3.2 s, 2 min 5 s. */
export function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}
