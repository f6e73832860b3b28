// WebAssembly handlers (docs/handlers.md): every handler with its version,
// digest, status and counters; one handler's versions, live logs, a plot,
// and the buttons to deploy, swap the module, roll back, pause and resume;
// its canary, dry runs and deploy history (releases.js).

import { api, seg } from '../api.js';
import { h, fill, num, time, table, setRows, td, emptyRow, errorBanner, stat, heading } from '../dom.js';
import { record, series, rate, seededCount } from '../history.js';
import { chart } from '../plot.js';
import { readEvents } from '../sse.js';
import { groupLink } from './groups.js';
import { releases, dryRun } from './releases.js';
import { seedFromServer } from '../samples.js';
import { busy, field } from '../forms.js';

const COUNTERS = [
  ['processed', 'Processed'], ['acked', 'Acked'], ['retried', 'Retried'], ['rejected', 'Rejected'],
  ['trapped', 'Trapped'], ['timed_out', 'Timed out'], ['lost', 'Lost'], ['settle_errors', 'Settle errors'],
  ['inflight', 'In flight'],
];

const handlerPath = (name) => `/v1/handlers/${seg(name)}`;
const handlerLink = (name) => `#/handlers/${encodeURIComponent(name)}`;

function badge(status) {
  return h('span', { class: `badge ${status}`, 'data-testid': 'handler-status', text: status });
}

/** The first 12 hex digits, the whole digest as a tooltip. */
function shortDigest(digest) {
  return digest ? h('span', { class: 'mono', title: `sha256:${digest}`, text: digest.slice(0, 12) }) : h('span', { class: 'muted', text: '–' });
}

function failures(c) {
  return c.trapped + c.timed_out + c.lost + c.settle_errors;
}

function sample(view) {
  record(`handler:${view.name}`, { processed: view.counters.processed, acked: view.counters.acked });
}

export function list(root) {
  const errors = h('div');
  const actionErrors = h('div');
  const notice = h('div', { role: 'status', class: 'notice-slot' });
  const { table: tableEl, body } = table(
    [['Handler'], ['Stream / group'], ['Status'], ['Version', 'num'], ['Digest'], ['Processed', 'num'],
      ['Acked', 'num'], ['Retried', 'num'], ['Rejected', 'num'], ['Failures', 'num'], ['In flight', 'num']],
    { 'data-testid': 'handlers-table' });

  const name = h('input', { id: 'd-name', type: 'text', required: true, pattern: '[A-Za-z0-9._-]{1,128}', placeholder: 'billing' });
  const stream = h('select', { id: 'd-stream', required: true }, h('option', { value: '', text: 'Choose a stream' }));
  const group = h('input', { id: 'd-group', type: 'text', required: true, placeholder: 'billing', pattern: '[A-Za-z0-9._-]{1,128}' });
  const concurrency = h('input', { id: 'd-concurrency', type: 'number', min: 1, placeholder: '1' });
  const extra = h('textarea', { id: 'd-extra', rows: 1, spellcheck: 'false', placeholder: '{"config": {"key": "value"}}' });
  const module = h('input', { id: 'd-module', type: 'file', accept: '.wasm,application/wasm', required: true, 'data-testid': 'deploy-file' });
  const submit = h('button', { type: 'submit', class: 'primary', 'data-testid': 'deploy', text: 'Deploy' });
  const form = h('form', { class: 'card', 'data-write': true, 'aria-labelledby': 'deploy-title' },
    h('h2', { id: 'deploy-title', text: 'Deploy a handler' }),
    h('p', { class: 'muted small', text: 'A WebAssembly component (.wasm) and where it consumes from; the group is created if missing. Deploying an existing name replaces its manifest and module.' }),
    h('div', { class: 'field-row' },
      field('Name', name), field('Stream', stream), field('Group', group), field('Concurrency', concurrency),
      field('Module (.wasm)', module)),
    h('div', { class: 'field-row' },
      h('div', { class: 'field grow' }, h('label', { for: 'd-extra', text: 'More manifest fields (JSON, optional)' }), extra)),
    h('div', { class: 'actions' }, submit));

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    busy(submit, actionErrors, notice, async () => {
      const manifest = { stream: stream.value, group: group.value.trim() };
      if (concurrency.value) manifest.concurrency = Number(concurrency.value);
      if (extra.value.trim()) {
        let more;
        try {
          more = JSON.parse(extra.value);
        } catch (err) {
          throw new Error(`More manifest fields is not JSON: ${err.message}`);
        }
        Object.assign(manifest, more);
      }
      const data = new FormData();
      data.append('manifest', new Blob([JSON.stringify(manifest)], { type: 'application/json' }), 'manifest.json');
      data.append('module', module.files[0], module.files[0].name);
      const view = await api('PUT', handlerPath(name.value.trim()), { body: data });
      await refresh();
      return `Deployed ${view.name} version ${view.version}.`;
    });
  });

  fill(root, heading('Handlers', 'WebAssembly components consuming a group: each delivery’s outcome becomes an ack, a retry or a dead letter.'),
    errors, actionErrors, notice, h('div', { class: 'card' }, tableEl), form);

  let streamNames = '';
  async function refresh() {
    let handlers;
    try {
      const [answer, streams] = await Promise.all([api('GET', '/v1/handlers'), api('GET', '/v1/streams')]);
      handlers = answer.handlers;
      const names = streams.streams.map((s) => s.name);
      if (names.join('\n') !== streamNames) {
        streamNames = names.join('\n');
        const chosen = stream.value;
        fill(stream, h('option', { value: '', text: names.length ? 'Choose a stream' : 'No streams yet' }),
          names.map((n) => h('option', { value: n, text: n, selected: n === chosen })));
      }
      fill(errors);
    } catch (e) {
      fill(errors, errorBanner(e));
      return;
    }
    handlers.forEach(sample);
    if (!handlers.length) {
      fill(body, emptyRow(11, 'No handlers deployed. Deploy one with the form below, or with `rheo handler deploy`.'));
      return;
    }
    if (body.querySelector('.empty-row')) fill(body);
    setRows(body, handlers, (x) => x.name, (x) => h('tr', { 'data-testid': `handler-row-${x.name}` },
      td(h('a', { href: handlerLink(x.name), class: 'strong', text: x.name })),
      td([h('span', { class: 'mono', text: x.stream }), ' / ', h('a', { href: groupLink(x.stream, x.group), class: 'mono', text: x.group })]),
      td(badge(x.status)),
      td(num(x.version), 'num'),
      td(shortDigest(x.digest)),
      td(num(x.counters.processed), 'num'),
      td(num(x.counters.acked), 'num'),
      td(num(x.counters.retried), 'num'),
      td(num(x.counters.rejected), 'num'),
      td(failures(x.counters) ? h('span', { class: 'bad', text: num(failures(x.counters)) }) : '0', 'num'),
      td(num(x.counters.inflight), 'num')));
  }
  return { refresh };
}

/** The live log panel: follows the logs as server-sent events. */
function logPanel(name) {
  const box = h('ol', { class: 'logs', 'data-testid': 'logs', 'aria-live': 'off' });
  const state = h('p', { class: 'muted small', 'data-testid': 'logs-state', text: 'connecting…' });
  const panel = h('section', { class: 'card' },
    h('div', { class: 'section-head' }, h('h2', { text: 'Live logs' }), state), box);
  const controller = new AbortController();
  let lastSeq = -1;
  let count = 0;

  function add(item) {
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 24;
    if (box.querySelector('.empty')) box.replaceChildren();
    box.append(item);
    count += 1;
    while (box.children.length > 500) box.firstChild.remove();
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  function line(l) {
    if (typeof l.seq === 'number') {
      if (l.seq <= lastSeq) return;
      lastSeq = l.seq;
    }
    const where = l.event_id
      ? h('span', { class: 'log-event', title: `${l.stream ?? ''} partition ${l.partition ?? '?'} sequence ${l.sequence ?? '?'}` },
        `${l.event_id}${l.attempt ? ` #${l.attempt}` : ''}`)
      : null;
    const at = l.at ? new Date(l.at) : null;
    add(h('li', { class: `log ${l.level || ''}`, 'data-testid': 'log-line' },
      h('time', { datetime: l.at, title: l.at, text: at && !Number.isNaN(at.getTime()) ? at.toLocaleTimeString('en-GB', { hour12: false }) : '' }),
      h('span', { class: 'log-level', text: l.level || '' }),
      l.version ? h('span', { class: 'log-version', text: `v${l.version}` }) : null,
      where,
      h('span', { class: 'log-message', text: l.message })));
  }

  function unavailable(message) {
    state.textContent = 'logs unavailable';
    box.replaceChildren(h('li', { class: 'empty', 'data-testid': 'logs-unavailable', text: `Logs unavailable: ${message}` }));
  }

  const waitOrStop = (ms) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    controller.signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });

  async function follow() {
    while (!controller.signal.aborted) {
      let response;
      try {
        response = await api('GET', `${handlerPath(name)}/logs?follow=true&limit=200`,
          { raw: true, signal: controller.signal, headers: { Accept: 'text/event-stream' } });
      } catch (e) {
        if (controller.signal.aborted) return;
        if (e.status === 404 || e.status === 405 || e.status === 400) {
          unavailable(e.message);
          return;
        }
        state.textContent = `reconnecting: ${e.message}`;
        await waitOrStop(3000);
        continue;
      }
      const type = response.headers.get('content-type') || '';
      if (!type.includes('text/event-stream')) {
        // A server that ignores `follow`: show what it sent, then poll.
        const body = await response.json().catch(() => null);
        if (!body || !Array.isArray(body.lines)) {
          unavailable('the server sent no log lines');
          return;
        }
        return poll(body);
      }
      state.textContent = 'following';
      if (!count) box.replaceChildren(h('li', { class: 'empty', text: 'No log lines yet: they appear here as the handler writes them.' }));
      try {
        await readEvents(response, (ev) => {
          let data;
          try {
            data = JSON.parse(ev.data);
          } catch {
            return;
          }
          if (ev.event === 'line') line(data);
          else if (ev.event === 'gap') add(h('li', { class: 'log gap', text: `… ${num(data.missed)} lines missed (the server keeps only the last ones)` }));
        }, controller.signal);
      } catch {
        // The connection broke: follow again.
      }
      if (controller.signal.aborted) return;
      state.textContent = 'reconnecting…';
      await waitOrStop(1000);
    }
  }

  async function poll(first) {
    let body = first;
    state.textContent = 'updating every 2 s';
    while (!controller.signal.aborted) {
      if (!count && !body.lines.length) box.replaceChildren(h('li', { class: 'empty', text: 'No log lines yet.' }));
      body.lines.forEach(line);
      await waitOrStop(2000);
      if (controller.signal.aborted) return;
      try {
        body = await api('GET', `${handlerPath(name)}/logs?limit=200`, { signal: controller.signal });
      } catch (e) {
        if (controller.signal.aborted) return;
        state.textContent = `retrying: ${e.message}`;
        body = { lines: [] };
      }
    }
  }

  follow();
  return { panel, stop: () => controller.abort() };
}

export function detail(root, [name]) {
  const path = handlerPath(name);
  const errors = h('div');
  const actionErrors = h('div');
  const notice = h('div', { role: 'status', class: 'notice-slot' });
  const lastError = h('div');
  const stats = h('div', { class: 'stats' });
  const where = h('p', { class: 'muted' });
  const plotBox = h('div', { class: 'plots' });
  const { table: versionTable, body: versionBody } = table(
    [['Version'], ...COUNTERS.map(([, label]) => [label, 'num'])], { 'data-testid': 'versions-table' });

  const pause = h('button', { type: 'button', class: 'secondary', 'data-testid': 'pause', text: 'Pause' });
  const resume = h('button', { type: 'button', class: 'secondary', 'data-testid': 'resume', text: 'Resume' });
  const rollback = h('button', { type: 'button', class: 'secondary', 'data-testid': 'rollback', text: 'Roll back' });
  const file = h('input', { id: 'swap-file', type: 'file', accept: '.wasm,application/wasm', 'data-testid': 'swap-file' });
  const swap = h('button', { type: 'submit', class: 'primary', 'data-testid': 'swap', text: 'Swap module' });
  const swapForm = h('form', { class: 'swap' },
    h('div', { class: 'field' }, h('label', { for: 'swap-file', text: 'New module (.wasm)' }), file), swap);
  const logs = logPanel(name);
  const release = releases(name, { onChange: () => refresh() });

  fill(root,
    heading(['Handler ', h('span', { class: 'mono', text: name })], where,
      h('a', { href: '#/handlers', class: 'button-link', text: '← Handlers' })),
    errors, actionErrors, notice, release.errors, release.notice, lastError, stats,
    h('section', { class: 'card controls', 'data-write': true, 'aria-label': 'Actions' },
      h('div', { class: 'buttons' }, pause, resume, rollback), swapForm),
    release.canaryCard,
    plotBox,
    h('section', { class: 'card' }, h('h2', { text: 'Counters by version' }), versionTable),
    logs.panel,
    release.canaryForm,
    dryRun(name),
    release.historyCard);

  const action = (button, verb, done) => button.addEventListener('click', () => busy(button, actionErrors, notice, async () => {
    const view = await api('POST', `${path}/${verb}`);
    await refresh();
    return done(view);
  }));
  action(pause, 'pause', () => `Paused ${name}: deliveries stop after those in flight.`);
  action(resume, 'resume', () => `Resumed ${name}.`);
  action(rollback, 'rollback', (v) => `Rolled back ${name} to version ${v.version}.`);
  // While a canary runs, a rollback stops the canary (docs/handlers.md#canaries).
  swapForm.addEventListener('submit', (e) => {
    e.preventDefault();
    busy(swap, actionErrors, notice, async () => {
      if (!file.files.length) throw new Error('Choose a .wasm file first.');
      const view = await api('PUT', `${path}/module`, { body: file.files[0], type: 'application/wasm' });
      file.value = '';
      await refresh();
      return `Swapped ${name} to version ${view.version} (${view.digest.slice(0, 12)}).`;
    });
  });

  // The plots start from the server's samples (samples.js), read once.
  let seeding = null;

  async function refresh() {
    if (!seeding) seeding = seedFromServer({ handler: name });
    await seeding;
    let view;
    let lag = null;
    try {
      view = await api('GET', path);
      lag = await api('GET', `/v1/streams/${seg(view.stream)}/groups/${seg(view.group)}/lag`).catch(() => null);
      fill(errors);
    } catch (e) {
      fill(errors, errorBanner(e));
      return;
    }
    sample(view);
    if (lag) record(`group:${view.stream}/${view.group}`, { lag: lag.lag });
    fill(where, 'consumes ', h('span', { class: 'mono', text: view.stream }), ' as group ',
      h('a', { href: groupLink(view.stream, view.group), class: 'mono', text: view.group }));
    fill(lastError, view.last_error ? h('div', { class: 'error', role: 'alert', 'data-testid': 'last-error' }, `Last deploy or reload refused: ${view.last_error}`) : null);
    fill(stats,
      h('div', { class: 'stat' }, h('div', { class: 'stat-label', text: 'Status' }), h('div', { class: 'stat-value' }, badge(view.status))),
      stat('Version', num(view.version), 'handler-version', view.previous_version ? `previous ${view.previous_version}` : 'no previous version'),
      h('div', { class: 'stat wide' }, h('div', { class: 'stat-label', text: 'Digest (sha256)' }),
        h('div', { class: 'stat-value mono digest', 'data-testid': 'handler-digest', text: view.digest || '–' }),
        h('div', { class: 'stat-hint' }, 'deployed ', time(view.deployed_at))),
      stat('Processed', num(view.counters.processed), 'handler-processed'),
      stat('Group lag', lag ? num(lag.lag) : '–', 'handler-lag'));
    pause.hidden = view.status === 'paused';
    resume.hidden = view.status !== 'paused';
    rollback.disabled = !view.previous_version && !view.canary;
    rollback.title = view.canary
      ? `Stop the canary (version ${view.canary.version}); version ${view.version} stays`
      : view.previous_version ? `Back to version ${view.previous_version}` : 'No previous version to roll back to';
    const seeded = seededCount(`handler:${name}`);
    fill(plotBox, [
      chart('Throughput', [
        { label: 'processed', kind: 'b', points: rate(`handler:${name}`, 'processed') },
        { label: 'acked', kind: 'c', points: rate(`handler:${name}`, 'acked') },
      ], 'deliveries / s', 'plot-handler-throughput'),
      chart('Group lag', [{ label: 'lag', kind: 'a', points: series(`group:${view.stream}/${view.group}`, 'lag') }], 'events', 'plot-handler-lag'),
    ].map((figure) => {
      figure.dataset.seeded = seeded;
      return figure;
    }));
    await release.update(view);
    const rows = [{ version: 'all', counters: view.counters },
      ...Object.entries(view.versions).map(([v, counters]) => ({ version: v, counters })).reverse()];
    setRows(versionBody, rows, (r) => r.version, (r) => h('tr', { class: r.version === 'all' ? 'total' : undefined },
      td(r.version === 'all' ? 'All versions' : [`v${r.version}`,
        Number(r.version) === view.version ? h('span', { class: 'badge running small', text: 'current' }) : null,
        view.canary && Number(r.version) === view.canary.version ? h('span', { class: 'badge paused small', text: 'canary' }) : null]),
      ...COUNTERS.map(([k]) => td(num(r.counters[k]), 'num'))));
  }

  return { refresh, unmount: logs.stop };
}
