// The console's browser test (issue 12): `qflow serve --demo` on a loopback port with a
// fresh SQLite file and tokens this test configures, driven in Debian's headless
// Chromium by playwright-core. It signs in, finds a FAILED instance by its failure code,
// sees its attempts and the failed node on the diagram, migrates it (dry run, diff,
// confirm), resumes it and sees it complete; then a read-only token sees no action
// buttons, and forged posts are refused. Screenshots of each page go to docs/console/.
//
// Bounded: every wait has a limit, and a watchdog ends the run (and the server) after
// RUN_MS_MAX whatever happens. Usage: node console.test.mjs (QFLOW_BIN, CHROMIUM override
// the binaries; QFLOW_SCREENSHOTS=0 skips writing screenshots).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..', '..');
const QFLOW = process.env.QFLOW_BIN || join(repo, 'target', 'debug', 'qflow');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOTS = join(repo, 'docs', 'console');
const WRITE_SHOTS = process.env.QFLOW_SCREENSHOTS !== '0';
const RUN_MS_MAX = 240_000;
const STEP_MS_MAX = 20_000;
/// Instances started per round while looking for one that exhausts its budget.
const START_BATCH = 100;
const START_ROUNDS_MAX = 6;

const ADMIN = 'qf_console_admin_' + randomBytes(16).toString('hex');
const READER = 'qf_console_reader_' + randomBytes(16).toString('hex');
/// Ids of 200 characters, for the layout check.
const LONG_PROCESS = 'orders_' + 'p'.repeat(193);
const LONG_TASK = 'reserve_' + 'r'.repeat(192);
const sha = (s) => createHash('sha256').update(s).digest('hex');

const dir = mkdtempSync(join(tmpdir(), 'qflow-console-'));
let server;
let browser;

const watchdog = setTimeout(() => {
  console.error(`console test: over ${RUN_MS_MAX} ms, stopping`);
  cleanup();
  process.exit(1);
}, RUN_MS_MAX);

function cleanup() {
  clearTimeout(watchdog);
  if (server && server.exitCode === null) { server.kill('SIGTERM'); }
  rmSync(dir, { recursive: true, force: true });
}

/// The server, and a check that it is the one answering on its address.
async function startServer() {
  const base = await spawnServer();
  const health = await fetch(base + '/healthz', { signal: AbortSignal.timeout(STEP_MS_MAX) });
  assert.equal(await health.text(), 'ok\n', `${base}/healthz`);
  return base;
}

async function spawnServer() {
  writeFileSync(join(dir, 'qflow.toml'), [
    'listen = "127.0.0.1:0"',
    '',
    '[[tokens]]', 'name = "console-admin"', `sha256 = "${sha(ADMIN)}"`,
    'scopes = ["read", "operate", "deploy"]', '',
    '[[tokens]]', 'name = "console-reader"', `sha256 = "${sha(READER)}"`, 'scopes = ["read"]', '',
  ].join('\n'));
  server = spawn(QFLOW, ['serve', '--demo', '--config', join(dir, 'qflow.toml'), '--db', join(dir, 'qflow.sqlite')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  return await new Promise((resolve, reject) => {
    const limit = setTimeout(() => reject(new Error('no banner from qflow serve')), STEP_MS_MAX);
    let said = '';
    server.stderr.on('data', (chunk) => {
      said += chunk.toString();
      // The whole address: stderr may arrive cut in the middle of the banner.
      const m = said.match(/qflow: serving http:\/\/(\S+)\s/);
      if (m) { clearTimeout(limit); resolve('http://' + m[1]); }
    });
    server.once('exit', (code) => reject(new Error(`qflow serve exited ${code}: ${said}`)));
  });
}

async function api(base, method, path, body) {
  const r = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(STEP_MS_MAX),
  });
  const text = await r.text();
  assert.ok(r.ok, `${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

async function until(what, check, ms = STEP_MS_MAX) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) { return v; }
    if (Date.now() > end) { throw new Error(`timed out waiting for ${what}`); }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/// Starts demo instances until one has exhausted its budget with GATEWAY_UNAVAILABLE
/// (the demo's script gives that fate to about one instance in twenty).
async function failedInstance(base) {
  for (let round = 0; round < START_ROUNDS_MAX; round++) {
    await Promise.all(Array.from({ length: START_BATCH }, () =>
      api(base, 'POST', '/v1/processes/orders/instances', { variables: { amount: 12 } })));
    await until('every instance to settle', async () =>
      (await api(base, 'GET', '/v1/instances?state=running&limit=1')).items.length === 0, 60_000);
    const failed = await api(base, 'GET', '/v1/instances?state=failed&failure_code=GATEWAY_UNAVAILABLE&limit=1');
    if (failed.items.length > 0) { return failed.items[0].id; }
  }
  throw new Error('no instance exhausted its budget');
}

async function shot(page, name, fullPage = true) {
  if (WRITE_SHOTS) {
    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage });
  }
}

async function signIn(context, base, token) {
  const page = await context.newPage();
  page.setDefaultTimeout(STEP_MS_MAX);
  await page.goto(base + '/console/');
  await page.waitForURL(/\/console\/sign-in$/);
  await page.getByLabel('API token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(/\/console\/instances$/);
  return page;
}

async function noHorizontalScroll(page) {
  return await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1);
}

test('the operator console in a real browser', { timeout: RUN_MS_MAX - 5_000 }, async (t) => {
  const base = await startServer();
  try {
    const failedId = await failedInstance(base);
    const fixed = await api(base, 'POST', '/v1/deployments', {
      source: readFileSync(join(here, 'orders-fixed.bpmn'), 'utf8'),
    });
    assert.equal(fixed.id, 2);

    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
    const admin = await browser.newContext({ viewport: { width: 1280, height: 800 } });

    await t.test('sign in', async () => {
      const page = await admin.newPage();
      await page.goto(base + '/console/sign-in');
      await shot(page, 'sign-in', false);
      await page.getByLabel('API token').fill('not-a-token');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('alert').waitFor();
      await page.close();
      const cookies = await admin.cookies();
      assert.equal(cookies.length, 0, 'a wrong token gets no session');
    });

    const page = await signIn(admin, base, ADMIN);
    const [cookie] = await admin.cookies();
    assert.equal(cookie.name, 'qflow_session');
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, 'Strict');

    await t.test('find a FAILED instance by its failure code', async () => {
      await page.locator('select[name="state"]').selectOption('failed');
      const failedCount = Number(await page.locator('#counts strong[data-state="failed"]').textContent());
      assert.ok(failedCount >= 1, 'the counts by state show FAILED instances');
      await page.getByLabel('Failure code').fill('GATEWAY_UNAVAILABLE');
      await page.getByLabel('Node', { exact: true }).fill('charge');
      await page.getByRole('button', { name: 'Filter' }).click();
      await page.waitForURL(/failure_code=GATEWAY_UNAVAILABLE/);
      assert.match(page.url(), /node=charge/);
      const rows = page.locator('#instances tbody tr');
      assert.ok(await rows.count() >= 1);
      for (const code of await page.locator('#instances tbody td:nth-child(3)').allTextContents()) {
        assert.equal(code.trim(), 'GATEWAY_UNAVAILABLE');
      }
      await page.getByRole('link', { name: failedId }).waitFor();
      await shot(page, 'instances');
    });

    await t.test('its attempts, and the failed node highlighted on the diagram', async () => {
      await page.getByRole('link', { name: failedId }).click();
      await page.waitForURL(new RegExp(`/console/instances/${failedId}$`));
      await page.locator('#diagram[data-state="rendered"]').waitFor();
      const marked = await page.locator('#diagram').getAttribute('data-marked');
      assert.match(marked, /\bcharge:qf-failed\b/);
      // bpmn-js puts the marker class on the element's group in the drawing.
      await page.locator('#diagram g.djs-element.qf-failed[data-element-id="charge"]').waitFor();
      assert.equal((await page.locator('#failure-code').textContent()).trim(), 'GATEWAY_UNAVAILABLE');
      const attempts = page.locator('#attempts tbody tr', { hasText: 'charge' });
      assert.equal(await attempts.count(), 4, 'four attempts of charge, each failed');
      assert.equal(await page.locator('#attempt-timeline rect.a-failed').count(), 4);
      await page.locator('#attempt-timeline rect.backoff').first().waitFor();
      await shot(page, 'instance');
    });

    await t.test('a forged post is refused and changes nothing', async () => {
      const r = await page.request.post(`${base}/console/instances/${failedId}/cancel`, {
        form: { csrf: 'forged' }, maxRedirects: 0,
      });
      assert.equal(r.status(), 403);
      const still = await api(base, 'GET', `/v1/instances/${failedId}`);
      assert.equal(still.instance.status, 'failed');
    });

    await t.test('migrate: dry run, read the diff, confirm', async () => {
      await page.getByRole('link', { name: 'Migrate…' }).click();
      await page.locator('select[name="target"]').selectOption('2');
      await page.getByRole('button', { name: 'Map nodes' }).click();
      const mapping = page.locator('select[name="map.charge"]');
      assert.equal(await mapping.inputValue(), 'charge_v2', 'charge is suggested onto charge_v2');
      assert.equal(await page.locator('select[name="map.reserve"]').inputValue(), 'reserve');
      await shot(page, 'migrate-map');
      await page.getByRole('button', { name: 'Dry run' }).click();
      const diff = await page.locator('#migration-results pre.diff').textContent();
      assert.match(diff, /attempts: \{"charge":4\} -> \{"charge_v2":4\}/);
      assert.match(diff, /"node":"charge_v2"/);
      assert.match(await page.locator('#migration-results').textContent(), /would migrate/);
      const still = await api(base, 'GET', `/v1/instances/${failedId}`);
      assert.equal(still.instance.deployment, 1, 'a dry run writes nothing');
      await shot(page, 'migrate-dry-run');
      await page.getByRole('button', { name: /^Confirm: migrate 1 instance/ }).click();
      assert.match(await page.locator('#migration-results').textContent(), /migrated/);
      await shot(page, 'migrate-result');
      const moved = await api(base, 'GET', `/v1/instances/${failedId}`);
      assert.equal(moved.instance.deployment, 2);
      assert.equal(moved.instance.status, 'failed');
    });

    await t.test('resume, and see the instance complete', async () => {
      await page.getByRole('link', { name: failedId }).click();
      await page.locator('#diagram[data-state="rendered"]').waitFor();
      assert.match(await page.locator('#diagram').getAttribute('data-marked'), /\bcharge_v2:qf-failed\b/);
      await page.getByRole('link', { name: 'Resume (keep budget)' }).click();
      await shot(page, 'confirm', false);
      await page.getByRole('button', { name: /^Confirm: resume/ }).click();
      await page.getByRole('status').waitFor();
      await until('the instance to complete', async () => {
        await page.reload();
        return (await page.locator('dl.facts .badge').first().textContent()).trim() === 'COMPLETED';
      });
      await page.locator('#diagram[data-state="rendered"]').waitFor();
      const ok = page.locator('#attempts tbody tr', { hasText: 'charge_v2' });
      assert.equal(await ok.count(), 1);
      assert.match(await ok.textContent(), /ok/);
      assert.match(await page.locator('#audit').textContent(), /console-admin.*resume|resume/);
      await shot(page, 'instance-completed');
    });

    await t.test('incidents, deployments and the retry preview', async () => {
      await page.getByRole('link', { name: 'Incidents', exact: true }).click();
      await page.locator('table.incidents').waitFor();
      await shot(page, 'incidents');
      await page.getByRole('link', { name: 'Deployments', exact: true }).click();
      const rows = page.locator('#deployments tbody tr');
      assert.equal(await rows.count(), 2);
      assert.match(await rows.first().textContent(), /blocked by/);
      await shot(page, 'deployments');
      await rows.first().getByRole('link', { name: 'Retry preview' }).click();
      await page.locator('svg.chart[data-node="charge"]').waitFor();
      assert.match(await page.locator('main').textContent(), /maxAttempts=4 initialInterval=200ms backoffMultiplier=2 maxInterval=2s jitter=full/);
      await shot(page, 'retries');
    });

    await t.test('readable on a narrow window, keyboard reachable', async () => {
      const narrow = await browser.newContext({ viewport: { width: 390, height: 800 } });
      const p = await signIn(narrow, base, ADMIN);
      await p.goto(`${base}/console/instances/${failedId}`);
      await p.locator('#diagram[data-state="rendered"]').waitFor();
      assert.ok(await noHorizontalScroll(p), 'no horizontal scrolling at 390 px');
      await shot(p, 'instance-narrow');
      // The first Tab lands on the skip link, which leads to the content.
      await p.keyboard.press('Tab');
      assert.equal(await p.evaluate(() => document.activeElement.textContent), 'Skip to content');
      await narrow.close();
      assert.ok(await noHorizontalScroll(page), 'no horizontal scrolling at 1280 px');
    });

    await t.test('200-character ids do not break the layout', async () => {
      const source = readFileSync(join(repo, 'cli', 'examples', 'orders.bpmn'), 'utf8')
        .replaceAll('"orders"', `"${LONG_PROCESS}"`)
        .replace(/(id|sourceRef|targetRef|bpmnElement)="reserve"/g, `$1="${LONG_TASK}"`);
      const dep = await api(base, 'POST', '/v1/deployments', { source });
      const started = await api(base, 'POST', '/v1/instances', { deployment: dep.id, variables: { note: 'x'.repeat(200) } });
      for (const [width, height] of [[1280, 800], [390, 800]]) {
        const ctx = await browser.newContext({ viewport: { width, height } });
        const p = await signIn(ctx, base, ADMIN);
        for (const path of [`/console/instances/${started.instance}`, `/console/instances?deployment=${dep.id}`, '/console/deployments', `/console/migrate?source=${dep.id}&target=${dep.id}`]) {
          await p.goto(base + path);
          assert.ok(await noHorizontalScroll(p), `no horizontal scrolling at ${width} px on ${path}`);
        }
        await p.goto(`${base}/console/instances/${started.instance}`);
        await p.locator('#diagram[data-state="rendered"]').waitFor();
        if (width === 1280) { await shot(p, 'long-ids'); }
        await ctx.close();
      }
    });

    await t.test('a read-only token sees no action buttons; its posts are refused', async () => {
      const readerContext = await browser.newContext({ viewport: { width: 1280, height: 800 } });
      const reader = await signIn(readerContext, base, READER);
      const other = await api(base, 'GET', '/v1/instances?state=failed&limit=1');
      const target = other.items[0].id;
      await reader.goto(`${base}/console/instances/${target}`);
      await reader.locator('#diagram[data-state="rendered"]').waitFor();
      assert.equal(await reader.locator('#actions').count(), 0);
      for (const name of ['Resume (keep budget)', 'Resume (reset budget)', 'Retry now', 'Cancel instance', 'Migrate…']) {
        assert.equal(await reader.getByRole('link', { name }).count(), 0, `no ${name} for read-only`);
      }
      await shot(reader, 'read-only');
      // Even with its own valid CSRF token, the read-only session may not act.
      const csrf = await reader.locator('input[name="csrf"]').first().getAttribute('value');
      const r = await reader.request.post(`${base}/console/instances/${target}/cancel`, {
        form: { csrf }, maxRedirects: 0,
      });
      assert.equal(r.status(), 403);
      assert.match(await r.text(), /lacks the `operate` scope/);
      const confirm = await reader.request.get(`${base}/console/instances/${target}/confirm?action=cancel`);
      assert.equal(confirm.status(), 403);
      const still = await api(base, 'GET', `/v1/instances/${target}`);
      assert.equal(still.instance.status, 'failed');
      await readerContext.close();
    });
  } finally {
    if (browser) { await browser.close(); }
    cleanup();
  }
});
