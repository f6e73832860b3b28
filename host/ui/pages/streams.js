// Streams: each stream's partitions, their high watermarks and the number
// of events (docs/log.md); a link to browse a stream's events.

import { api } from '../api.js';
import { h, fill, num, time, table, setRows, td, emptyRow, errorBanner, heading } from '../dom.js';

/** Events in a stream: sequences start at 1 and are never removed. */
export function eventCount(stream) {
  return Object.values(stream.partitions || {}).reduce((sum, p) => sum + p.high_watermark, 0);
}

export function list(root) {
  const errors = h('div');
  const { table: tableEl, body } = table(
    [['Stream'], ['Partitions', 'num'], ['High watermark per partition'], ['Events', 'num'], ['Created'], ['']],
    { 'data-testid': 'streams-table' },
  );
  const totals = h('p', { class: 'muted', 'data-testid': 'streams-total' });
  fill(root,
    heading('Streams', 'Partitioned, immutable event logs. Events are numbered from 1 in each partition.'),
    errors, h('div', { class: 'card' }, tableEl), totals);

  return {
    async refresh() {
      let answer;
      try {
        answer = await api('GET', '/v1/streams');
        fill(errors);
      } catch (e) {
        fill(errors, errorBanner(e));
        return;
      }
      const streams = answer.streams || [];
      if (!streams.length) {
        fill(body, emptyRow(6, 'No streams yet. Create one with `rheo streams create NAME` or POST /v1/streams.'));
        fill(totals);
        return;
      }
      if (body.querySelector('.empty-row')) fill(body);
      setRows(body, streams, (s) => s.name, (s) => {
        const marks = Object.entries(s.partitions || {}).map(([p, w]) =>
          h('span', { class: 'chip', title: `partition ${p}: last sequence ${w.high_watermark}` },
            h('span', { class: 'muted', text: `${p}:` }), ` ${num(w.high_watermark)}`));
        const link = `#/streams/${encodeURIComponent(s.name)}/events`;
        return h('tr', { 'data-testid': `stream-row-${s.name}` },
          td(h('a', { href: link, class: 'strong', text: s.name })),
          td(num(s.partition_count), 'num'),
          td(h('div', { class: 'chips' }, marks)),
          td(h('span', { 'data-testid': 'stream-events', text: num(eventCount(s)) }), 'num'),
          td(time(s.created_at)),
          td(h('a', { href: link, class: 'button-link', text: 'Browse events' }), 'row-actions'));
      });
      const events = streams.reduce((n, s) => n + eventCount(s), 0);
      totals.textContent = `${num(streams.length)} stream${streams.length === 1 ? '' : 's'}, ${num(events)} events in all.`;
    },
  };
}
