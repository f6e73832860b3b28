// What a handler page shows and does about new versions
// (docs/handlers.md): the canary running beside the current version, with
// Promote and Stop; a form that starts one (PUT …/module?canary=…); a dry
// run of a module over the stream's past (POST …/try), shown as a
// comparison; and the deploy history (GET …/history).

import { api, seg } from '../api.js';
import { h, fill, num, duration, time, table, setRows, td, emptyRow, errorBanner } from '../dom.js';
import { busy, field, jsonObject } from '../forms.js';

const handlerPath = (name) => `/v1/handlers/${seg(name)}`;

/** 12.5% (one decimal at most). */
function percent(n) {
  return `${Number.isInteger(n) ? n : n.toFixed(1)}%`;
}

/** A latency in microseconds: 850 µs, 12 ms. */
function micros(us) {
  return us < 1000 ? `${num(us)} µs` : duration(us / 1000);
}

/** Failed of handled as a percentage, or null when nothing was handled. */
function rate(failed, handled) {
  return handled ? (100 * failed) / handled : null;
}

function shortDigest(digest) {
  return digest ? h('span', { class: 'mono', title: `sha256:${digest}`, text: digest.slice(0, 12) }) : h('span', { class: 'muted', text: '–' });
}

/**
 * Where a canary stands, as the judge sees it on this server
 * (docs/handlers.md#canaries): [state, words].
 */
export function canaryState(c) {
  const counts = c.counts;
  const canary = rate(counts.canary_failed, counts.canary_handled);
  const current = rate(counts.current_failed, counts.current_handled) ?? 0;
  if (counts.canary_handled < c.min_deliveries) {
    const more = c.min_deliveries - counts.canary_handled;
    return ['gathering', `Gathering evidence: ${num(more)} more first deliveries before it is judged; until then it runs on, past its window if need be.`];
  }
  if (canary - current > c.margin_percent) {
    return ['failing', `Failing ${percent(canary - current)} points more often than the current version (margin ${percent(c.margin_percent)}): it is rolled back at the judge’s next look.`];
  }
  return ['within', 'Within the margin: it is promoted when its window ends.'];
}

/** The canary card, the form that starts one, and the history: updated by `update(view)`. */
export function releases(name, { onChange }) {
  const path = handlerPath(name);
  const errors = h('div');
  const notice = h('div', { role: 'status', class: 'notice-slot' });

  // The running canary.
  const canaryBody = h('div');
  const promote = h('button', { type: 'button', class: 'primary', 'data-testid': 'promote', text: 'Promote now' });
  const stop = h('button', { type: 'button', class: 'secondary', 'data-testid': 'canary-stop', text: 'Stop the canary' });
  const canaryCard = h('section', { class: 'card canary', 'data-testid': 'canary', hidden: true },
    h('div', { class: 'section-head' }, h('h2', { 'data-testid': 'canary-title', text: 'Canary' }),
      h('div', { class: 'buttons', 'data-write': true }, promote, stop)),
    canaryBody);
  const post = (button, verb, words) => button.addEventListener('click', () => busy(button, errors, notice, async () => {
    const view = await api('POST', `${path}/${verb}`);
    await onChange();
    return words(view);
  }));
  post(promote, 'promote', (v) => `Promoted: ${name} runs version ${v.version}.`);
  post(stop, 'rollback', (v) => `Stopped the canary: ${name} stays on version ${v.version}.`);

  // Starting a canary.
  const cFile = h('input', { id: 'canary-file', type: 'file', accept: '.wasm,application/wasm', required: true, 'data-testid': 'canary-file' });
  const cShare = h('input', { id: 'canary-share', type: 'number', min: 0.01, max: 100, step: 'any', value: 10, required: true, 'data-testid': 'canary-share-input' });
  const cWindow = h('input', { id: 'canary-window', type: 'number', min: 0.01, max: 43200, step: 'any', value: 10, required: true, 'data-testid': 'canary-window-input' });
  const cMargin = h('input', { id: 'canary-margin', type: 'number', min: 0, max: 100, step: 'any', placeholder: '5', 'data-testid': 'canary-margin-input' });
  const cMin = h('input', { id: 'canary-min', type: 'number', min: 0, step: 1, placeholder: '50', 'data-testid': 'canary-min-input' });
  const cStart = h('button', { type: 'submit', class: 'primary', 'data-testid': 'canary-start', text: 'Start canary' });
  const canaryForm = h('form', { class: 'card', 'data-write': true, 'data-testid': 'canary-form', 'aria-labelledby': 'canary-form-title' },
    h('h2', { id: 'canary-form-title', text: 'Start a canary' }),
    h('p', { class: 'muted small', text: 'The module runs beside the current version on a share of first attempts (retries stay on the current version). It is rolled back as soon as it fails more than the margin more often, and promoted at the end of its window.' }),
    h('div', { class: 'field-row' },
      field('Module (.wasm)', cFile), field('Share (%)', cShare, '0.01 to 100'), field('Window (minutes)', cWindow, 'default 10'),
      field('Margin (points)', cMargin, 'default 5'), field('Min deliveries', cMin, 'default 50')),
    h('div', { class: 'actions' }, cStart));
  canaryForm.addEventListener('submit', (e) => {
    e.preventDefault();
    busy(cStart, errors, notice, async () => {
      if (!cFile.files.length) throw new Error('Choose a .wasm file first.');
      const query = new URLSearchParams({ canary: String(Number(cShare.value)), window_ms: String(Math.round(Number(cWindow.value) * 60_000)) });
      if (cMargin.value !== '') query.set('margin', String(Number(cMargin.value)));
      if (cMin.value !== '') query.set('min_deliveries', String(Number(cMin.value)));
      const view = await api('PUT', `${path}/module?${query}`, { body: cFile.files[0], type: 'application/wasm' });
      cFile.value = '';
      await onChange();
      return `Started version ${view.canary ? view.canary.version : '?'} of ${name} as a canary on ${percent(Number(cShare.value))} of first attempts.`;
    });
  });

  // The deploy history, newest first.
  const { table: historyTable, body: historyBody } = table(
    [['When'], ['Action'], ['Version', 'num'], ['Digest'], ['By'], ['Node'], ['Why']], { 'data-testid': 'history-table' });
  const historyCard = h('section', { class: 'card' }, h('h2', { text: 'Deploy history' }),
    h('p', { class: 'muted small', text: 'Every deploy, swap, canary, promotion and rollback, newest first (the last 100).' }), historyTable);
  let historyStamp = null;

  async function loadHistory() {
    let answer;
    try {
      answer = await api('GET', `${path}/history`);
    } catch (e) {
      fill(historyBody, emptyRow(7, `History unavailable: ${e.message}`));
      return;
    }
    const steps = (answer.steps || []).map((s, i) => ({ ...s, i })).reverse();
    if (!steps.length) {
      fill(historyBody, emptyRow(7, 'Nothing recorded yet.'));
      return;
    }
    if (historyBody.querySelector('.empty-row')) fill(historyBody);
    setRows(historyBody, steps, (s) => s.i, (s) => h('tr', { 'data-testid': 'history-step', dataset: { action: s.action, version: s.version } },
      td(time(s.at)),
      td(h('span', { class: `badge small action-${s.action}`, text: s.action })),
      td(`v${s.version}`, 'num'),
      td(shortDigest(s.digest)),
      td(s.by ? h('span', { class: 'mono', text: s.by }) : h('span', { class: 'muted', text: '–' })),
      td(h('span', { class: 'mono small', text: s.node })),
      td(s.reason ? h('span', { class: 'small', text: s.reason }) : h('span', { class: 'muted', text: '–' }))));
  }

  function showCanary(view) {
    const c = view.canary;
    canaryCard.hidden = !c;
    canaryForm.hidden = Boolean(c);
    if (!c) {
      fill(canaryBody);
      return;
    }
    const counts = c.counts;
    const [state, words] = canaryState(c);
    const row = (label, handled, failed, testid) => h('tr', { 'data-testid': testid },
      td(label), td(num(handled), 'num'), td(num(failed), 'num'),
      td(rate(failed, handled) === null ? '–' : percent(rate(failed, handled)), 'num'));
    const { table: countsTable, body } = table([['Version'], ['First attempts handled', 'num'], ['Failed', 'num'], ['Failure rate', 'num']],
      { 'data-testid': 'canary-counts' });
    fill(body,
      row(`v${view.version} (current)`, counts.current_handled, counts.current_failed, 'canary-current-row'),
      row(`v${c.version} (canary)`, counts.canary_handled, counts.canary_failed, 'canary-canary-row'));
    fill(canaryBody,
      h('p', { class: 'muted' }, `Version ${c.version} (`, shortDigest(c.digest), `) takes `,
        h('strong', { 'data-testid': 'canary-share', text: percent(c.share_percent) }), ' of first attempts beside version ',
        String(view.version), '.'),
      h('div', { class: 'stats' },
        h('div', { class: 'stat' }, h('div', { class: 'stat-label', text: 'Window' }),
          h('div', { class: 'stat-value', 'data-testid': 'canary-window', text: duration(c.window_ms) }),
          h('div', { class: 'stat-hint' }, 'ends ', time(c.ends_at))),
        h('div', { class: 'stat' }, h('div', { class: 'stat-label', text: 'Started' }),
          h('div', { class: 'stat-value small-value' }, time(c.started_at))),
        h('div', { class: 'stat' }, h('div', { class: 'stat-label', text: 'Margin' }),
          h('div', { class: 'stat-value', text: `${percent(c.margin_percent)}` }), h('div', { class: 'stat-hint', text: 'points more failures allowed' })),
        h('div', { class: 'stat' }, h('div', { class: 'stat-label', text: 'Min deliveries' }),
          h('div', { class: 'stat-value', text: num(c.min_deliveries) }), h('div', { class: 'stat-hint', text: 'before a verdict' }))),
      countsTable,
      h('p', { class: `canary-state ${state}`, 'data-testid': 'canary-state', dataset: { state } }, words),
      h('p', { class: 'muted small', text: 'Counts are this server’s; in a cluster the judge adds up every node’s.' }));
  }

  return {
    canaryCard,
    canaryForm,
    historyCard,
    errors,
    notice,
    async update(view) {
      showCanary(view);
      // The history changes only with the version, a canary or a rollback.
      const stamp = JSON.stringify([view.version, view.previous_version, view.deployed_at, view.digest, view.canary && view.canary.version]);
      if (stamp !== historyStamp) {
        historyStamp = stamp;
        await loadHistory();
      }
    },
  };
}

const TOTALS = [
  ['events', 'Events'], ['acked', 'Acked'], ['retried', 'Retried'], ['rejected', 'Rejected'], ['trapped', 'Trapped'],
  ['timed_out', 'Timed out'], ['limited', 'Limited'], ['appended', 'Appended'],
];

/** An outcome with its reason or delay, in a cell. */
function outcome(run) {
  if (!run) return h('span', { class: 'muted', text: 'no live version' });
  const detail = [run.reason, run.delay_ms !== null && run.delay_ms !== undefined ? `after ${duration(run.delay_ms)}` : null]
    .filter(Boolean).join(', ');
  const appends = run.appends.length ? ` +${run.appends.length} append${run.appends.length === 1 ? '' : 's'}` : '';
  return [h('span', { class: `outcome ${run.outcome}`, text: run.outcome }),
    detail ? h('span', { class: 'muted small', text: ` ${detail}` }) : null,
    appends ? h('span', { class: 'muted small', text: appends }) : null];
}

/** The dry-run form and its comparison (docs/handlers.md#dry-runs). */
export function dryRun(name) {
  const path = handlerPath(name);
  const errors = h('div');
  const result = h('div', { 'data-testid': 'trial' });
  const file = h('input', { id: 'try-file', type: 'file', accept: '.wasm,application/wasm', required: true, 'data-testid': 'try-file' });
  const where = h('textarea', { id: 'try-where', rows: 1, spellcheck: 'false', placeholder: '{"type": "order.placed"}', 'data-testid': 'try-where' });
  const limit = h('input', { id: 'try-limit', type: 'number', min: 1, max: 1000, placeholder: '100', 'data-testid': 'try-limit' });
  const run = h('button', { type: 'submit', class: 'primary', 'data-testid': 'try-run', text: 'Dry run' });
  const more = h('button', { type: 'button', class: 'secondary', hidden: true, 'data-testid': 'try-next', text: 'Next events →' });
  const form = h('form', {},
    h('p', { class: 'muted small', text: 'Runs a module and the live version over the same past events of the stream, in the production sandbox, and compares what each did. Nothing is settled or appended; no group changes.' }),
    h('div', { class: 'field-row' },
      field('Module (.wasm)', file), field('Events', limit, 'default 100, at most 1000'),
      h('div', { class: 'field grow' }, h('label', { for: 'try-where', text: 'Where (JSON, optional)' }), where)),
    errors,
    h('div', { class: 'actions' }, more, run));
  const card = h('section', { class: 'card', 'data-write': true, 'data-testid': 'try-section', 'aria-labelledby': 'try-title' },
    h('h2', { id: 'try-title', text: 'Dry run a module' }), form, result);

  let cursor = null;
  async function go(button, after) {
    button.disabled = true;
    try {
      if (!file.files.length) throw new Error('Choose a .wasm file first.');
      const query = { where: jsonObject(where.value, 'Where') };
      if (limit.value !== '') query.limit = Number(limit.value);
      if (after) query.cursor = after;
      const data = new FormData();
      data.append('module', file.files[0], file.files[0].name);
      data.append('query', new Blob([JSON.stringify(query)], { type: 'application/json' }), 'query.json');
      const report = await api('POST', `${path}/try`, { body: data });
      fill(errors);
      cursor = report.next_cursor;
      more.hidden = !cursor;
      show(report);
    } catch (e) {
      fill(errors, errorBanner(e));
    } finally {
      button.disabled = false;
    }
  }
  form.addEventListener('submit', (e) => { e.preventDefault(); go(run, null); });
  more.addEventListener('click', () => go(more, cursor));

  function show(report) {
    const versions = [['candidate', 'Candidate', report.candidate],
      ...(report.current ? [['current', `Current (v${report.current.version})`, report.current]] : [])];
    const { table: totals, body: totalsBody } = table(
      [['Version'], ['Digest'], ...TOTALS.map(([, label]) => [label, 'num']), ['p50', 'num'], ['Slowest', 'num']],
      { 'data-testid': 'trial-totals' });
    fill(totalsBody, versions.map(([key, label, v]) => h('tr', { 'data-testid': `trial-totals-${key}` },
      td(label), td(shortDigest(v.digest)),
      ...TOTALS.map(([k]) => td(num(v.totals[k]), 'num')),
      td(micros(v.totals.p50_us), 'num'), td(micros(v.totals.max_us), 'num'))));
    const { table: events, body: eventsBody } = table(
      [[''], ['Event'], ['Partition', 'num'], ['Sequence', 'num'], [report.current ? `Current (v${report.current.version})` : 'Current'], ['Candidate']],
      { 'data-testid': 'trial-events', class: 'trial-events' });
    if (!report.events.length) {
      fill(eventsBody, emptyRow(6, 'No event matched: nothing was run.'));
    } else {
      fill(eventsBody, report.events.map((e) => h('tr', { class: e.differs ? 'differs' : undefined, 'data-testid': 'trial-event', dataset: { differs: e.differs, event: e.event_id } },
        td(e.differs ? h('span', { class: 'bad', title: 'the versions differ', text: '≠' }) : ''),
        td(h('span', { class: 'mono', text: e.event_id })),
        td(num(e.partition), 'num'),
        td(num(e.sequence), 'num'),
        td(outcome(e.current)),
        td(outcome(e.candidate)))));
    }
    fill(result,
      h('p', { class: report.differing ? 'trial-summary differs' : 'trial-summary', 'data-testid': 'trial-summary', dataset: { differing: report.differing, events: report.events.length } },
        report.differing
          ? `${num(report.differing)} of ${num(report.events.length)} events differ (listed first).`
          : `The versions agree on all ${num(report.events.length)} events.`),
      totals, events);
  }

  return card;
}
