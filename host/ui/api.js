// Every call the console makes goes through `api()`: it adds the bearer
// token (kept in localStorage), turns error bodies into ApiError with the
// server's own message, and on 401 asks for a token and tries again.
// Conventions of the API: docs/http.md.

const TOKEN_KEY = 'rheo.token';

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function token() {
  try {
    return localStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return '';
  }
}

export function setToken(value) {
  try {
    if (value) localStorage.setItem(TOKEN_KEY, value);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage disabled: the token lives as long as the page.
  }
  memoryToken = value;
}

let memoryToken = '';

export function authHeaders() {
  const t = token() || memoryToken;
  return t ? { Authorization: `Bearer ${t}` } : {};
}

// The one pending "please give a token" prompt; every request that meets a
// 401 meanwhile waits for the same answer.
let asking = null;
let askHandler = async () => { throw new ApiError(401, 'unauthorized', 'a token is needed'); };

/** Registers the function that asks the person for a token (app.js). */
export function onTokenNeeded(fn) {
  askHandler = fn;
}

function askForToken(message) {
  if (!asking) {
    asking = askHandler(message).finally(() => { asking = null; });
  }
  return asking;
}

/** Listeners told about each answer (ok or not): the "live" indicator. */
const listeners = new Set();
export function onAnswer(fn) {
  listeners.add(fn);
}

async function errorOf(response) {
  let code = `http_${response.status}`;
  let message = `${response.status} ${response.statusText}`.trim();
  try {
    const body = await response.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
    }
  } catch {
    // Not JSON: keep the status line.
  }
  return new ApiError(response.status, code, message);
}

/**
 * Sends a request to the API. `options.json` is sent as a JSON body,
 * `options.body` as is (with `options.type`); returns the parsed JSON
 * answer, or the raw Response when `options.raw`.
 */
export async function api(method, path, options = {}) {
  for (let tries = 0; ; tries += 1) {
    const headers = { ...authHeaders(), ...(options.headers || {}) };
    let body = options.body;
    if (options.json !== undefined) {
      headers['Content-Type'] = 'application/json';
      body = JSON.stringify(options.json);
    } else if (options.type) {
      headers['Content-Type'] = options.type;
    }
    let response;
    try {
      response = await fetch(path, { method, headers, body, signal: options.signal, cache: 'no-store' });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      const error = new ApiError(0, 'unreachable', `the server does not answer (${e.message})`);
      listeners.forEach((fn) => fn(error));
      throw error;
    }
    if (response.status === 401 && tries < 5) {
      const error = await errorOf(response);
      listeners.forEach((fn) => fn(error));
      await askForToken(error.message);
      continue;
    }
    if (!response.ok) {
      const error = await errorOf(response);
      listeners.forEach((fn) => fn(error.status >= 500 || error.status === 0 ? error : null));
      throw error;
    }
    listeners.forEach((fn) => fn(null));
    if (options.raw) return response;
    if (response.status === 204) return null;
    return response.json();
  }
}

/** `encodeURIComponent` for one path segment. */
export const seg = encodeURIComponent;
