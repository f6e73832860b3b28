// Drives the web console (/ui, docs/console.md) in the system Chromium
// with playwright-core (no browser is ever downloaded). Run by
// tests/tests/console.rs, which starts `rheo serve`, prepares state over
// the HTTP API and passes:
//
//   RHEO_URL              the server, e.g. http://127.0.0.1:41234
//   RHEO_SCENARIO         drain | redrive | quarantine | swap | write |
//                         recovery | inflight | canary | readonly | token
//   RHEO_SCREENSHOTS_DIR  where to write PNGs of the pages (optional)
//   RHEO_SWAP_WASM        swap, canary: the .wasm to upload
//   RHEO_TOKEN            token, readonly: the server's --auth-token
//   RHEO_READ_TOKEN       readonly: the server's --read-token
//   CHROMIUM              the browser (default /usr/bin/chromium)
//
// Every wait is on a condition with a deadline; nothing sleeps for a fixed
// time. Exits 0 when the scenario passed; prints each step.

import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const base = process.env.RHEO_URL;
const scenario = process.env.RHEO_SCENARIO;
const shots = process.env.RHEO_SCREENSHOTS_DIR;
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
if (!base || !scenario) {
  console.error('set RHEO_URL and RHEO_SCENARIO');
  process.exit(2);
}

const started = Date.now();
const step = (text) => console.log(`[${((Date.now() - started) / 1000).toFixed(1)} s] ${text}`);

/** Polls `check` (which returns a truthy value when done) until `ms` pass. */
async function until(what, check, ms = 20_000) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await check();
      if (last) return last;
    } catch (e) {
      last = e.message;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for: ${what} (last: ${JSON.stringify(last)})`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const byId = (page, id) => page.locator(`[data-testid="${id}"]`);

/** The text of the element with `data-testid=id`, once it satisfies `ok`. */
async function textOf(page, id, ok, what, ms) {
  return until(what || `${id} to show the expected text`, async () => {
    const el = byId(page, id).first();
    if (!(await el.count())) return false;
    const text = (await el.textContent()).trim();
    return ok(text) ? text : false;
  }, ms);
}

const number = (text) => Number(text.replace(/[^0-9.-]/g, ''));

async function screenshot(page, name) {
  if (!shots) return;
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  step(`screenshot ${name}.png`);
}

async function go(page, hash) {
  await page.goto(`${base}/ui/${hash}`);
}

/** What the server holds: a GET through the page's own API helper (and its token). */
async function server(page, path) {
  return page.evaluate((p) => window.rheo.api('GET', p), path);
}

/** The text of a notice (any of the page's: each form has its own) once one satisfies `ok`. */
async function notice(page, ok, what, ms) {
  return until(what || 'a notice', async () => (await byId(page, 'notice').allTextContents()).find((t) => ok(t.trim())), ms);
}

/** The `data-` attributes of the first element with `data-testid=id`, once `ok` holds. */
async function dataOf(page, id, ok, what, ms) {
  return until(what || `${id} to say what is expected`, async () => {
    const el = byId(page, id).first();
    if (!(await el.count())) return false;
    const data = await el.evaluate((e) => ({ ...e.dataset, text: e.textContent.trim() }));
    return ok(data) ? data : false;
  }, ms);
}

const scenarios = {
  /** Streams, the event browser, then a paused handler resumed: the group's lag drains to zero. */
  async drain(page) {
    await go(page, '#/streams');
    const events = await textOf(page, 'stream-events', (t) => t === '300', 'the streams page to count 300 events');
    step(`streams page: orders has ${events} events`);
    const marks = await page.locator('[data-testid="stream-row-orders"] .chip').allTextContents();
    if (marks.length !== 3) throw new Error(`expected 3 partitions, saw ${JSON.stringify(marks)}`);
    await screenshot(page, 'streams');

    await page.getByRole('link', { name: 'Browse events' }).click();
    await until('the event browser to list a full page', async () => (await byId(page, 'event-open').count()) === 25);
    step('event browser: first page of 25');
    await page.getByLabel('Type', { exact: true }).fill('order.paid');
    await byId(page, 'query-run').click();
    await until('only order.paid events', async () => {
      const types = await page.locator('[data-testid="events-table"] tbody td:nth-child(4)').allTextContents();
      return types.length === 25 && types.every((t) => t === 'order.paid');
    });
    await byId(page, 'page-next').click();
    await textOf(page, 'page-info', (t) => t.startsWith('Page 2'), 'page 2');
    const second = await page.locator('[data-testid="events-table"] tbody tr').count();
    step(`event browser: filtered to order.paid, page 2 has ${second} events`);
    await byId(page, 'event-open').first().click();
    const json = JSON.parse(await textOf(page, 'event-json', (t) => t.startsWith('{'), 'the event JSON'));
    if (json.type !== 'order.paid' || typeof json.payload.total !== 'number') throw new Error(`unexpected event ${JSON.stringify(json)}`);
    step(`event browser: opened ${json.id}`);
    await screenshot(page, 'events');

    await go(page, '#/groups');
    await page.locator('[data-testid="group-row-orders-billing"] a').click();
    const lag = await textOf(page, 'group-lag', (t) => number(t) === 300, 'the group page to show lag 300');
    step(`group page: lag ${lag} while the handler is paused`);

    await page.locator('[data-testid="group-page-handlers"] a, a[href="#/handlers/billing"]').first().click();
    await textOf(page, 'handler-status', (t) => t === 'paused', 'the handler to show paused');
    await byId(page, 'resume').click();
    await textOf(page, 'handler-status', (t) => t === 'running', 'the handler to show running after Resume');
    step('handler page: resumed');

    await page.locator('a[href="#/groups/orders/billing"]').first().click();
    const seen = new Set();
    await until('the group page to show lag 0', async () => {
      const text = (await byId(page, 'group-lag').textContent()).trim();
      seen.add(number(text));
      return number(text) === 0;
    }, 120_000);
    step(`group page: lag went ${[...seen].join(' → ')}`);
    const dead = await textOf(page, 'group-dead-letters', (t) => number(t) === 3, 'the 3 poison events as dead letters');
    step(`group page: ${dead} dead letters (the poison events)`);
    // Two samples at least, so the plot has a line to draw.
    await until('the lag plot to draw a line', async () => (await page.locator('[data-testid="plot-lag"] path.line').count()) === 1);
    // A few samples after the drain, so the throughput plot shows it end.
    await until('the throughput plot to draw its lines', async () => {
      const d = await page.locator('[data-testid="plot-throughput"] path.line.c').getAttribute('d');
      return d && d.split('L').length >= 4;
    });
    await screenshot(page, 'group');
    // The plots start from the server's samples (GET /v1/metrics/samples):
    // a reload keeps the drain in them.
    await page.reload();
    const seeded = await until('the lag plot drawn from the server\'s samples after a reload', async () => {
      const figure = byId(page, 'plot-lag');
      if (!(await figure.count())) return false;
      const n = Number(await figure.getAttribute('data-seeded'));
      const d = await figure.locator('path.line').getAttribute('d');
      return n >= 3 && d && d.split('L').length >= n ? n : false;
    });
    step(`group page: after a reload the plots start from ${seeded} of the server's samples`);

    await go(page, '#/handlers/billing');
    await textOf(page, 'handler-processed', (t) => number(t) >= 300, 'the handler to count 300 processed');
    const logs = await until('the log panel to follow or say it is unavailable', async () => {
      const state = (await byId(page, 'logs-state').textContent()).trim();
      return ['following', 'updating every 2 s', 'logs unavailable'].includes(state) ? state : false;
    });
    if (logs !== 'logs unavailable') {
      await until('a poison log line', async () => (await byId(page, 'log-line').allTextContents()).some((l) => l.includes('rejecting')));
    }
    step(`handler page: logs ${logs}`);
    await until('the handler plots', async () => (await page.locator('[data-testid="plot-handler-throughput"] path.line').count()) === 2);
    const handlerSeeded = Number(await byId(page, 'plot-handler-throughput').getAttribute('data-seeded'));
    if (!(handlerSeeded >= 3)) throw new Error(`the handler's plots had ${handlerSeeded} samples from the server`);
    await screenshot(page, 'handler');

    await go(page, '#/handlers');
    await textOf(page, 'handler-status', (t) => t === 'running', 'the handlers list');
    await screenshot(page, 'handlers');
    await go(page, '#/nodes');
    await until('the nodes table', async () => (await page.locator('[data-testid="nodes-table"] tbody tr').count()) === 1);
    await screenshot(page, 'nodes');
  },

  /** Two dead letters; Redrive brings one back and the count goes down; then the group is deleted. */
  async redrive(page) {
    await go(page, '#/groups/payments/audit');
    await textOf(page, 'group-dead-letters', (t) => number(t) === 2, 'two dead letters');
    const rows = byId(page, 'dead-letters-table').locator('tbody tr');
    await until('two dead-letter rows', async () => (await rows.count()) === 2);
    const reason = await page.locator('[data-testid="dead-letter-p-1"] .reason').textContent();
    if (reason !== 'card declined') throw new Error(`reason ${reason}`);
    step('group page: 2 dead letters, p-1 rejected with "card declined"');
    await page.getByRole('button', { name: 'Redrive p-1' }).click();
    await textOf(page, 'notice', (t) => t.includes('1 redriven'), 'the redrive notice');
    await textOf(page, 'group-dead-letters', (t) => number(t) === 1, 'the dead-letter count to go down to 1');
    await until('p-1 to leave the table', async () => (await byId(page, 'dead-letter-p-1').count()) === 0 && (await rows.count()) === 1);
    // Back in the queue: not yet leased again, so it is pending work.
    await textOf(page, 'group-lag', (t) => number(t) >= 1, 'the redriven event to count in the lag');
    step('group page: redriven; 1 dead letter left');
    await page.getByRole('button', { name: 'Redrive p-2' }).click();
    await textOf(page, 'group-dead-letters', (t) => number(t) === 0, 'no dead letters');
    await until('the empty state', async () => (await byId(page, 'dead-letters-table').locator('td.empty').count()) === 1);
    step('group page: no dead letters left');

    // Deleting the group: the button waits for its name to be typed.
    await byId(page, 'delete-group-section').locator('summary').click();
    const remove = byId(page, 'delete-group');
    if (!(await remove.isDisabled())) throw new Error('Delete is enabled before the name is typed');
    await byId(page, 'delete-group-name').fill('audi');
    if (!(await remove.isDisabled())) throw new Error('Delete is enabled with the wrong name');
    await byId(page, 'delete-group-name').fill('audit');
    await remove.click();
    await until('the groups page', async () => page.url().endsWith('#/groups'));
    await until('no group left', async () => (await byId(page, 'groups-table').locator('td.empty').count()) === 1);
    step('group page: deleted; the groups page lists none');
  },

  /** One key parked behind its failing head; Skip head dead-letters it and the key goes on; Resume hands the other's head out again. */
  async quarantine(page) {
    await go(page, '#/groups/accounts/ledger');
    await textOf(page, 'group-parked', (t) => number(t) === 2, 'two parked keys');
    const row = byId(page, 'parked-acct-7');
    await until('the acct-7 row', async () => (await row.count()) === 1);
    const reason = await row.locator('.reason').textContent();
    if (reason !== 'max_attempts: ledger locked') throw new Error(`reason ${reason}`);
    step('group page: acct-7 and acct-9 parked, "max_attempts: ledger locked"');
    await page.getByRole('button', { name: 'Skip the head of acct-7' }).click();
    await textOf(page, 'notice', (t) => t.includes('1 released, head dead-lettered'), 'the skip notice');
    await textOf(page, 'group-parked', (t) => number(t) === 1, 'one parked key left');
    await textOf(page, 'group-dead-letters', (t) => number(t) === 1, 'the skipped head in the dead letters');
    step('group page: acct-7 skipped into the dead letters');
    await page.getByRole('button', { name: 'Resume acct-9' }).click();
    await textOf(page, 'group-parked', (t) => number(t) === 0, 'no parked key');
    await until('the empty state', async () => (await byId(page, 'parked-table').locator('td.empty').count()) === 1);
    step('group page: acct-9 resumed; nothing parked');
  },

  /** A new module uploaded through the file input; the page shows the new version and digest; then a deploy from the form. */
  async swap(page) {
    await go(page, '#/handlers/swapper');
    const before = await textOf(page, 'handler-version', (t) => t === '1', 'version 1');
    const oldDigest = await textOf(page, 'handler-digest', (t) => /^[0-9a-f]{64}$/.test(t), 'the digest');
    step(`handler page: version ${before}, digest ${oldDigest.slice(0, 12)}`);
    await byId(page, 'swap-file').setInputFiles(process.env.RHEO_SWAP_WASM);
    await byId(page, 'swap').click();
    await textOf(page, 'handler-version', (t) => t === '2', 'version 2 after the swap', 60_000);
    const digest = await textOf(page, 'handler-digest', (t) => t !== oldDigest, 'a new digest');
    const expected = createHash('sha256').update(readFileSync(process.env.RHEO_SWAP_WASM)).digest('hex');
    if (digest !== expected) throw new Error(`digest ${digest}, expected the file's sha256 ${expected}`);
    await textOf(page, 'notice', (t) => t.includes('version 2'), 'the swap notice');
    step(`handler page: swapped to version 2, digest ${digest.slice(0, 12)}`);
    await byId(page, 'rollback').click();
    await textOf(page, 'handler-digest', (t) => t === oldDigest, 'the old digest after Roll back', 60_000);
    const after = await textOf(page, 'handler-version', () => true);
    step(`handler page: rolled back (version ${after}, the first digest again)`);

    // A new handler from the deploy form, with the same file.
    await go(page, '#/handlers');
    await page.getByLabel('Name').fill('fresh');
    await until('the stream choice', async () => (await page.locator('#d-stream option[value="jobs"]').count()) === 1);
    await page.getByLabel('Stream').selectOption('jobs');
    await page.getByLabel('Group').fill('fresh-group');
    await byId(page, 'deploy-file').setInputFiles(process.env.RHEO_SWAP_WASM);
    await byId(page, 'deploy').click();
    await textOf(page, 'notice', (t) => t.includes('Deployed fresh version 1'), 'the deploy notice', 60_000);
    await until('the new handler in the table', async () => (await byId(page, 'handler-row-fresh').count()) === 1);
    step('handlers page: deployed "fresh" from the form');
  },

  /**
   * The write forms: a stream created, events appended (a duplicate id
   * appends nothing), groups created; the groups page polls one route.
   */
  async write(page) {
    await go(page, '#/groups');
    await until('the empty groups table', async () => (await byId(page, 'groups-table').locator('td.empty').count()) === 1);
    const calls = [];
    const listen = (r) => {
      const url = new URL(r.url());
      if (url.pathname.startsWith('/v1/')) calls.push(`${r.method()} ${url.pathname}`);
    };
    page.on('request', listen);
    await until('three polls of the groups page', async () => calls.filter((c) => c === 'GET /v1/groups').length >= 3);
    page.off('request', listen);
    const others = calls.filter((c) => c !== 'GET /v1/groups');
    if (others.length) throw new Error(`the groups page asked for more than GET /v1/groups: ${others.join(', ')}`);
    step(`groups page: ${calls.length} polls, each one GET /v1/groups`);

    await go(page, '#/streams');
    await byId(page, 'create-stream-name').fill('ledger');
    await byId(page, 'create-stream-partitions').fill('2');
    await byId(page, 'create-stream').click();
    await notice(page, (t) => t.includes('Created stream ledger with 2 partitions'), 'the create notice');
    await until('the new stream row', async () => (await page.locator('[data-testid="stream-row-ledger"] .chip').count()) === 2);
    step('streams page: created ledger with 2 partitions');

    await page.locator('[data-testid="stream-row-ledger"] a.button-link').click();
    await byId(page, 'append-type').fill('entry.posted');
    await byId(page, 'append-key').fill('acct-1');
    await byId(page, 'append-id').fill('e-1');
    await byId(page, 'append-payload').fill('{"amount": 42, "currency": "EUR"}');
    await byId(page, 'append').click();
    const first = await dataOf(page, 'append-result', (d) => d.text.includes('e-1'), 'the append answer');
    if (first.duplicate !== 'false' || first.sequence !== '1') throw new Error(`first append: ${JSON.stringify(first)}`);
    step(`event browser: appended e-1 — ${first.text}`);
    await byId(page, 'append').click();
    const again = await dataOf(page, 'append-result', (d) => d.duplicate === 'true', 'the duplicate answer');
    if (again.sequence !== '1' || !again.text.startsWith('Duplicate')) throw new Error(`second append: ${JSON.stringify(again)}`);
    step(`event browser: e-1 again — ${again.text}`);
    await byId(page, 'append-id').fill('');
    await byId(page, 'append-key').fill('acct-2');
    await byId(page, 'append-payload').fill('{"amount": 7}');
    await byId(page, 'append').click();
    const third = await dataOf(page, 'append-result', (d) => d.duplicate === 'false' && !d.text.includes('e-1'), 'a second event');
    step(`event browser: a second event — ${third.text}`);
    await byId(page, 'append-payload').fill('[1, 2]');
    await byId(page, 'append').click();
    await textOf(page, 'error', (t) => t.includes('Payload must be a JSON object'), 'a payload that is no object refused');
    await textOf(page, 'stream-summary', (t) => t.startsWith('2 events'), 'the stream to hold 2 events');
    step('event browser: a payload that is no object is refused; the stream holds 2 events');

    await go(page, '#/groups');
    await byId(page, 'create-group-section').locator('summary').click();
    await until('the stream choice', async () => (await page.locator('#cg-stream option[value="ledger"]').count()) === 1);
    await byId(page, 'create-group-stream').selectOption('ledger');
    await byId(page, 'create-group-name').fill('audit');
    await byId(page, 'create-group-attempts').fill('3');
    await byId(page, 'create-group-ordering').selectOption('key');
    await byId(page, 'create-group-backoff').fill('1000, 5000');
    await byId(page, 'create-group').click();
    await notice(page, (t) => t.includes('Created group audit on ledger (3 attempts, ordering key)'), 'the group notice');
    await textOf(page, 'group-row-ledger-audit', (t) => t.includes('audit'), 'the new group in the list');
    await until('its lag of 2', async () => (await page.locator('[data-testid="group-row-ledger-audit"] [data-testid="row-lag"]').textContent()) === '2');
    await byId(page, 'create-group-name').fill('tail');
    await byId(page, 'cg-start').selectOption('now');
    await byId(page, 'create-group-attempts').fill('');
    await byId(page, 'create-group-ordering').selectOption('none');
    await byId(page, 'create-group-backoff').fill('');
    await byId(page, 'create-group-key-concurrency').fill('4');
    await byId(page, 'create-group-key-rate').fill('2.5');
    await byId(page, 'create-group-key-burst').fill('5');
    await byId(page, 'create-group').click();
    await notice(page, (t) => t.includes('Created group tail') && t.includes('at most 4 per key')
      && t.includes('2.5 per key a second (burst 5)'), 'the second group notice');
    const tail = await server(page, '/v1/streams/ledger/groups/tail');
    if (JSON.stringify(tail.flow) !== JSON.stringify({ key_concurrency: 4, key_rate: { per_second: 2.5, burst: 5 } })) {
      throw new Error(`the server's flow of tail: ${JSON.stringify(tail.flow)}`);
    }
    await until('tail with lag 0', async () => (await page.locator('[data-testid="group-row-ledger-tail"] [data-testid="row-lag"]').count()) === 1
      && (await page.locator('[data-testid="group-row-ledger-tail"] [data-testid="row-lag"]').textContent()) === '0');
    step('groups page: created audit (3 attempts, key ordering, lag 2) and tail (new events only, at most 4 per key, 2.5 a second per key, lag 0)');
  },

  /** Replay from a sequence and from the start, then a reset confirmed by the group's name. */
  async recovery(page) {
    const path = '/v1/streams/orders/groups/billing';
    await go(page, '#/groups/orders/billing');
    await textOf(page, 'group-lag', (t) => number(t) === 0, 'lag 0: everything acked');
    await byId(page, 'replay-section').locator('summary').click();
    await byId(page, 'replay-which').selectOption('sequence');
    await byId(page, 'replay-sequence').fill('3');
    await byId(page, 'replay').click();
    await notice(page, (t) => t.includes('Replay: 2 deliveries re-opened'), 'the replay notice');
    await textOf(page, 'group-lag', (t) => number(t) === 2, 'lag 2 after the replay');
    let held = await server(page, path);
    if (held.lag.partitions['0'].frontier !== 3) throw new Error(`frontier after replaying after 3: ${JSON.stringify(held.lag)}`);
    step('group page: replayed after sequence 3 — 2 re-opened, the server\'s frontier is back at 3');
    await byId(page, 'replay-which').selectOption('all');
    await byId(page, 'replay').click();
    await notice(page, (t) => t.includes('Replay: 3 deliveries re-opened'), 'the second replay notice');
    await textOf(page, 'group-lag', (t) => number(t) === 5, 'lag 5 after replaying everything');
    step('group page: replayed everything — 3 more re-opened, lag 5');

    await byId(page, 'reset-section').locator('summary').click();
    const reset = byId(page, 'reset');
    if (!(await reset.isDisabled())) throw new Error('Reset is enabled before the name is typed');
    await byId(page, 'reset-group-name').fill('billin');
    if (!(await reset.isDisabled())) throw new Error('Reset is enabled with the wrong name');
    await byId(page, 'reset-group-name').fill('billing');
    await reset.click();
    await notice(page, (t) => t.includes('Reset group billing'), 'the reset notice');
    await textOf(page, 'partition-cursor-0', (t) => t === '1', 'the cursor back at the first sequence');
    if (!(await reset.isDisabled())) throw new Error('Reset stays enabled after a reset');
    held = await server(page, path);
    if (held.cursors['0'] !== 1 || held.lag.lag !== 5) throw new Error(`after the reset: ${JSON.stringify(held)}`);
    step('group page: reset after typing its name — the server\'s cursor is at 1, lag 5');
  },

  /** A dry run shown as a comparison, a canary started, stopped, started again and promoted; the history. */
  async canary(page) {
    const wasm = process.env.RHEO_SWAP_WASM;
    await go(page, '#/handlers/worker');
    await dataOf(page, 'history-step', (d) => d.action === 'deploy', 'the deploy in the history');
    step('handler page: the history shows the deploy');

    await byId(page, 'try-file').setInputFiles(wasm);
    await byId(page, 'try-limit').fill('50');
    await byId(page, 'try-run').click();
    const trial = await dataOf(page, 'trial-summary', (d) => d.differing !== undefined, 'the dry run\'s comparison', 60_000);
    if (trial.differing !== '2' || trial.events !== '20') throw new Error(`dry run: ${JSON.stringify(trial)}`);
    const differing = await page.locator('[data-testid="trial-event"][data-differs="true"]').count();
    const firstRow = await page.locator('[data-testid="trial-event"]').first().innerText();
    if (differing !== 2 || !firstRow.includes('reject')) throw new Error(`rows: ${differing} differ, first ${firstRow}`);
    await until('both versions\' totals', async () => (await byId(page, 'trial-totals').locator('tbody tr').count()) === 2);
    step(`handler page: dry run — ${trial.text}`);

    const startCanary = async (share) => {
      await byId(page, 'canary-file').setInputFiles(wasm);
      await byId(page, 'canary-share-input').fill(String(share));
      await byId(page, 'canary-window-input').fill('10');
      await byId(page, 'canary-start').click();
      await textOf(page, 'canary-share', (t) => t === `${share}%`, `the canary on ${share}%`, 60_000);
    };
    await startCanary(50);
    const span = await textOf(page, 'canary-window', () => true);
    const state = await dataOf(page, 'canary-state', (d) => d.state === 'gathering', 'the canary gathering evidence');
    if (await byId(page, 'canary-form').isVisible()) throw new Error('the canary form is shown while a canary runs');
    await dataOf(page, 'history-step', (d) => d.action === 'canary', 'the canary in the history');
    step(`handler page: canary on 50% for ${span} — ${state.text}`);
    await page.evaluate(() => window.rheo.api('POST', '/v1/streams/jobs/events/batch', {
      json: { events: Array.from({ length: 40 }, (_, i) => ({ id: `late-${i}`, payload: { n: i } })) },
    }));
    const handled = await until('the canary to handle first attempts', async () => {
      const cells = await byId(page, 'canary-canary-row').locator('td').allTextContents();
      return cells.length && number(cells[1]) > 0 ? number(cells[1]) : false;
    }, 60_000);
    step(`handler page: 40 more events — the canary handled ${handled} of them`);
    await screenshot(page, 'canary');

    await byId(page, 'canary-stop').click();
    await notice(page, (t) => t.includes('Stopped the canary'), 'the stop notice', 60_000);
    await until('the canary card to go', async () => !(await byId(page, 'canary').isVisible()));
    await dataOf(page, 'history-step', (d) => d.action === 'rollback', 'the rollback in the history');
    step('handler page: stopped the canary; the history shows the rollback');

    await startCanary(100);
    await byId(page, 'promote').click();
    await notice(page, (t) => t.includes('Promoted'), 'the promote notice', 60_000);
    const expected = createHash('sha256').update(readFileSync(wasm)).digest('hex');
    await textOf(page, 'handler-digest', (t) => t === expected, 'the promoted module\'s digest');
    await dataOf(page, 'history-step', (d) => d.action === 'promote', 'the promotion in the history');
    const actions = await page.locator('[data-testid="history-step"]').evaluateAll((rows) => rows.map((r) => r.dataset.action));
    step(`handler page: promoted; the history, newest first: ${actions.join(', ')}`);
  },

  /** A group's leases, page by page: each one's holder, attempt and expiry, as the server lists them. */
  async inflight(page) {
    await go(page, '#/groups/queue/workers');
    await textOf(page, 'group-inflight', (t) => number(t) === 30, '30 deliveries in flight');
    await textOf(page, 'leases-info', (t) => t === 'page 1 · 25 leases', 'the first page of leases');
    const rows = () => page.locator('[data-testid="leases-table"] tbody tr').evaluateAll((rs) => rs.map((r) => r.dataset.testid));
    const first = await server(page, '/v1/streams/queue/groups/workers/leases?limit=25');
    const shown = await rows();
    const listed = first.leases.map((l) => `lease-${l.event_id}`);
    if (JSON.stringify(shown) !== JSON.stringify(listed)) throw new Error(`page 1 shows ${shown}, the server lists ${listed}`);
    const cell = (event, id) => page.locator(`[data-testid="lease-${event}"] [data-testid="${id}"]`).textContent();
    if ((await cell('q-1', 'lease-holder')) !== 'worker-7' || (await cell('q-1', 'lease-attempt')) !== '1') {
      throw new Error(`q-1: ${await page.locator('[data-testid="lease-q-1"]').innerText()}`);
    }
    if (!(await cell('q-1', 'lease-expiry')).startsWith('in ')) throw new Error(`q-1 expires ${await cell('q-1', 'lease-expiry')}`);
    step(`group page: in flight, page 1 — the server's first 25 leases, q-1 held by worker-7 on attempt 1, expiring ${await cell('q-1', 'lease-expiry')}`);
    await byId(page, 'leases-next').click();
    await textOf(page, 'leases-info', (t) => t === 'page 2 · 5 leases', 'the second page of leases');
    const second = await server(page, `/v1/streams/queue/groups/workers/leases?limit=25&after=${first.next}`);
    const listed2 = second.leases.map((l) => `lease-${l.event_id}`);
    if (JSON.stringify(await rows()) !== JSON.stringify(listed2)) throw new Error(`page 2 shows ${await rows()}, the server lists ${listed2}`);
    if (second.next !== null || !(await byId(page, 'leases-next').isDisabled())) throw new Error('a page after the last');
    await until('q-30 held by slow-1, expired', async () => (await cell('q-30', 'lease-holder')) === 'slow-1'
      && (await cell('q-30', 'lease-expiry')) === 'expired');
    step('group page: in flight, page 2 — the last 5, the two of slow-1 expired and still listed');
    await byId(page, 'leases-prev').click();
    await textOf(page, 'leases-info', (t) => t === 'page 1 · 25 leases', 'back on the first page');
    step('group page: in flight, back to page 1');
  },

  /** A read-only token sees the pages and no control it may not use; the full token sees them. */
  async readonly(page) {
    await go(page, '#/groups/payments/audit');
    await until('the token dialog', async () => byId(page, 'token-dialog').isVisible());
    await byId(page, 'token-input').fill(process.env.RHEO_READ_TOKEN);
    await byId(page, 'token-save').click();
    await textOf(page, 'group-dead-letters', (t) => number(t) === 1, 'one dead letter');
    await until('the header to say read-only', async () => byId(page, 'access').isVisible());
    await until('the dead-letter row', async () => (await byId(page, 'dead-letter-p-1').count()) === 1);
    const hidden = async (where, ids) => {
      for (const id of ids) {
        if (!(await byId(page, id).count())) throw new Error(`${where}: no ${id} on the page at all`);
        if (await byId(page, id).first().isVisible()) throw new Error(`${where}: ${id} is shown to a read-only token`);
      }
    };
    await hidden('group page', ['redrive', 'redrive-all', 'replay-section', 'reset-section', 'delete-group-section']);
    step('read-only token: the group and its dead letter; no redrive, replay, reset or delete');
    await go(page, '#/groups');
    await textOf(page, 'group-row-payments-audit', (t) => t.includes('audit'), 'the groups list');
    await hidden('groups page', ['create-group-section']);
    await go(page, '#/streams');
    await textOf(page, 'stream-events', (t) => t === '1', 'the streams list');
    await hidden('streams page', ['create-stream']);
    await go(page, '#/streams/payments/events');
    await textOf(page, 'stream-summary', (t) => t.startsWith('1 events'), 'the event browser');
    // A history query is a POST the read token may make (docs/http.md#authentication).
    await textOf(page, 'event-open', (t) => t === 'p-1', 'the event browser lists the event');
    await hidden('event browser', ['append', 'delete-stream-section']);
    await go(page, '#/handlers/reader');
    await textOf(page, 'handler-version', (t) => t === '1', 'the handler page');
    await dataOf(page, 'history-step', (d) => d.action === 'deploy', 'the history, which a read-only token may read');
    await hidden('handler page', ['swap', 'pause', 'canary-form', 'try-section']);
    step('read-only token: no create, append, swap, canary or dry run on the other pages; the history shows');

    await byId(page, 'token-button').click();
    await byId(page, 'token-input').fill(process.env.RHEO_TOKEN);
    await byId(page, 'token-save').click();
    await until('the dry run', async () => byId(page, 'try-section').isVisible());
    await until('the canary form', async () => byId(page, 'canary-form').isVisible());
    await go(page, '#/groups/payments/audit');
    await until('the redrive button', async () => byId(page, 'redrive').first().isVisible());
    await until('the replay and reset sections', async () => (await byId(page, 'replay-section').isVisible()) && byId(page, 'reset-section').isVisible());
    await until('the delete section', async () => byId(page, 'delete-group-section').isVisible());
    if (await byId(page, 'access').isVisible()) throw new Error('still says read-only');
    step('full token: dry run, canary, redrive, replay, reset and delete are there');
  },

  async token(page) {
    await go(page, '#/streams');
    await until('the token dialog', async () => byId(page, 'token-dialog').isVisible());
    step('the page asks for a token');
    await byId(page, 'token-input').fill('wrong-token');
    await byId(page, 'token-save').click();
    await textOf(page, 'token-reason', (t) => t.includes('invalid bearer token'), 'the server refusing a wrong token');
    step('a wrong token is refused with the server\'s message');
    await byId(page, 'token-input').fill(process.env.RHEO_TOKEN);
    await byId(page, 'token-save').click();
    await textOf(page, 'stream-events', (t) => t === '5', 'the streams page after the token');
    if (await byId(page, 'token-dialog').isVisible()) throw new Error('the dialog is still open');
    step('with the token: the streams page shows the stream');
    await page.reload();
    await textOf(page, 'stream-events', (t) => t === '5', 'the streams page after a reload');
    if (await byId(page, 'token-dialog').isVisible()) throw new Error('asked again after a reload');
    step('after a reload: no question, the token is remembered');
  },
};

async function main() {
  const run = scenarios[scenario];
  if (!run) throw new Error(`unknown scenario ${scenario}`);
  const profile = mkdtempSync(join(tmpdir(), 'rheo-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 860 },
    deviceScaleFactor: 1,
    locale: 'en-GB',
    timezoneId: 'UTC',
  });
  const problems = [];
  try {
    const page = context.pages()[0] || await context.newPage();
    page.setDefaultTimeout(20_000);
    page.on('pageerror', (e) => problems.push(`uncaught in the page: ${e.message}`));
    // Offline: the page may talk to its own server only.
    page.on('request', (r) => {
      const url = r.url();
      if (!url.startsWith(base) && !url.startsWith('data:')) problems.push(`request to another origin: ${url}`);
    });
    step(`chromium ${context.browser() ? context.browser().version() : ''} · scenario ${scenario} · ${base}`);
    await run(page);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
  if (problems.length) throw new Error(problems.join('\n'));
  step(`scenario ${scenario} passed`);
}

main().catch((e) => {
  console.error(`FAILED: ${e.stack || e}`);
  process.exit(1);
});
