// The server's own samples of the last minutes (GET /v1/metrics/samples,
// docs/console.md#plots): a page seeds its plots with them when it opens,
// so a reload, or a page opened a while after the work began, still shows
// the last five minutes. The server samples every --metrics-interval
// (5 s by default), the page every poll (1.5 s).

import { api } from './api.js';
import { seed } from './history.js';

/**
 * Seeds the plots' history from the server's samples narrowed by `filter`
 * ({stream, group} or {handler}); returns how many samples were added
 * (0 from a server without the route).
 */
export async function seedFromServer(filter) {
  const query = new URLSearchParams(Object.entries(filter).filter(([, v]) => v !== undefined && v !== null));
  let answer;
  try {
    answer = await api('GET', `/v1/metrics/samples?${query}`);
  } catch (e) {
    // An older server, or one that does not sample: the page's own samples only.
    console.warn(e);
    return 0;
  }
  // Times on the page's clock: shifted by how far the server's is off.
  const offset = Date.now() - Date.parse(answer.now);
  const at = (iso) => Date.parse(iso) + (Number.isFinite(offset) ? offset : 0);
  let added = 0;
  for (const g of answer.groups || []) {
    added += seed(`group:${g.stream}/${g.group}`, g.samples.map((s) => ({
      t: at(s.at), values: { lag: s.lag, settled: s.settled, appended: s.appended },
    })));
  }
  for (const x of answer.handlers || []) {
    added += seed(`handler:${x.handler}`, x.samples.map((s) => ({
      t: at(s.at), values: { processed: s.processed, acked: s.acked },
    })));
  }
  return added;
}
