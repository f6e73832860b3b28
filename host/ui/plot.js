// A small hand-written SVG line chart for the last minutes of a few series
// (lag, events per second). No library: a path per series, a baseline, the
// maximum on the y axis and the time span on the x axis.

import { WINDOW_MS } from './history.js';

const NS = 'http://www.w3.org/2000/svg';
const W = 480;
const H = 140;
const PAD = { left: 44, right: 8, top: 10, bottom: 20 };

function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

function short(n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(n >= 1e7 ? 0 : 1)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(n >= 1e4 ? 0 : 1)}k`;
  if (n >= 10 || Number.isInteger(n)) return String(Math.round(n));
  return n.toFixed(1);
}

/** 30 s, 2 min. */
function ago(ms) {
  return ms < 60_000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms / 60_000)} min`;
}

/** A "nice" ceiling for the y axis: 1, 2 or 5 times a power of ten. */
function ceiling(max) {
  if (max <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(max));
  for (const step of [1, 2, 5, 10]) if (max <= step * power) return step * power;
  return 10 * power;
}

/**
 * Draws `series` ([{label, kind, points: [[t, v]]}]; `kind` picks the colour
 * class) into a new figure titled `title`. `unit` labels the y axis.
 */
export function chart(title, series, unit, testid) {
  const now = Date.now();
  // The x axis covers what the page has seen, from one minute up to the
  // whole window, so a page opened a moment ago still shows a shape.
  const seen = series.flatMap((s) => s.points.map(([t]) => t)).filter((t) => t >= now - WINDOW_MS);
  const span = Math.min(WINDOW_MS, Math.max(60_000, now - Math.min(now, ...seen)));
  const start = now - span;
  const visible = series.map((s) => ({ ...s, points: s.points.filter(([t, v]) => t >= start && Number.isFinite(v)) }));
  const max = ceiling(Math.max(0, ...visible.flatMap((s) => s.points.map(([, v]) => v))));
  const x = (t) => PAD.left + ((t - start) / span) * (W - PAD.left - PAD.right);
  const y = (v) => H - PAD.bottom - (v / max) * (H - PAD.top - PAD.bottom);

  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img' });
  const latest = visible.map((s) => {
    const last = s.points[s.points.length - 1];
    return `${s.label} ${last ? short(last[1]) : 'no data yet'}`;
  });
  root.append(svg('title', {}, `${title}: ${latest.join(', ')} (the last ${ago(span)})`));
  for (const v of [0, max / 2, max]) {
    root.append(svg('line', { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), class: v === 0 ? 'axis' : 'grid' }));
    root.append(svg('text', { x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'tick' }, short(v)));
  }
  const step = [10_000, 15_000, 30_000, 60_000].find((ms) => span / ms <= 6) || 60_000;
  for (let back = 0; back <= span; back += step) {
    const anchor = back === 0 ? 'end' : back + step > span && x(now - back) - PAD.left < 20 ? 'start' : 'middle';
    root.append(svg('text', { x: x(now - back), y: H - 5, 'text-anchor': anchor, class: 'tick' },
      back === 0 ? 'now' : `−${ago(back)}`));
  }
  for (const s of visible) {
    if (!s.points.length) continue;
    const d = s.points.map(([t, v], i) => `${i ? 'L' : 'M'}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join('');
    root.append(svg('path', { d, class: `line ${s.kind}` }));
    const [lt, lv] = s.points[s.points.length - 1];
    root.append(svg('circle', { cx: x(lt), cy: y(lv), r: 2.5, class: `dot ${s.kind}` }));
  }

  const figure = document.createElement('figure');
  figure.className = 'plot';
  if (testid) figure.dataset.testid = testid;
  const caption = document.createElement('figcaption');
  const name = document.createElement('span');
  name.className = 'plot-title';
  name.textContent = title;
  caption.append(name);
  for (const [i, s] of visible.entries()) {
    const key = document.createElement('span');
    key.className = `legend ${s.kind}`;
    key.textContent = latest[i];
    caption.append(key);
  }
  if (unit) {
    const u = document.createElement('span');
    u.className = 'muted small';
    u.textContent = unit;
    caption.append(u);
  }
  figure.append(caption, root);
  return figure;
}
