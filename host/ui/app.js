// The console's shell: hash routes to pages, a poll loop that refreshes the
// page on view every 1.5 s (no reload), the "live" indicator, and the token
// prompt. What each page shows: docs/console.md.

import { api, onAnswer, onTokenNeeded, setToken, token } from './api.js';
import { h, fill } from './dom.js';
import * as streams from './pages/streams.js';
import * as events from './pages/events.js';
import * as groups from './pages/groups.js';
import * as handlers from './pages/handlers.js';
import * as nodes from './pages/nodes.js';

const POLL_MS = 1500;

/** [section, pattern, module, title]; the pattern's groups are the params. */
const ROUTES = [
  ['streams', /^\/streams$/, streams.list, 'Streams'],
  ['streams', /^\/streams\/([^/]+)\/events$/, events.browser, 'Events'],
  ['groups', /^\/groups$/, groups.list, 'Groups'],
  ['groups', /^\/groups\/([^/]+)\/([^/]+)$/, groups.detail, 'Group'],
  ['handlers', /^\/handlers$/, handlers.list, 'Handlers'],
  ['handlers', /^\/handlers\/([^/]+)$/, handlers.detail, 'Handler'],
  ['nodes', /^\/nodes$/, nodes.list, 'Nodes'],
];

const main = document.getElementById('main');
let current = null;
let timer = null;
let generation = 0;

function route() {
  const path = (location.hash.replace(/^#/, '') || '/streams').split('?')[0];
  for (const [section, pattern, page, title] of ROUTES) {
    const match = pattern.exec(path);
    if (match) {
      const params = match.slice(1).map(decodeURIComponent);
      return { section, page, title, params, query: new URLSearchParams(location.hash.split('?')[1] || '') };
    }
  }
  return null;
}

async function show() {
  generation += 1;
  const mine = generation;
  clearTimeout(timer);
  if (current && current.unmount) current.unmount();
  current = null;
  const found = route();
  document.querySelectorAll('nav a').forEach((a) => {
    if (found && a.dataset.section === found.section) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  });
  if (!found) {
    fill(main, h('div', { class: 'empty' }, 'No such page. ', h('a', { href: '#/streams', text: 'Go to the streams' })));
    return;
  }
  document.title = `${found.title}${found.params.length ? ` · ${found.params.join(' / ')}` : ''} — Rheo`;
  const root = h('div', { class: 'page', 'data-page': found.section });
  fill(main, root);
  current = found.page(root, found.params, found.query);
  const tick = async () => {
    if (mine !== generation) return;
    try {
      await current.refresh();
    } catch (e) {
      // Pages show their own errors; this only keeps the loop going.
      console.warn(e);
    }
    if (mine === generation) timer = setTimeout(tick, POLL_MS);
  };
  tick();
}

// The live indicator: when the last answer came, or what went wrong.
const live = document.getElementById('live');
let lastOk = 0;
let lastError = null;
onAnswer((error) => {
  if (error) {
    lastError = error;
  } else {
    lastOk = Date.now();
    lastError = null;
  }
  paintLive();
});
function paintLive() {
  if (lastError) {
    live.className = 'live down';
    live.textContent = lastError.status === 401 ? 'token needed' : 'server unreachable';
  } else if (lastOk) {
    const age = Math.round((Date.now() - lastOk) / 1000);
    live.className = age > 5 ? 'live stale' : 'live up';
    live.textContent = age > 5 ? `last update ${age} s ago` : 'live';
  }
}
setInterval(paintLive, 1000);

// The token prompt: shown when the API answers 401, or from the header.
const dialog = document.getElementById('token-dialog');
const form = document.getElementById('token-form');
const input = document.getElementById('token-input');
const reason = document.getElementById('token-reason');
let resolveToken = null;

function openTokenDialog(message) {
  reason.textContent = message
    ? `The server answered: ${message}.`
    : 'Enter the bearer token this server was started with.';
  input.value = token();
  if (!dialog.open) dialog.showModal();
  input.focus();
  input.select();
}

onTokenNeeded((message) => new Promise((resolve) => {
  resolveToken = resolve;
  openTokenDialog(message);
}));

form.addEventListener('submit', (e) => {
  e.preventDefault();
  setToken(input.value.trim());
  dialog.close();
  if (resolveToken) {
    resolveToken();
    resolveToken = null;
    learnAccess();
  } else {
    learnAccess().then(show);
  }
});
document.getElementById('token-forget').addEventListener('click', () => {
  setToken('');
  input.value = '';
  input.focus();
});
// Escape closes the dialog; a waiting request then retries (and asks again
// if it still needs a token).
dialog.addEventListener('cancel', () => {
  if (resolveToken) {
    setTimeout(resolveToken, 3000);
    resolveToken = null;
  }
});
document.getElementById('token-button').addEventListener('click', () => openTokenDialog(''));

// What the token may do (GET /v1/whoami): with a read-only token the
// write controls (marked `data-write`) are hidden, and the header says so.
const access = document.getElementById('access');
async function learnAccess() {
  try {
    const who = await api('GET', '/v1/whoami');
    document.body.classList.toggle('read-only', !who.may_write);
    access.hidden = who.may_write;
  } catch (e) {
    // An older server without the route: show everything, as before.
    console.warn(e);
  }
}

window.addEventListener('hashchange', show);
learnAccess().then(show);

// Exposed for the browser tests and the curious: the API helper.
window.rheo = { api };
