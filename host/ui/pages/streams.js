// Streams: each stream's partitions, their high watermarks, the number of
// events stored and the retention (docs/log.md); a link to browse a
// stream's events; a form to create a stream.

import { api } from '../api.js';
import { h, fill, num, duration, time, table, setRows, td, emptyRow, errorBanner, heading } from '../dom.js';
import { busy, field } from '../forms.js';

/** Events a stream stores: from each partition's first sequence to its high watermark. */
export function eventCount(stream) {
  return Object.values(stream.partitions || {})
    .reduce((sum, p) => sum + Math.max(0, p.high_watermark + 1 - (p.first_sequence || 1)), 0);
}

/** Events ever appended to a stream: the sum of its high watermarks. */
export function appendedCount(stream) {
  return Object.values(stream.partitions || {}).reduce((sum, p) => sum + p.high_watermark, 0);
}

/** How long a stream keeps events, in words (docs/log.md#retention). */
export function retentionText(retention) {
  if (!retention) return 'keeps every event';
  const parts = [];
  if (retention.max_age_ms) parts.push(`at most ${duration(retention.max_age_ms)} old`);
  if (retention.max_events) parts.push(`newest ${num(retention.max_events)} per partition`);
  if (retention.policy === 'interest') parts.push('until every group settled them');
  return parts.join(', ');
}

export function list(root) {
  const errors = h('div');
  const { table: tableEl, body } = table(
    [['Stream'], ['Partitions', 'num'], ['High watermark per partition'], ['Events', 'num'], ['Retention'], ['Created'], ['']],
    { 'data-testid': 'streams-table' },
  );
  const totals = h('p', { class: 'muted', 'data-testid': 'streams-total' });

  // Creating a stream (POST /v1/streams): a name and the partitions, fixed for life.
  const actionErrors = h('div');
  const notice = h('div', { role: 'status', class: 'notice-slot' });
  const name = h('input', { id: 'cs-name', type: 'text', required: true, pattern: '[A-Za-z0-9._-]{1,128}',
    placeholder: 'orders', 'data-testid': 'create-stream-name' });
  const partitions = h('input', { id: 'cs-partitions', type: 'number', min: 1, max: 1024, value: 1, required: true,
    'data-testid': 'create-stream-partitions' });
  const create = h('button', { type: 'submit', class: 'primary', 'data-testid': 'create-stream', text: 'Create stream' });
  const form = h('form', { class: 'card', 'data-write': true, 'aria-labelledby': 'cs-title' },
    h('h2', { id: 'cs-title', text: 'Create a stream' }),
    h('p', { class: 'muted small', text: 'The partition count is fixed for the stream’s life; events with the same key go to the same partition.' }),
    h('div', { class: 'field-row' },
      field('Stream name', name, '1–128 of A–Z a–z 0–9 . _ -'), field('Partitions', partitions, '1 to 1024')),
    h('div', { class: 'actions' }, create));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    busy(create, actionErrors, notice, async () => {
      const created = await api('POST', '/v1/streams', { json: { name: name.value.trim(), partition_count: Number(partitions.value) } });
      name.value = '';
      await refresh();
      return `Created stream ${created.name} with ${num(created.partition_count)} partition${created.partition_count === 1 ? '' : 's'}.`;
    });
  });

  fill(root,
    heading('Streams', 'Partitioned, immutable event logs. Events are numbered from 1 in each partition; a retention removes the oldest.'),
    errors, actionErrors, notice, h('div', { class: 'card' }, tableEl), totals, form);

  async function refresh() {
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
      fill(body, emptyRow(7, 'No streams yet. Create one with the form below, `rheo stream create NAME` or POST /v1/streams.'));
      fill(totals);
      return;
    }
    if (body.querySelector('.empty-row')) fill(body);
    setRows(body, streams, (s) => s.name, (s) => {
      const marks = Object.entries(s.partitions || {}).map(([p, w]) =>
        h('span', { class: 'chip', title: `partition ${p}: last sequence ${w.high_watermark}, first stored ${w.first_sequence}` },
          h('span', { class: 'muted', text: `${p}:` }), ` ${num(w.high_watermark)}`));
      const link = `#/streams/${encodeURIComponent(s.name)}/events`;
      return h('tr', { 'data-testid': `stream-row-${s.name}` },
        td(h('a', { href: link, class: 'strong', text: s.name })),
        td(num(s.partition_count), 'num'),
        td(h('div', { class: 'chips' }, marks)),
        td(h('span', { 'data-testid': 'stream-events', text: num(eventCount(s)) }), 'num'),
        td(h('span', { class: s.retention ? '' : 'muted', 'data-testid': 'stream-retention', text: retentionText(s.retention) })),
        td(time(s.created_at)),
        td(h('a', { href: link, class: 'button-link', text: 'Browse events' }), 'row-actions'));
    });
    const events = streams.reduce((n, s) => n + eventCount(s), 0);
    totals.textContent = `${num(streams.length)} stream${streams.length === 1 ? '' : 's'}, ${num(events)} events in all.`;
  }
  return { refresh };
}
