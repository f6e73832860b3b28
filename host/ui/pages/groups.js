// Consumer groups (docs/groups.md): every group with its lag (one
// request, GET /v1/groups) and a form to create one; one group's lag per
// partition, frontier and hole, pending work, the leases out, parked keys
// with release (docs/groups.md#quarantine), dead letters with redrive,
// replay and reset, and a plot of lag and throughput over the last minutes
// (seeded from the server's samples, samples.js).

import { api, seg } from '../api.js';
import { h, fill, num, duration, time, table, setRows, td, emptyRow, errorBanner, stat, heading } from '../dom.js';
import { record, series, rate, seededCount } from '../history.js';
import { chart } from '../plot.js';
import { deleteSection } from '../delete.js';
import { busy, field, isoOf, jsonObject, numberList, startPoint, typedConfirmation } from '../forms.js';
import { seedFromServer } from '../samples.js';

const groupPath = (stream, group) => `/v1/streams/${seg(stream)}/groups/${seg(group)}`;
export const groupLink = (stream, group) => `#/groups/${encodeURIComponent(stream)}/${encodeURIComponent(group)}`;

/** Sum over partitions of `field` of a lag body. */
function total(lag, field) {
  return Object.values(lag.partitions || {}).reduce((sum, p) => sum + p[field], 0);
}

/** Records what the plots need from a group's info. */
export function sample(info) {
  record(`group:${info.stream}/${info.group}`, {
    lag: info.lag.lag,
    settled: total(info.lag, 'frontier'),
    appended: total(info.lag, 'high_watermark'),
  });
}

export function plots(stream, group) {
  const key = `group:${stream}/${group}`;
  const seeded = seededCount(key);
  return [
    chart('Lag', [{ label: 'lag', kind: 'a', points: series(key, 'lag') }], 'events', 'plot-lag'),
    chart('Throughput', [
      { label: 'appended', kind: 'b', points: rate(key, 'appended') },
      { label: 'settled', kind: 'c', points: rate(key, 'settled') },
    ], 'events / s', 'plot-throughput'),
  ].map((figure) => {
    figure.dataset.seeded = seeded;
    return figure;
  });
}

/** `1000, 5000` → [1000, 5000] (a retry schedule); empty: none. */
function backoff(text) {
  return numberList(text, 'Retry backoff');
}

/**
 * The form that creates a group (POST /v1/streams/{stream}/groups), in a
 * closed section: the list of streams is read when it is opened, not on
 * every poll.
 */
function createGroupForm(onCreated) {
  const errors = h('div');
  const notice = h('div', { role: 'status', class: 'notice-slot' });
  const stream = h('select', { id: 'cg-stream', required: true, 'data-testid': 'create-group-stream' },
    h('option', { value: '', text: 'Choose a stream' }));
  const name = h('input', { id: 'cg-name', type: 'text', required: true, pattern: '[A-Za-z0-9._-]{1,128}',
    placeholder: 'billing', 'data-testid': 'create-group-name' });
  const attempts = h('input', { id: 'cg-attempts', type: 'number', min: 1, max: 1000000, placeholder: '5',
    'data-testid': 'create-group-attempts' });
  const retry = h('input', { id: 'cg-backoff', type: 'text', placeholder: '1000, 5000, 30000', 'data-testid': 'create-group-backoff' });
  const ordering = h('select', { id: 'cg-ordering', 'data-testid': 'create-group-ordering' },
    h('option', { value: 'none', text: 'none: any delivery any time' }),
    h('option', { value: 'key', text: 'key: one per key at a time' }),
    h('option', { value: 'partition', text: 'partition: one per partition at a time' }));
  const exhausted = h('select', { id: 'cg-exhausted', 'data-testid': 'create-group-exhausted' },
    h('option', { value: 'dead_letter', text: 'dead-letter the event' }),
    h('option', { value: 'quarantine', text: 'quarantine: park its key (needs an ordering)' }));
  const perKey = h('input', { id: 'cg-key-concurrency', type: 'number', min: 1, max: 10000, placeholder: 'no limit',
    'data-testid': 'create-group-key-concurrency' });
  const perSecond = h('input', { id: 'cg-key-rate', type: 'number', min: 0.0000116, max: 100000, step: 'any', placeholder: 'no limit',
    'data-testid': 'create-group-key-rate' });
  const burst = h('input', { id: 'cg-key-burst', type: 'number', min: 1, max: 100000, placeholder: '1',
    'data-testid': 'create-group-key-burst' });
  const start = startPoint('cg');
  const submit = h('button', { type: 'submit', class: 'primary', 'data-testid': 'create-group', text: 'Create group' });
  const form = h('form', {},
    h('p', { class: 'muted small', text: 'Every group sees every event of its stream, with delivery state of its own; its cursor and frontier begin at the start point.' }),
    h('div', { class: 'field-row' },
      field('Stream', stream), field('Group name', name), field('Max attempts', attempts, 'default 5'),
      field('Ordering', ordering), field('When attempts run out', exhausted)),
    h('div', { class: 'field-row' },
      field('At most per key', perKey, 'deliveries out at once, any order; ordering none'),
      field('Claims per key a second', perSecond, 'retries included; 0.5 is one every 2 s'),
      field('Burst per key', burst, 'claims at once after a quiet spell; default 1'),
      start.element, field('Retry backoff (ms, by attempt)', retry, 'optional; the last repeats')),
    errors, notice,
    h('div', { class: 'actions' }, submit));
  const section = h('details', { class: 'card', 'data-write': true, 'data-testid': 'create-group-section' },
    h('summary', { class: 'strong', text: 'Create a group…' }), form);

  section.addEventListener('toggle', async () => {
    if (!section.open) return;
    try {
      const { streams } = await api('GET', '/v1/streams');
      const chosen = stream.value;
      fill(stream, h('option', { value: '', text: streams.length ? 'Choose a stream' : 'No streams yet' }),
        streams.map((x) => h('option', { value: x.name, text: x.name, selected: x.name === chosen })));
      fill(errors);
    } catch (e) {
      fill(errors, errorBanner(e));
    }
  });
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    busy(submit, errors, notice, async () => {
      const body = { name: name.value.trim(), ordering: ordering.value, on_exhausted: exhausted.value, ...start.fields() };
      if (attempts.value !== '') body.max_attempts = Number(attempts.value);
      const flow = {};
      if (perKey.value !== '') flow.key_concurrency = Number(perKey.value);
      if (perSecond.value !== '') {
        flow.key_rate = { per_second: Number(perSecond.value) };
        if (burst.value !== '') flow.key_rate.burst = Number(burst.value);
      }
      if (Object.keys(flow).length) body.flow = flow;
      const schedule = backoff(retry.value);
      if (schedule) body.retry_backoff_ms = schedule;
      const created = await api('POST', `/v1/streams/${seg(stream.value)}/groups`, { json: body });
      name.value = '';
      await onCreated();
      const f = created.flow || {};
      const perKeyText = (f.key_concurrency ? `, at most ${f.key_concurrency} per key` : '')
        + (f.key_rate ? `, ${f.key_rate.per_second} per key a second (burst ${f.key_rate.burst})` : '');
      return `Created group ${created.name} on ${created.stream} (${created.max_attempts} attempts, ordering ${created.ordering}${perKeyText}).`;
    });
  });
  return section;
}

export function list(root) {
  const errors = h('div');
  const { table: tableEl, body } = table(
    [['Stream'], ['Group'], ['Lag', 'num'], ['Pending', 'num'], ['In flight', 'num'],
      ['Waiting retry', 'num'], ['Dead letters', 'num'], ['Oldest unacked', 'num']],
    { 'data-testid': 'groups-table' });

  async function refresh() {
    let rows;
    try {
      // One request for every group of every stream (docs/http.md).
      ({ groups: rows } = await api('GET', '/v1/groups'));
      rows.forEach(sample);
      fill(errors);
    } catch (e) {
      fill(errors, errorBanner(e));
      return;
    }
    if (!rows.length) {
      fill(body, emptyRow(8, 'No consumer groups yet. Deploy a handler, or create a group with the form below or POST /v1/streams/{stream}/groups.'));
      return;
    }
    if (body.querySelector('.empty-row')) fill(body);
    setRows(body, rows, (i) => `${i.stream}/${i.group}`, (i) => h('tr', { 'data-testid': `group-row-${i.stream}-${i.group}` },
      td(h('span', { class: 'mono', text: i.stream })),
      td(h('a', { href: groupLink(i.stream, i.group), class: 'strong', text: i.group })),
      td(h('span', { 'data-testid': 'row-lag', text: num(i.lag.lag) }), 'num'),
      td(num(i.lag.pending), 'num'),
      td(num(i.lag.inflight), 'num'),
      td(num(i.lag.waiting_retry), 'num'),
      td(i.dead_letters ? h('span', { class: 'bad', text: num(i.dead_letters) }) : '0', 'num'),
      td(duration(i.lag.oldest_unacked_age_ms), 'num')));
  }

  fill(root, heading('Groups', 'Consumer groups of every stream: how far behind each is.'),
    errors, h('div', { class: 'card' }, tableEl), createGroupForm(refresh));
  return { refresh };
}

/** Replaying (POST …/replay, docs/groups.md#replay): exactly one selector. */
function replaySection(path, done) {
  const errors = h('div');
  const notice = h('div', { role: 'status', class: 'notice-slot' });
  const which = h('select', { id: 'rp-which', 'data-testid': 'replay-which' },
    h('option', { value: 'all', text: 'Everything (from the first sequence)' }),
    h('option', { value: 'sequence', text: 'After a sequence' }),
    h('option', { value: 'time', text: 'From a time' }),
    h('option', { value: 'query', text: 'The events a filter matches' }),
    h('option', { value: 'ids', text: 'These events' }));
  const sequence = h('input', { id: 'rp-sequence', type: 'number', min: 0, placeholder: '41', 'data-testid': 'replay-sequence' });
  const from = h('input', { id: 'rp-from', type: 'datetime-local', step: 1, 'data-testid': 'replay-from' });
  const where = h('textarea', { id: 'rp-where', rows: 1, spellcheck: 'false', placeholder: '{"type": "order.placed"}', 'data-testid': 'replay-where' });
  const ids = h('input', { id: 'rp-ids', type: 'text', placeholder: 'o-1, o-2', 'data-testid': 'replay-ids' });
  const partitions = h('input', { id: 'rp-partitions', type: 'text', placeholder: 'all', 'data-testid': 'replay-partitions' });
  const fields = {
    sequence: field('After sequence (exclusive)', sequence),
    time: field('From (your time zone)', from),
    query: h('div', { class: 'field grow' }, h('label', { for: 'rp-where', text: 'Where (JSON, as the event browser takes it)' }), where),
    ids: field('Event ids (comma-separated)', ids),
    partitions: field('Partitions', partitions, 'e.g. 0, 2; default all'),
  };
  const show = () => {
    fields.sequence.hidden = which.value !== 'sequence';
    fields.time.hidden = which.value !== 'time';
    fields.query.hidden = which.value !== 'query';
    fields.ids.hidden = which.value !== 'ids';
    fields.partitions.hidden = !['all', 'sequence', 'time'].includes(which.value);
  };
  which.addEventListener('change', show);
  show();
  const submit = h('button', { type: 'submit', class: 'primary', 'data-testid': 'replay', text: 'Replay' });
  const form = h('form', {},
    h('p', { class: 'muted small', text: 'Sends events through this group again: acked and dead-lettered deliveries come back, attempts are kept, the frontier moves back. Nothing else changes. (Dead letters alone: Redrive, above.)' }),
    h('div', { class: 'field-row' }, field('Replay', which), fields.sequence, fields.time, fields.ids, fields.partitions, fields.query),
    errors, notice,
    h('div', { class: 'actions' }, submit));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    busy(submit, errors, notice, async () => {
      const body = {};
      if (which.value === 'all') body.from_sequence = 0;
      if (which.value === 'sequence') {
        if (sequence.value === '') throw new Error('Give the sequence to replay after.');
        body.from_sequence = Number(sequence.value);
      }
      if (which.value === 'time') {
        body.from = isoOf(from.value);
        if (!body.from) throw new Error('Give the time to replay from.');
      }
      if (which.value === 'query') {
        const filter = jsonObject(where.value, 'Where');
        if (!filter) throw new Error('Give a filter (JSON).');
        body.query = { where: filter };
      }
      if (which.value === 'ids') {
        body.event_ids = ids.value.split(',').map((x) => x.trim()).filter(Boolean);
        if (!body.event_ids.length) throw new Error('Give the event ids.');
      }
      if (!fields.partitions.hidden) {
        const chosen = numberList(partitions.value, 'Partitions');
        if (chosen) body.partitions = chosen;
      }
      const answer = await api('POST', `${path}/replay`, { json: body });
      await done();
      return `Replay: ${num(answer.reopened)} ${answer.reopened === 1 ? 'delivery' : 'deliveries'} re-opened.`;
    });
  });
  return h('details', { class: 'card', 'data-write': true, 'data-testid': 'replay-section' },
    h('summary', { class: 'strong', text: 'Replay events…' }), form);
}

/**
 * Resetting (POST …/reset, docs/groups.md#reset): `confirm: true` once the
 * group's name is typed, as `rheo group reset … --confirm`.
 */
function resetSection(group, path, done) {
  const errors = h('div');
  const notice = h('div', { role: 'status', class: 'notice-slot' });
  const start = startPoint('rs');
  const partitions = h('input', { id: 'rs-partitions', type: 'text', placeholder: 'all', 'data-testid': 'reset-partitions' });
  const ordering = h('select', { id: 'rs-ordering', 'data-testid': 'reset-ordering' },
    h('option', { value: '', text: 'unchanged' }),
    h('option', { value: 'none', text: 'none' }),
    h('option', { value: 'key', text: 'key' }),
    h('option', { value: 'partition', text: 'partition' }));
  const perKey = h('input', { id: 'rs-key-concurrency', type: 'text', placeholder: 'unchanged', 'data-testid': 'reset-key-concurrency' });
  const partitionsField = field('Partitions', partitions, 'e.g. 0, 2; default all');
  const whole = () => { partitionsField.hidden = ordering.value !== '' || perKey.value.trim() !== ''; };
  ordering.addEventListener('change', whole);
  perKey.addEventListener('input', whole);
  const button = h('button', { type: 'submit', class: 'danger', 'data-testid': 'reset', text: `Reset group ${group}` });
  const confirmation = typedConfirmation('reset-group-name', group, button);
  const form = h('form', {},
    h('p', { text: 'Forgets which events the group acked, retried or dead-lettered in the chosen partitions, and starts them again at the start point; leases held there become stale and attempts start again at 1. A new ordering or per-key limit resets every partition. This cannot be undone.' }),
    h('div', { class: 'field-row' }, start.element, partitionsField, field('Ordering from now on', ordering),
      field('At most per key from now on', perKey, 'a number, or none')),
    h('div', { class: 'field-row' }, confirmation.element),
    errors, notice,
    h('div', { class: 'actions' }, button));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!confirmation.confirmed()) return;
    await busy(button, errors, notice, async () => {
      const body = { confirm: true, ...start.fields() };
      const chosen = partitionsField.hidden ? undefined : numberList(partitions.value, 'Partitions');
      if (chosen) body.partitions = chosen;
      if (ordering.value) body.ordering = ordering.value;
      const limit = perKey.value.trim();
      if (limit) body.flow = limit === 'none' ? {} : { key_concurrency: Number(limit) };
      await api('POST', `${path}/reset`, { json: body });
      await done();
      return `Reset group ${group}${body.ordering ? ` (ordering ${body.ordering})` : ''}: it starts again${chosen ? ` in partition${chosen.length === 1 ? '' : 's'} ${chosen.join(', ')}` : ''}.`;
    });
    confirmation.clear();
  });
  return h('details', { class: 'card danger-zone', 'data-write': true, 'data-testid': 'reset-section' },
    h('summary', { text: 'Reset this group…' }), form);
}

/** Rows of the in-flight table per page. */
const LEASE_PAGE = 25;

/**
 * What is out (GET …/leases, docs/groups.md#what-is-out-leases): the
 * group's leases, paged by the route's `after` cursor and refreshed with
 * the page. Expired leases stay until a fetch takes them again.
 */
function inFlightSection(path) {
  const { table: leaseTable, body } = table(
    [['Lease'], ['Event'], ['Partition', 'num'], ['Sequence', 'num'], ['Holder'], ['Attempt', 'num'], ['Age', 'num'], ['Expires']],
    { 'data-testid': 'leases-table' });
  const info = h('span', { class: 'muted', 'data-testid': 'leases-info' });
  const prev = h('button', { type: 'button', class: 'secondary', disabled: true, 'data-testid': 'leases-prev', text: '← Previous page' });
  const next = h('button', { type: 'button', class: 'secondary', disabled: true, 'data-testid': 'leases-next', text: 'Next page →' });
  const errors = h('div');
  const pager = h('div', { class: 'pager', hidden: true }, prev, next);
  const section = h('section', { class: 'card', 'data-testid': 'leases-section' },
    h('div', { class: 'section-head' }, h('h2', { text: 'In flight' }), info),
    h('p', { class: 'muted small', text: 'The leases the group has out: who holds which delivery, on which attempt, since when and until when. An expired lease stays its holder’s until a fetch claims the delivery again.' }),
    errors, leaseTable, pager);

  // afters[i] is the cursor that fetched page i (null for the first).
  let afters = [null];
  let page = 0;

  async function load() {
    const query = new URLSearchParams({ limit: String(LEASE_PAGE) });
    if (afters[page]) query.set('after', afters[page]);
    let answer;
    try {
      answer = await api('GET', `${path}/leases?${query}`);
      fill(errors);
    } catch (e) {
      fill(errors, errorBanner(e));
      return;
    }
    const leases = answer.leases || [];
    if (!leases.length && page > 0) {
      // Settled since: back to the page before.
      page -= 1;
      afters = afters.slice(0, page + 1);
      await load();
      return;
    }
    if (!leases.length) {
      fill(body, emptyRow(8, 'Nothing in flight: no delivery is leased now.'));
    } else {
      if (body.querySelector('.empty-row')) fill(body);
      setRows(body, leases, (l) => l.lease_id, (l) => h('tr', { 'data-testid': `lease-${l.event_id}`, class: l.expired ? 'expired' : undefined },
        td(h('span', { class: 'mono', title: l.lease_id, text: l.lease_id.slice(0, 8) })),
        td(h('span', { class: 'mono', text: l.event_id })),
        td(num(l.partition), 'num'),
        td(num(l.sequence), 'num'),
        td(h('span', { class: 'mono', 'data-testid': 'lease-holder', text: l.consumer_id })),
        td(h('span', { 'data-testid': 'lease-attempt', text: num(l.attempt) }), 'num'),
        td(duration(l.age_ms), 'num'),
        td(l.consumer_id === QUARANTINE
          ? h('span', { class: 'bad', title: l.reason || '', 'data-testid': 'lease-expiry', text: 'never: parked' })
          : l.expired
          ? h('span', { class: 'bad', title: l.expires_at, 'data-testid': 'lease-expiry', text: 'expired' })
          : h('span', { title: l.expires_at, 'data-testid': 'lease-expiry', text: `in ${duration(l.expires_in_ms)}` }))));
    }
    if (answer.next) afters[page + 1] = answer.next;
    else afters = afters.slice(0, page + 1);
    prev.disabled = page === 0;
    next.disabled = !answer.next;
    // One page only: no pager.
    pager.hidden = page === 0 && !answer.next;
    info.textContent = leases.length
      ? `page ${page + 1} · ${num(leases.length)} lease${leases.length === 1 ? '' : 's'}`
      : '';
  }
  prev.addEventListener('click', () => { if (page > 0) { page -= 1; load(); } });
  next.addEventListener('click', () => { if (afters[page + 1]) { page += 1; load(); } });
  return { section, refresh: load };
}

/** The consumer that holds a quarantined head (docs/groups.md#quarantine). */
const QUARANTINE = 'rheo:quarantine';

/** Parked keys of a group that quarantines, each with Resume and Skip head. */
function parkedSection(path, report) {
  const { table: parkedTable, body } = table(
    [['Key'], ['Partition', 'num'], ['Head'], ['Sequence', 'num'], ['Attempts', 'num'], ['Last error'], ['Parked'], ['']],
    { 'data-testid': 'parked-table' });
  const section = h('section', { class: 'card', 'data-testid': 'parked-section', hidden: true },
    h('h2', { text: 'Parked keys' }),
    h('p', { class: 'muted small', text: 'A key whose head ran out of attempts waits here, in order, while the rest of the group flows. Resume hands the head out again with fresh attempts, then the rest of the key; Skip head dead-letters the head and goes on with the key’s next event.' }),
    parkedTable);

  async function release(body, what) {
    try {
      const answer = await api('POST', `${path}/quarantine/release`, { json: { confirm: true, ...body } });
      report(null, `${what}: ${num(answer.released.length)} released${body.skip_head ? ', head dead-lettered' : ''}.`);
    } catch (e) {
      report(e);
    }
  }

  function show(info, parked) {
    section.hidden = info.on_exhausted !== 'quarantine';
    if (section.hidden) return;
    if (!parked.length) {
      fill(body, emptyRow(8, 'No key is parked.'));
      return;
    }
    if (body.querySelector('.empty-row')) fill(body);
    const name = (k) => (k.key === null ? `partition ${k.partition}` : k.key);
    const which = (k) => (k.key === null ? { event_ids: [k.event_id] } : { keys: [k.key] });
    setRows(body, parked, (k) => k.event_id, (k) => h('tr', { 'data-testid': `parked-${name(k)}` },
      td(h('span', { class: 'mono', text: k.key === null ? '(partition)' : k.key })),
      td(num(k.partition), 'num'),
      td(h('span', { class: 'mono', text: k.event_id })),
      td(num(k.sequence), 'num'),
      td(num(k.attempt), 'num'),
      td(h('span', { class: 'reason', text: k.reason })),
      td(time(k.parked_at)),
      td([
        h('button', { type: 'button', class: 'secondary small', 'data-write': true, 'aria-label': `Resume ${name(k)}`,
          onclick: () => release(which(k), `Key ${name(k)}`), text: 'Resume' }),
        ' ',
        h('button', { type: 'button', class: 'secondary small', 'data-write': true, 'aria-label': `Skip the head of ${name(k)}`,
          onclick: () => release({ ...which(k), skip_head: true }, `Key ${name(k)}`), text: 'Skip head' }),
      ], 'row-actions')));
  }
  return { section, show };
}

export function detail(root, [stream, group]) {
  const path = groupPath(stream, group);
  const inFlight = inFlightSection(path);
  const errors = h('div');
  const actionErrors = h('div');
  const notice = h('div', { role: 'status', class: 'notice-slot' });
  const stats = h('div', { class: 'stats' });
  const plotBox = h('div', { class: 'plots' });
  const consumers = h('p', { class: 'muted' });
  const { table: partTable, body: partBody } = table(
    [['Partition', 'num'], ['Frontier', 'num'], ['First unacked (hole)', 'num'], ['Next to hand out', 'num'],
      ['High watermark', 'num'], ['Lag', 'num']],
    { 'data-testid': 'partitions-table' });
  const { table: deadTable, body: deadBody } = table(
    [['Event'], ['Partition', 'num'], ['Sequence', 'num'], ['Attempts', 'num'], ['Reason'], ['Dead-lettered'], ['']],
    { 'data-testid': 'dead-letters-table' });
  const redriveAll = h('button', { type: 'button', class: 'secondary', 'data-write': true, 'data-testid': 'redrive-all', text: 'Redrive all', hidden: true });
  const deadMore = h('p', { class: 'muted small' });
  const parked = parkedSection(path, async (e, text) => {
    fill(actionErrors, e ? errorBanner(e) : null);
    fill(notice, e ? null : h('div', { class: 'notice', 'data-testid': 'notice', text }));
    await refresh();
  });

  fill(root,
    heading(['Group ', h('span', { class: 'mono', text: group })],
      ['on stream ', h('a', { href: `#/streams/${encodeURIComponent(stream)}/events`, class: 'mono', text: stream })],
      h('a', { href: '#/groups', class: 'button-link', text: '← Groups' })),
    errors, actionErrors, notice, stats, consumers, plotBox,
    h('section', { class: 'card' }, h('h2', { text: 'Partitions' }),
      h('p', { class: 'muted small', text: 'Everything up to the frontier is settled; the hole is the first sequence after it still unsettled, which holds the frontier back.' }),
      partTable),
    inFlight.section,
    parked.section,
    h('section', { class: 'card' },
      h('div', { class: 'section-head' }, h('h2', { text: 'Dead letters' }), redriveAll),
      deadTable, deadMore),
    replaySection(path, () => refresh()),
    resetSection(group, path, () => refresh()),
    deleteSection({ what: 'group', name: group, path, afterwards: '#/groups',
      consequence: `Its cursors, leases and dead letters go; the stream ${stream} and its other groups stay.` }));

  async function redrive(body, what) {
    fill(actionErrors);
    try {
      const answer = await api('POST', `${path}/dead-letters/redrive`, { json: body });
      fill(notice, h('div', { class: 'notice', 'data-testid': 'notice', text: `${what}: ${num(answer.redriven)} redriven, back in the queue.` }));
    } catch (e) {
      fill(notice);
      fill(actionErrors, errorBanner(e));
    }
    await refresh();
  }
  redriveAll.addEventListener('click', () => redrive({ all: true }, 'All dead letters'));

  // The plots start from the server's samples (samples.js), read once.
  let seeding = null;

  async function refresh() {
    if (!seeding) seeding = seedFromServer({ stream, group });
    await seeding;
    let info;
    let dead;
    let held = [];
    let handlers = null;
    try {
      [info, dead] = await Promise.all([api('GET', path), api('GET', `${path}/dead-letters?limit=100`)]);
      held = info.on_exhausted === 'quarantine' ? (await api('GET', `${path}/quarantine`)).parked : [];
      handlers = await api('GET', '/v1/handlers').catch(() => null);
      fill(errors);
    } catch (e) {
      fill(errors, errorBanner(e));
      return;
    }
    sample(info);
    const lag = info.lag;
    fill(stats,
      stat('Lag', num(lag.lag), 'group-lag', 'events after the frontier'),
      stat('Pending', num(lag.pending), 'group-pending', 'never handed out'),
      stat('In flight', num(lag.inflight), 'group-inflight', 'leased now'),
      stat('Waiting retry', num(lag.waiting_retry), 'group-waiting', 'nacked, not yet due'),
      stat('Dead letters', num(info.dead_letters), 'group-dead-letters', `after ${info.max_attempts} attempts or a reject`),
      stat('Oldest unacked', duration(lag.oldest_unacked_age_ms), 'group-oldest', 'age'),
      info.flow && info.flow.key_concurrency
        ? stat('Per key', num(info.flow.key_concurrency), 'group-key-concurrency', 'out at once at most')
        : null,
      info.flow && info.flow.key_rate
        ? stat('Per key a second', String(info.flow.key_rate.per_second), 'group-key-rate',
          `claims at most, burst ${info.flow.key_rate.burst}`)
        : null,
      info.on_exhausted === 'quarantine'
        ? stat('Parked keys', num(held.length), 'group-parked', 'waiting for a release')
        : null,
      info.skipped_by_retention
        ? stat('Skipped by retention', num(info.skipped_by_retention), 'group-skipped', 'removed before settled')
        : null);
    fill(plotBox, plots(stream, group));
    parked.show(info, held);

    const mine = handlers ? handlers.handlers.filter((x) => x.stream === stream && x.group === group) : [];
    fill(consumers, mine.length
      ? ['Consumed by ', mine.map((x, i) => [i ? ', ' : '', h('a', { href: `#/handlers/${encodeURIComponent(x.name)}`, text: x.name }), ` (${x.status})`])]
      : 'No handler consumes this group here; clients fetch and settle it over the API.');

    const parts = Object.entries(lag.partitions).map(([p, v]) => ({ p: Number(p), ...v, cursor: info.cursors[p] }));
    setRows(partBody, parts, (x) => x.p, (x) => h('tr', {},
      td(num(x.p), 'num'),
      td(num(x.frontier), 'num'),
      td(x.frontier < x.high_watermark ? h('span', { class: 'hole', text: num(x.frontier + 1) }) : h('span', { class: 'muted', text: 'none' }), 'num'),
      td(h('span', { 'data-testid': `partition-cursor-${x.p}`, text: num(x.cursor) }), 'num'),
      td(num(x.high_watermark), 'num'),
      td(h('span', { 'data-testid': `partition-lag-${x.p}`, text: num(x.lag) }), 'num')));

    const letters = dead.dead_letters || [];
    redriveAll.hidden = letters.length < 2;
    if (!letters.length) {
      fill(deadBody, emptyRow(7, 'No dead letters. A delivery lands here when it is rejected or runs out of attempts.'));
    } else {
      if (deadBody.querySelector('.empty-row')) fill(deadBody);
      setRows(deadBody, letters, (d) => d.event_id, (d) => h('tr', { 'data-testid': `dead-letter-${d.event_id}` },
        td(d.event
          ? h('details', {}, h('summary', { class: 'mono', text: d.event_id }),
            h('pre', { class: 'json', text: JSON.stringify(d.event, null, 2) }))
          : [h('span', { class: 'mono', text: d.event_id }), ' ',
            h('span', { class: 'muted small', text: '(event removed by retention)' })]),
        td(num(d.partition), 'num'),
        td(num(d.sequence), 'num'),
        td(num(d.attempt), 'num'),
        td(h('span', { class: 'reason', text: d.reason })),
        td(time(d.dead_lettered_at)),
        td(h('button', { type: 'button', class: 'secondary small', 'data-write': true, 'data-testid': 'redrive',
          'aria-label': `Redrive ${d.event_id}`, onclick: () => redrive({ event_ids: [d.event_id] }, `Event ${d.event_id}`), text: 'Redrive' }), 'row-actions')));
    }
    deadMore.textContent = dead.next ? `Showing the first ${num(letters.length)}; redrive them to see the rest.` : '';
    await inFlight.refresh();
  }

  return { refresh };
}
