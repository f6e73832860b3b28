// The event browser: a stream's history through the query API
// (POST /v1/streams/{s}/query, docs/log.md#query) — filters, bounds, order,
// pages by cursor — and one event's JSON; a form appends an event
// (POST /v1/streams/{s}/events, docs/log.md#events).

import { api, seg } from '../api.js';
import { h, fill, num, time, table, setRows, td, emptyRow, errorBanner, heading } from '../dom.js';
import { appendedCount, eventCount } from './streams.js';
import { deleteSection } from '../delete.js';
import { jsonObject } from '../forms.js';

const ORDERS = {
  'sequence-asc': 'Sequence, oldest first',
  'sequence-desc': 'Sequence, newest first',
  'timestamp-asc': 'Time, oldest first',
  'timestamp-desc': 'Time, newest first',
};

function field(label, input, hint) {
  return h('div', { class: 'field' }, h('label', { for: input.id, text: label }), input,
    hint ? h('span', { class: 'hint', text: hint }) : null);
}

/** RFC 3339 from a datetime-local value (the browser's zone). */
function iso(local) {
  if (!local) return undefined;
  const d = new Date(local);
  return Number.isNaN(d.getTime()) ? undefined : d.toISOString();
}

export function browser(root, [stream]) {
  const base = `/v1/streams/${seg(stream)}`;
  const input = (id, attrs = {}) => h('input', { id, name: id, ...attrs });
  const type = input('q-type', { type: 'text', placeholder: 'order.placed', 'data-testid': 'filter-type' });
  const key = input('q-key', { type: 'text', placeholder: 'customer-7' });
  const partition = input('q-partition', { type: 'number', min: 0, placeholder: 'all' });
  const after = input('q-after', { type: 'number', min: 0, placeholder: '0' });
  const from = input('q-from', { type: 'datetime-local', step: 1 });
  const to = input('q-to', { type: 'datetime-local', step: 1 });
  const where = h('textarea', { id: 'q-where', name: 'where', rows: 1, spellcheck: 'false',
    placeholder: '{"payload.total": {"$gte": 100}}', 'data-testid': 'filter-where' });
  const order = h('select', { id: 'q-order', name: 'order' },
    Object.entries(ORDERS).map(([value, label]) => h('option', { value, text: label })));
  const limit = h('select', { id: 'q-limit', name: 'limit' },
    [25, 50, 100, 250].map((n) => h('option', { value: n, text: `${n} per page`, selected: n === 25 })));
  const form = h('form', { class: 'filters card', 'aria-label': 'Query' },
    h('div', { class: 'field-row' },
      field('Type', type), field('Key', key), field('Partition', partition),
      field('After sequence', after), field('Order', order), field('Page size', limit)),
    h('div', { class: 'field-row' },
      field('From', from), field('To', to),
      h('div', { class: 'field grow' }, h('label', { for: 'q-where', text: 'Where (JSON, ANDed with the other fields)' }), where)),
    h('div', { class: 'actions' },
      h('button', { type: 'reset', class: 'secondary', text: 'Clear' }),
      h('button', { type: 'submit', class: 'primary', 'data-testid': 'query-run', text: 'Search' })));

  const errors = h('div');
  const { table: results, body } = table(
    [['Partition', 'num'], ['Sequence', 'num'], ['Event id'], ['Type'], ['Key'], ['Time']],
    { 'data-testid': 'events-table', class: 'selectable' });
  const pageInfo = h('span', { class: 'muted', 'data-testid': 'page-info' });
  const prev = h('button', { type: 'button', class: 'secondary', disabled: true, 'data-testid': 'page-prev', text: '← Previous page' });
  const next = h('button', { type: 'button', class: 'secondary', disabled: true, 'data-testid': 'page-next', text: 'Next page →' });
  const detail = h('pre', { class: 'json', 'data-testid': 'event-json', tabindex: 0 });
  const detailTitle = h('h2', { text: 'Event' });
  const detailHint = h('p', { class: 'muted', text: 'Choose an event id to see its JSON.' });
  const side = h('aside', { class: 'card detail', 'aria-live': 'polite' }, detailTitle, detailHint, detail);
  const fresh = h('span', { class: 'muted', 'data-testid': 'stream-summary' });

  // Appending one event: what `rheo event append STREAM --type --key --payload --id` sends.
  const aType = input('a-type', { type: 'text', placeholder: 'order.placed', 'data-testid': 'append-type' });
  const aKey = input('a-key', { type: 'text', placeholder: 'customer-7', 'data-testid': 'append-key' });
  const aId = input('a-id', { type: 'text', placeholder: 'a new UUIDv7', 'data-testid': 'append-id' });
  const aPayload = h('textarea', { id: 'a-payload', name: 'payload', rows: 3, spellcheck: 'false',
    placeholder: '{"total": 120, "currency": "EUR"}', 'data-testid': 'append-payload' });
  const aSubmit = h('button', { type: 'submit', class: 'primary', 'data-testid': 'append', text: 'Append' });
  const aResult = h('div', { role: 'status', class: 'notice-slot' });
  const aErrors = h('div');
  const appendForm = h('form', { class: 'card', 'data-write': true, 'aria-labelledby': 'append-title' },
    h('h2', { id: 'append-title', text: 'Append an event' }),
    h('p', { class: 'muted small', text: 'The key picks the partition (the same key, the same partition). Appending an id the stream holds changes nothing and answers the stored event.' }),
    h('div', { class: 'field-row' },
      field('Event type', aType), field('Event key', aKey), field('Event id (optional)', aId)),
    h('div', { class: 'field-row' },
      h('div', { class: 'field grow' }, h('label', { for: 'a-payload', text: 'Payload (JSON object, default {})' }), aPayload)),
    aErrors, aResult,
    h('div', { class: 'actions' }, aSubmit));

  fill(root,
    heading(['Events of ', h('span', { class: 'mono', text: stream })], fresh,
      h('a', { href: '#/streams', class: 'button-link', text: '← Streams' })),
    form, errors,
    h('div', { class: 'split' },
      h('div', { class: 'card' }, results,
        h('div', { class: 'pager' }, prev, pageInfo, next)),
      side),
    appendForm,
    deleteSection({ what: 'stream', name: stream, path: base, afterwards: '#/streams',
      consequence: 'Its events, its groups and their leases and dead letters go.' }));

  // cursors[i] is the cursor that fetched page i (null for the first).
  let cursors = [null];
  let page = 0;
  let query = null;
  let selected = null;
  let countAtSearch = null;
  let lastCount = null;

  function build() {
    const filter = {};
    const text = where.value.trim();
    if (text) {
      let parsed;
      try {
        parsed = JSON.parse(text);
      } catch (e) {
        throw new Error(`Where is not JSON: ${e.message}`);
      }
      if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('Where must be a JSON object');
      Object.assign(filter, parsed);
    }
    if (type.value.trim()) filter.type = type.value.trim();
    if (key.value.trim()) filter.key = key.value.trim();
    if (partition.value !== '') filter.partition = Number(partition.value);
    const [orderField, dir] = order.value.split('-');
    const q = { order_by: [{ field: orderField, dir }], limit: Number(limit.value) };
    if (Object.keys(filter).length) q.where = filter;
    if (after.value !== '') q.after_sequence = Number(after.value);
    if (iso(from.value)) q.from = iso(from.value);
    if (iso(to.value)) q.to = iso(to.value);
    return q;
  }

  function showEvent(event) {
    selected = `${event.partition}/${event.sequence}`;
    detailTitle.textContent = `Event ${event.id}`;
    detailHint.hidden = true;
    detail.textContent = JSON.stringify(event, null, 2);
    body.querySelectorAll('tr').forEach((tr) => tr.classList.toggle('selected', tr.dataset.key === selected));
  }

  async function load() {
    try {
      const answer = await api('POST', `${base}/query`, { json: { ...query, cursor: cursors[page] || undefined } });
      fill(errors);
      const events = answer.events || [];
      if (!events.length) {
        fill(body, emptyRow(6, page === 0
          ? 'No event matches. Loosen the filters, or append events (POST /v1/streams/{stream}/events).'
          : 'No more events.'));
      } else {
        if (body.querySelector('.empty-row')) fill(body);
        setRows(body, events, (e) => `${e.partition}/${e.sequence}`, (e) => h('tr',
          { class: `${e.partition}/${e.sequence}` === selected ? 'selected' : undefined },
          td(num(e.partition), 'num'),
          td(num(e.sequence), 'num'),
          td(h('button', { type: 'button', class: 'link-button mono', 'data-testid': 'event-open', onclick: () => showEvent(e), text: e.id })),
          td(e.type || h('span', { class: 'muted', text: '–' })),
          td(e.key ? h('span', { class: 'mono', text: e.key }) : h('span', { class: 'muted', text: '–' })),
          td(time(e.timestamp))));
      }
      if (answer.next_cursor) cursors[page + 1] = answer.next_cursor;
      else cursors = cursors.slice(0, page + 1);
      prev.disabled = page === 0;
      next.disabled = !answer.next_cursor;
      pageInfo.textContent = `Page ${page + 1} · ${num(events.length)} event${events.length === 1 ? '' : 's'}`;
    } catch (e) {
      fill(errors, errorBanner(e));
    }
  }

  async function search() {
    try {
      query = build();
    } catch (e) {
      fill(errors, errorBanner(e));
      return;
    }
    cursors = [null];
    page = 0;
    countAtSearch = lastCount;
    await load();
  }

  appendForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    aSubmit.disabled = true;
    fill(aResult);
    try {
      const body = { payload: jsonObject(aPayload.value, 'Payload') };
      if (aType.value.trim()) body.type = aType.value.trim();
      if (aKey.value.trim()) body.key = aKey.value.trim();
      if (aId.value.trim()) body.id = aId.value.trim();
      const answer = await api('POST', `${base}/events`, { json: body });
      fill(aErrors);
      const { duplicate, ...stored } = answer;
      const at = `partition ${num(answer.partition)}, sequence ${num(answer.sequence)}`;
      fill(aResult, h('div', { class: duplicate ? 'notice warn' : 'notice', 'data-testid': 'append-result',
        dataset: { sequence: answer.sequence, partition: answer.partition, duplicate } },
      duplicate
        ? `Duplicate: event ${answer.id} is already at ${at}; nothing appended. `
        : `Appended event ${answer.id} at ${at}. `,
      h('button', { type: 'button', class: 'link-button', onclick: () => showEvent(stored), text: 'Show it' })));
    } catch (err) {
      fill(aErrors, errorBanner(err));
    } finally {
      aSubmit.disabled = false;
    }
  });

  form.addEventListener('submit', (e) => { e.preventDefault(); search(); });
  form.addEventListener('reset', () => setTimeout(search, 0));
  prev.addEventListener('click', () => { if (page > 0) { page -= 1; load(); } });
  next.addEventListener('click', () => { if (cursors[page + 1]) { page += 1; load(); } });

  let started = false;
  return {
    // The results stay put while paging; the poll only says how many
    // events arrived since the search.
    async refresh() {
      try {
        const s = await api('GET', base);
        lastCount = appendedCount(s);
        if (countAtSearch === null) countAtSearch = lastCount;
        const since = lastCount - countAtSearch;
        fill(fresh, `${num(eventCount(s))} events in ${num(s.partition_count)} partition${s.partition_count === 1 ? '' : 's'}`,
          since > 0 ? h('span', {}, ` · ${num(since)} new since this search — `,
            h('button', { type: 'button', class: 'link-button', onclick: search, text: 'search again' })) : null);
      } catch (e) {
        fill(errors, errorBanner(e));
      }
      if (!started) {
        started = true;
        await search();
      }
    },
  };
}
