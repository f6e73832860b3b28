// What the page has seen, kept in memory for the plots: per key (a group
// or a handler), timestamped samples of a few counters. A page starts from
// the server's own samples of the last minutes (`seed`, samples.js), so a
// reload keeps the plots.

/** How far back the plots look. */
export const WINDOW_MS = 5 * 60 * 1000;

const samples = new Map();

/** Adds a sample `{name: number}` for `key` at now; drops what is too old. */
export function record(key, values) {
  const now = Date.now();
  let list = samples.get(key);
  if (!list) samples.set(key, (list = []));
  const last = list[list.length - 1];
  // Two polls in the same instant (two pages open on one key) add one sample.
  if (last && now - last.t < 250) {
    last.values = { ...last.values, ...values };
  } else {
    list.push({ t: now, values });
  }
  while (list.length && list[0].t < now - WINDOW_MS - 10_000) list.shift();
}

/**
 * Adds older samples `[{t, values}]` for `key` (the server's, samples.js):
 * each unless the page has a sample within half a second of it. Returns
 * how many were added.
 */
export function seed(key, points) {
  let list = samples.get(key);
  if (!list) samples.set(key, (list = []));
  const now = Date.now();
  let added = 0;
  for (const point of points) {
    if (point.t < now - WINDOW_MS - 10_000 || point.t > now) continue;
    if (list.some((s) => Math.abs(s.t - point.t) < 500)) continue;
    list.push({ t: point.t, values: point.values, seeded: true });
    added += 1;
  }
  list.sort((a, b) => a.t - b.t);
  return added;
}

/** How many of the samples of `key` came from the server. */
export function seededCount(key) {
  return (samples.get(key) || []).filter((s) => s.seeded).length;
}

/** The samples of `key` that carry `name` (pages record different fields). */
function having(key, name) {
  return (samples.get(key) || []).filter((s) => Number.isFinite(s.values[name]));
}

/** The points `[t, value]` of `name` for `key`. */
export function series(key, name) {
  return having(key, name).map((s) => [s.t, s.values[name]]);
}

/**
 * The rate per second of the counter `name` for `key`, between consecutive
 * samples; a counter that went down (a reset, a restart) counts as 0.
 */
export function rate(key, name) {
  const list = having(key, name);
  const points = [];
  for (let i = 1; i < list.length; i += 1) {
    const dt = (list[i].t - list[i - 1].t) / 1000;
    const dv = list[i].values[name] - list[i - 1].values[name];
    if (dt > 0) points.push([list[i].t, Math.max(0, dv) / dt]);
  }
  return points;
}
