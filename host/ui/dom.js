// Small DOM helpers: element building, number and time formatting, and
// table bodies that update row by row (a poll that changed nothing leaves
// the DOM, focus and a hovered button alone).

/**
 * Builds an element. `attrs`: `class`, `text`, `on<event>` handlers,
 * `dataset`, `hidden`/`disabled` booleans, anything else as an attribute.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') el.className = value;
    else if (name === 'text') el.textContent = value;
    else if (name === 'dataset') Object.assign(el.dataset, value);
    else if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, '');
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces the children of `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

const integer = new Intl.NumberFormat('en-US');

/** 12,345 (or an en dash for null). */
export function num(n) {
  return n === null || n === undefined ? '–' : integer.format(n);
}

/** 1.5 s, 3 min 4 s, 2 h 5 min. */
export function duration(ms) {
  if (ms === null || ms === undefined) return '–';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/** A timestamp as local date and time, with the exact value as a tooltip. */
export function time(iso) {
  if (!iso) return h('span', { class: 'muted', text: '–' });
  const d = new Date(iso);
  const text = Number.isNaN(d.getTime()) ? iso : d.toLocaleString('en-GB', { hour12: false });
  return h('time', { datetime: iso, title: iso, text });
}

/** A table with a header; `columns`: [label, 'num'?]. Returns {table, body}. */
export function table(columns, attrs = {}) {
  const body = h('tbody');
  const head = h('tr', {}, columns.map(([label, kind]) =>
    h('th', { scope: 'col', class: kind === 'num' ? 'num' : undefined, text: label })));
  const el = h('table', attrs, h('thead', {}, head), body);
  return { table: el, body };
}

/**
 * Sets the rows of `tbody` to one per item, keyed by `key(item)`; a row is
 * rebuilt (by `render(item)`, which returns a <tr>) only when its item's
 * JSON changed. Rows follow the items' order.
 */
export function setRows(tbody, items, key, render) {
  const old = new Map();
  for (const row of tbody.children) old.set(row.dataset.key, row);
  const rows = items.map((item) => {
    const k = String(key(item));
    const stamp = JSON.stringify(item);
    const row = old.get(k);
    if (row && row.dataset.stamp === stamp) return row;
    const fresh = render(item);
    fresh.dataset.key = k;
    fresh.dataset.stamp = stamp;
    return fresh;
  });
  const keep = new Set(rows);
  for (const row of [...tbody.children]) if (!keep.has(row)) row.remove();
  rows.forEach((row, i) => {
    const at = tbody.children[i];
    if (at !== row) tbody.insertBefore(row, at || null);
  });
}

/** A <td>; numbers are right-aligned. */
export function td(content, kind) {
  const cell = h('td', { class: kind === 'num' ? 'num' : kind });
  append(cell, [content]);
  return cell;
}

/** An empty-state line spanning a table. */
export function emptyRow(columns, message) {
  return h('tr', { class: 'empty-row' }, h('td', { colspan: columns, class: 'empty', text: message }));
}

/** A banner for an API error, with the API's own message. */
export function errorBanner(error) {
  const code = error && error.code ? ` (${error.code})` : '';
  return h('div', { class: 'error', role: 'alert', 'data-testid': 'error' },
    (error && error.message ? error.message : String(error)) + code);
}

/** A labelled figure: "Lag", 1,234. */
export function stat(label, value, testid, hint) {
  return h('div', { class: 'stat' },
    h('div', { class: 'stat-label', text: label }),
    h('div', { class: 'stat-value', 'data-testid': testid, text: value }),
    hint ? h('div', { class: 'stat-hint', text: hint }) : null);
}

/** The page title and an optional line under it. */
export function heading(title, sub, ...extra) {
  return h('div', { class: 'page-head' },
    h('div', {}, h('h1', {}, title), sub ? h('p', { class: 'muted' }, sub) : null),
    h('div', { class: 'page-actions' }, extra));
}
