// Consumer groups (docs/groups.md): every group with its lag; one group's
// lag per partition, frontier and hole, pending work, dead letters with
// redrive, and a plot of lag and throughput over the last minutes.

import { api, seg } from '../api.js';
import { h, fill, num, duration, time, table, setRows, td, emptyRow, errorBanner, stat, heading } from '../dom.js';
import { record, series, rate } from '../history.js';
import { chart } from '../plot.js';
import { deleteSection } from '../delete.js';

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
  return [
    chart('Lag', [{ label: 'lag', kind: 'a', points: series(key, 'lag') }], 'events', 'plot-lag'),
    chart('Throughput', [
      { label: 'appended', kind: 'b', points: rate(key, 'appended') },
      { label: 'settled', kind: 'c', points: rate(key, 'settled') },
    ], 'events / s', 'plot-throughput'),
  ];
}

export function list(root) {
  const errors = h('div');
  const { table: tableEl, body } = table(
    [['Stream'], ['Group'], ['Lag', 'num'], ['Pending', 'num'], ['In flight', 'num'],
      ['Waiting retry', 'num'], ['Dead letters', 'num'], ['Oldest unacked', 'num']],
    { 'data-testid': 'groups-table' });
  fill(root, heading('Groups', 'Consumer groups of every stream: how far behind each is.'),
    errors, h('div', { class: 'card' }, tableEl));

  return {
    async refresh() {
      const rows = [];
      try {
        const { streams } = await api('GET', '/v1/streams');
        const lists = await Promise.all(streams.map((s) => api('GET', `/v1/streams/${seg(s.name)}/groups`)));
        const infos = await Promise.all(lists.flatMap((l) => l.groups).map((g) => api('GET', groupPath(g.stream, g.name))));
        for (const info of infos) {
          sample(info);
          rows.push(info);
        }
        fill(errors);
      } catch (e) {
        fill(errors, errorBanner(e));
        return;
      }
      if (!rows.length) {
        fill(body, emptyRow(8, 'No consumer groups yet. Deploy a handler, or create a group with POST /v1/streams/{stream}/groups.'));
        return;
      }
      if (body.querySelector('.empty-row')) fill(body);
      setRows(body, rows, (i) => `${i.stream}/${i.group}`, (i) => h('tr', { 'data-testid': `group-row-${i.stream}-${i.group}` },
        td(h('span', { class: 'mono', text: i.stream })),
        td(h('a', { href: groupLink(i.stream, i.group), class: 'strong', text: i.group })),
        td(num(i.lag.lag), 'num'),
        td(num(i.lag.pending), 'num'),
        td(num(i.lag.inflight), 'num'),
        td(num(i.lag.waiting_retry), 'num'),
        td(i.dead_letters ? h('span', { class: 'bad', text: num(i.dead_letters) }) : '0', 'num'),
        td(duration(i.lag.oldest_unacked_age_ms), 'num')));
    },
  };
}

export function detail(root, [stream, group]) {
  const path = groupPath(stream, group);
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

  fill(root,
    heading(['Group ', h('span', { class: 'mono', text: group })],
      ['on stream ', h('a', { href: `#/streams/${encodeURIComponent(stream)}/events`, class: 'mono', text: stream })],
      h('a', { href: '#/groups', class: 'button-link', text: '← Groups' })),
    errors, actionErrors, notice, stats, consumers, plotBox,
    h('section', { class: 'card' }, h('h2', { text: 'Partitions' }),
      h('p', { class: 'muted small', text: 'Everything up to the frontier is settled; the hole is the first sequence after it still unsettled, which holds the frontier back.' }),
      partTable),
    h('section', { class: 'card' },
      h('div', { class: 'section-head' }, h('h2', { text: 'Dead letters' }), redriveAll),
      deadTable, deadMore),
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

  async function refresh() {
    let info;
    let dead;
    let handlers = null;
    try {
      [info, dead] = await Promise.all([api('GET', path), api('GET', `${path}/dead-letters?limit=100`)]);
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
      info.skipped_by_retention
        ? stat('Skipped by retention', num(info.skipped_by_retention), 'group-skipped', 'removed before settled')
        : null);
    fill(plotBox, plots(stream, group));

    const mine = handlers ? handlers.handlers.filter((x) => x.stream === stream && x.group === group) : [];
    fill(consumers, mine.length
      ? ['Consumed by ', mine.map((x, i) => [i ? ', ' : '', h('a', { href: `#/handlers/${encodeURIComponent(x.name)}`, text: x.name }), ` (${x.status})`])]
      : 'No handler consumes this group here; clients fetch and settle it over the API.');

    const parts = Object.entries(lag.partitions).map(([p, v]) => ({ p: Number(p), ...v, cursor: info.cursors[p] }));
    setRows(partBody, parts, (x) => x.p, (x) => h('tr', {},
      td(num(x.p), 'num'),
      td(num(x.frontier), 'num'),
      td(x.frontier < x.high_watermark ? h('span', { class: 'hole', text: num(x.frontier + 1) }) : h('span', { class: 'muted', text: 'none' }), 'num'),
      td(num(x.cursor), 'num'),
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
  }

  return { refresh };
}
