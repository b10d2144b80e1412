// How Telegram opens a Mini App: launch parameters in the URL fragment
// (#tgWebAppData=<url-encoded init data>&tgWebAppVersion=...&tgWebAppThemeParams=<json>), and events to
// and from the client (window.TelegramWebviewProxy in the phone and desktop apps, postMessage to the frame's
// parent in the web clients). Only what this page uses: ready, expand, theme changes.

const STORE = "tma-launch";
const TELEGRAM_WEB = ["https://web.telegram.org", "https://webk.telegram.org", "https://webz.telegram.org"];
const COLOR = /^#[0-9a-f]{3,8}$/i;

/** The launch parameters: from the fragment, else from this tab's storage (a reload keeps them). */
export function readLaunch() {
  const params = new URLSearchParams(window.location.hash.slice(1));
  let launch = null;
  if (params.get("tgWebAppData")) {
    launch = {
      initData: params.get("tgWebAppData"),
      version: params.get("tgWebAppVersion") || "",
      platform: params.get("tgWebAppPlatform") || "",
      theme: parseTheme(params.get("tgWebAppThemeParams")),
    };
    try {
      sessionStorage.setItem(STORE, JSON.stringify(launch));
    } catch {
      // storage may be off; the data still works for this load
    }
    // The launch data proves who the user is: out of the address bar (and of anything that copies it).
    history.replaceState(null, "", window.location.pathname + window.location.search);
  } else {
    try {
      launch = JSON.parse(sessionStorage.getItem(STORE) || "null");
    } catch {
      launch = null;
    }
  }
  return launch;
}

function parseTheme(raw) {
  if (!raw) return null;
  try {
    const theme = JSON.parse(raw);
    return theme && typeof theme === "object" ? theme : null;
  } catch {
    return null;
  }
}

function luminance(hex) {
  let h = hex.slice(1);
  if (h.length === 3) h = [...h].map((c) => c + c).join("");
  const [r, g, b] = [0, 2, 4].map((i) => parseInt(h.slice(i, i + 2), 16) / 255);
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

/** Telegram's theme as CSS variables (--tg-theme-bg-color, ...) and a light or dark colour scheme. */
export function applyTheme(theme) {
  const root = document.documentElement;
  if (!theme) {
    root.dataset.scheme = window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
    return;
  }
  for (const [key, value] of Object.entries(theme)) {
    if (/^[a-z_]+$/.test(key) && typeof value === "string" && COLOR.test(value)) {
      root.style.setProperty(`--tg-theme-${key.replaceAll("_", "-")}`, value);
    }
  }
  const bg = typeof theme.bg_color === "string" && COLOR.test(theme.bg_color) ? theme.bg_color : null;
  root.dataset.scheme = bg && luminance(bg) < 0.5 ? "dark" : "light";
}

/** Send an event to the Telegram client, if the page runs in one. */
export function postEvent(type, data = {}) {
  try {
    if (window.TelegramWebviewProxy && typeof window.TelegramWebviewProxy.postEvent === "function") {
      window.TelegramWebviewProxy.postEvent(type, JSON.stringify(data));
    } else if (window.parent !== window) {
      window.parent.postMessage(JSON.stringify({ eventType: type, eventData: data }), "*");
    }
  } catch {
    // not in Telegram (a browser): nothing to tell
  }
}

/** Follow the client's events: a theme change re-colours the page. */
export function listen(onTheme) {
  const handle = (type, data) => {
    if (type === "theme_changed" && data && data.theme_params) onTheme(data.theme_params);
  };
  window.Telegram = window.Telegram || {};
  window.Telegram.WebView = window.Telegram.WebView || {};
  const before = window.Telegram.WebView.receiveEvent;
  window.Telegram.WebView.receiveEvent = (type, data) => {
    handle(type, data);
    if (typeof before === "function") before(type, data);
  };
  window.addEventListener("message", (event) => {
    if (!TELEGRAM_WEB.includes(event.origin)) return;
    try {
      const { eventType, eventData } = JSON.parse(event.data);
      handle(eventType, eventData);
    } catch {
      // not an event of Telegram's
    }
  });
}
