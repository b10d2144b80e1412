// The JSON API of this bot (README, "The app"): every request carries `Authorization: tma <initData>`.

export class ApiError extends Error {
  constructor(status, data) {
    super((data && data.error) || `the server answered ${status}`);
    this.status = status;
    this.data = data || {};
  }
}

export class Api {
  constructor(initData) {
    this.auth = `tma ${initData}`;
    // Relative to the page: /api/ when it is served at /, /app/api/ under /app/.
    this.base = new URL("api/", window.location.href);
  }

  async call(method, path, body) {
    const url = new URL(path, this.base);
    const init = { method, headers: { Authorization: this.auth }, cache: "no-store", credentials: "omit" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, init);
    } catch {
      throw new ApiError(0, { error: "The bot could not be reached. Check the connection and try again." });
    }
    let data = null;
    try {
      data = await response.json();
    } catch {
      data = null;
    }
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  }

  get(path) {
    return this.call("GET", path);
  }

  post(path, body) {
    return this.call("POST", path, body === undefined ? {} : body);
  }

  patch(path, body) {
    return this.call("PATCH", path, body);
  }

  delete(path) {
    return this.call("DELETE", path);
  }
}
