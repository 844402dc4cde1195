// The console's browser test (issue 12): `qflow serve --demo` on a loopback port with a
// fresh SQLite file and tokens this test configures, driven in Debian's headless
// Chromium by playwright-core. It signs in, finds a FAILED instance by its failure code,
// sees its attempts and the failed node on the diagram, migrates it (dry run, diff,
// confirm), resumes it and sees it complete; then a read-only token sees no action
// buttons, and forged posts are refused. Last, the repair matrix (issue 30,
// cli/tests/repair_matrix.rs) for every task kind the demo server runs without handlers:
// a q:topic pull task, a Zeebe job, a Camunda 7 external task, a user task and a script
// task are made FAILED over the API (a worker token fails them, the task list's BPMN
// error, a script reading a missing variable), then migrated in the console onto a
// version that renames the task, resumed with either budget and finished over the API;
// one plan the engine refuses shows the refusal banner. Screenshots of each page go to
// docs/console/.
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
/// The pull tasks' workers: the `worker` scope only (docs/api.md, "Tokens and scopes").
const WORKER = 'qf_console_worker_' + randomBytes(16).toString('hex');
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
    '[[tokens]]', 'name = "console-worker"', `sha256 = "${sha(WORKER)}"`, 'scopes = ["worker"]', '',
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
  return await apiAs(ADMIN, base, method, path, body);
}

async function apiAs(token, base, method, path, body) {
  const r = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
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

/// The repair matrix of cli/tests/repair_matrix.rs, for the task kinds `qflow serve --demo`
/// runs without in-process handlers. Each kind's v1 has a task `charge` that fails; its v2
/// renames it `collect` and changes its policy (more Zeebe `retries`, a fixed script).
/// - `failure`: how the instance is made FAILED (pull tasks: `exhaust` every attempt of
///   the budget, `final`: fail with no retries left at once, or an uncaught `bpmn-error`;
///   the user task: the task list's BPMN error; the script: it reads a missing variable).
/// - `named`: both versions give the task the same name, so the migrate page suggests
///   `collect` by name; otherwise the page keeps the id and the test picks `collect`.
/// - `budget`: how the console resumes it; `left`: the attempts a pull task has left when
///   offered again after that resume (keep: the one attempt a resume is for; reset: the
///   target's `retries`).
/// - `diff`: the dry run's lines, exactly.
const OLD_TASK = 'charge';
const NEW_TASK = 'collect';
const WORKER_ID = 'console-worker';
const failureLine = (code, detail) =>
  `failure: {"code":"${code}","detail":${JSON.stringify(detail)},"node":"charge"} -> ` +
  `{"code":"${code}","detail":${JSON.stringify(detail)},"node":"collect"}`;
const FRONTIER = 'frontier: ["charge"] -> ["collect"]';
const MATRIX = [
  { kind: 'q:topic pull task', process: 'matrix_topic', pull: 'native', failure: 'exhaust',
    code: 'PULL_TASK_FAILED', named: true, budget: 'keep', left: 1,
    diff: ['attempts: {"charge":3} -> {"collect":3}', failureLine('PULL_TASK_FAILED', 'exhausted'),
      FRONTIER, 'pull_retries: {"charge":0} -> {"collect":0}'],
    task: (id, fixed, name) => `<serviceTask id="${id}"${name} q:topic="charge-q"/>` },
  { kind: 'Zeebe job', process: 'matrix_zeebe', pull: 'zeebe', failure: 'final',
    code: 'PULL_TASK_FAILED', named: false, budget: 'reset', left: 5,
    diff: [failureLine('PULL_TASK_FAILED', 'exhausted'), FRONTIER, 'pull_retries: {"charge":0} -> {"collect":0}'],
    task: (id, fixed, name) => `<serviceTask id="${id}"${name}><extensionElements>
        <zeebe:taskDefinition type="charge-z" retries="${fixed ? 5 : 2}"/></extensionElements></serviceTask>` },
  { kind: 'Camunda 7 external task', process: 'matrix_camunda', pull: 'camunda', failure: 'bpmn-error',
    code: 'UNCAUGHT_BPMN_ERROR', named: false, budget: 'keep', left: 1,
    diff: [failureLine('UNCAUGHT_BPMN_ERROR', 'REFUSED'), FRONTIER],
    task: (id, fixed, name) => `<serviceTask id="${id}"${name} camunda:type="external" camunda:topic="charge-c"/>` },
  { kind: 'user task', process: 'matrix_user', user: true, failure: 'bpmn-error',
    code: 'UNCAUGHT_BPMN_ERROR', named: true, budget: 'reset',
    diff: [failureLine('UNCAUGHT_BPMN_ERROR', 'REFUSED'), FRONTIER],
    task: (id, fixed, name) => `<userTask id="${id}"${name}/>` },
  { kind: 'script task', process: 'matrix_script', failure: 'expression',
    code: 'EXPRESSION_FAILED', named: false, budget: 'keep',
    // No frontier line: a script task is no wait.
    diff: [failureLine('EXPRESSION_FAILED', null)],
    // v1 reads `qty`, which no instance has; v2's script is fixed.
    task: (id, fixed, name) => `<scriptTask id="${id}"${name}><extensionElements>
        <q:script expression="${fixed ? 'price * 2' : 'price * qty'}" resultVariable="total"/></extensionElements></scriptTask>` },
];

function matrixModel(cell, id, fixed) {
  const name = cell.named ? ' name="Charge the customer"' : '';
  return `<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:q="urn:qflow:bpmn:1"
             xmlns:camunda="http://camunda.org/schema/1.0/bpmn"
             xmlns:zeebe="http://camunda.org/schema/zeebe/1.0"
             id="defs-${cell.process}" targetNamespace="urn:qflow:console-matrix">
  <process id="${cell.process}" isExecutable="true">
    <startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="${id}"/>
    ${cell.task(id, fixed, name)}
    <sequenceFlow id="f1" sourceRef="${id}" targetRef="e"/><endEvent id="e"/>
  </process>
</definitions>`;
}

/// A pull task's worker in each dialect (docs/workers.md): the native API, Camunda 7's
/// external-task endpoints and Zeebe's job endpoints, with the `worker` token. `fetch`
/// long-polls at most a second and returns the tasks locked, in one shape.
const WORKERS = {
  native: {
    fetch: async (base, topic) => (await apiAs(WORKER, base, 'POST', '/v1/external-tasks/fetch-and-lock', {
      worker_id: WORKER_ID, max_tasks: 10, wait_ms: 1000, topics: [{ name: topic, lock_duration_ms: 60_000 }],
    })).map((t) => ({ id: t.id, instance: t.instance, node: t.node, retries: t.retries })),
    // `retries`: the attempts left; 0 ends the instance FAILED.
    fail: (base, t, retries) => apiAs(WORKER, base, 'POST', `/v1/external-tasks/${encodeURIComponent(t.id)}/failure`, {
      worker_id: WORKER_ID, retries, retry_timeout_ms: 0, error_message: 'card gateway down',
    }),
    complete: (base, t) => apiAs(WORKER, base, 'POST', `/v1/external-tasks/${encodeURIComponent(t.id)}/complete`, {
      worker_id: WORKER_ID, variables: { receipt: 'r-1' },
    }),
    topic: 'charge-q',
  },
  camunda: {
    fetch: async (base, topic) => (await apiAs(WORKER, base, 'POST', '/engine-rest/external-task/fetchAndLock', {
      workerId: WORKER_ID, maxTasks: 10, asyncResponseTimeout: 1000, topics: [{ topicName: topic, lockDuration: 60_000 }],
    })).map((t) => ({ id: t.id, instance: t.processInstanceId, node: t.activityId, retries: t.retries })),
    // An uncaught BPMN error: nothing in the model catches REFUSED.
    fail: (base, t, _retries) => apiAs(WORKER, base, 'POST', `/engine-rest/external-task/${encodeURIComponent(t.id)}/bpmnError`, {
      workerId: WORKER_ID, errorCode: 'REFUSED', errorMessage: 'card refused',
    }),
    complete: (base, t) => apiAs(WORKER, base, 'POST', `/engine-rest/external-task/${encodeURIComponent(t.id)}/complete`, {
      workerId: WORKER_ID,
    }),
    topic: 'charge-c',
  },
  zeebe: {
    fetch: async (base, type) => (await apiAs(WORKER, base, 'POST', '/v2/jobs/activation', {
      type, worker: WORKER_ID, timeout: 60_000, maxJobsToActivate: 10, requestTimeout: 1000,
    })).jobs.map((j) => ({ id: j.jobKey, instance: j.processInstanceKey, node: j.elementId, retries: j.retries })),
    fail: (base, t, retries) => apiAs(WORKER, base, 'POST', `/v2/jobs/${encodeURIComponent(t.id)}/failure`, {
      retries, errorMessage: 'card gateway down',
    }),
    complete: (base, t) => apiAs(WORKER, base, 'POST', `/v2/jobs/${encodeURIComponent(t.id)}/completion`, {}),
    topic: 'charge-z',
  },
};

/// The one task of `cell`'s instance its worker is offered, locked (bounded: the worker
/// polls for STEP_MS_MAX at most).
async function lockPullTask(base, cell) {
  const w = WORKERS[cell.pull];
  return await until(`a ${cell.kind} offered to its worker`, async () => {
    const tasks = await w.fetch(base, w.topic);
    assert.ok(tasks.length <= 1, `one task at most: ${JSON.stringify(tasks)}`);
    if (tasks.length === 0) { return null; }
    // Camunda 8 names an instance by its 64-bit key, the other APIs by qflow's id.
    const expected = cell.pull === 'zeebe' ? cell.key : cell.instance;
    assert.equal(tasks[0].instance, expected, `the task is ${cell.kind}'s instance's`);
    return tasks[0];
  });
}

async function instanceNow(base, id) {
  return await api(base, 'GET', `/v1/instances/${id}`);
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
    await t.test('the repair matrix: migrate a FAILED pull, user or script task, resume it, see it complete', async (st) => {
      // Over the API: both versions of each kind, one instance each, made FAILED.
      for (const cell of MATRIX) {
        cell.source = (await api(base, 'POST', '/v1/deployments', { source: matrixModel(cell, OLD_TASK, false) })).id;
        cell.target = (await api(base, 'POST', '/v1/deployments', { source: matrixModel(cell, NEW_TASK, true) })).id;
        assert.notEqual(cell.source, cell.target, `${cell.kind}: two versions`);
        cell.instance = (await api(base, 'POST', '/v1/instances', {
          deployment: cell.source, variables: { price: 5 },
        })).instance;
        if (cell.pull === 'zeebe') {
          // The instance's Camunda 8 key, which its jobs carry: the only instance of its
          // process so far.
          const found = await api(base, 'POST', '/v2/process-instances/search', {
            filter: { processDefinitionId: cell.process },
          });
          assert.equal(found.items.length, 1, `${cell.kind}: one instance of ${cell.process}`);
          cell.key = found.items[0].processInstanceKey;
          assert.match(cell.key, /^[0-9]+$/, `${cell.kind}: a Camunda 8 key`);
        }
      }
      for (const cell of MATRIX) {
        if (cell.pull) {
          // The worker fails every attempt with one retry less (`exhaust`: 3, 2, 1 left
          // when offered), or fails it with no retries left at once (`final`), or answers
          // a BPMN error nothing catches.
          for (let attempt = 1; ; attempt++) {
            const task = await lockPullTask(base, cell);
            assert.equal(task.node, OLD_TASK);
            const left = cell.failure === 'exhaust' ? task.retries - 1 : 0;
            await WORKERS[cell.pull].fail(base, task, left);
            if (left === 0 || cell.failure === 'bpmn-error') {
              assert.equal(attempt, cell.failure === 'exhaust' ? 3 : 1, `${cell.kind}: attempts until FAILED`);
              break;
            }
          }
        } else if (cell.user) {
          // The task list's BPMN error, which nothing catches.
          await until('the user task in the task list', async () =>
            (await api(base, 'GET', `/v1/user-tasks?deployment=${cell.source}`)).items.some((u) => u.node === OLD_TASK));
          await api(base, 'POST', `/v1/instances/${cell.instance}/user-tasks/${OLD_TASK}/bpmn-error`, {
            code: 'REFUSED', message: 'the customer said no',
          });
        } // The script fails by itself: it reads `qty`, which the instance does not have.
        const failed = await until(`the ${cell.kind}'s instance to be FAILED`, async () => {
          const v = await instanceNow(base, cell.instance);
          return v.instance.status === 'failed' ? v : null;
        });
        assert.equal(failed.instance.failure_code, cell.code, cell.kind);
      }

      /// Opens the FAILED instance from the listing of its deployment, and follows
      /// "Migrate…" to the mapping of its nodes onto `target`.
      async function mapOnto(cell, target) {
        await page.goto(`${base}/console/instances?deployment=${cell.source}&state=failed`);
        await page.getByRole('link', { name: cell.instance }).click();
        await page.waitForURL(new RegExp(`/console/instances/${cell.instance}$`));
        assert.equal((await page.locator('#failed-node').textContent()).trim(), OLD_TASK, cell.kind);
        assert.equal((await page.locator('#failure-code').textContent()).trim(), cell.code, cell.kind);
        assert.deepEqual(JSON.parse(await page.locator('#diagram').getAttribute('data-failed')), [OLD_TASK]);
        await page.getByRole('link', { name: 'Migrate…' }).click();
        await page.waitForURL(/\/console\/migrate\?/);
        await page.locator('select[name="target"]').selectOption(String(target));
        await page.getByRole('button', { name: 'Map nodes' }).click();
        await page.locator('#mapping').waitFor();
        assert.equal(await page.locator('select[name="map.s"]').inputValue(), 's', 'the start event keeps its id');
        return page.locator(`select[name="map.${OLD_TASK}"]`);
      }

      await st.test('a task with attempts onto a user task: the refusal banner, nothing changed', async () => {
        const topic = MATRIX.find((c) => c.pull === 'native');
        const user = MATRIX.find((c) => c.user);
        const before = await instanceNow(base, topic.instance);
        const mapping = await mapOnto(topic, user.target);
        // Both tasks are named alike: the suggestion is by name.
        assert.equal(await mapping.inputValue(), NEW_TASK);
        await page.getByRole('button', { name: 'Dry run' }).click();
        const banner = page.locator('#migration-refused');
        await banner.waitFor();
        assert.match(await banner.getAttribute('class'), /\bnotice\b.*\bbad\b|\bbad\b.*\bnotice\b/);
        assert.match(await banner.textContent(), /1 of 1 instance would be refused/);
        const row = page.locator('#migration-results tbody tr', { hasText: topic.instance });
        assert.match(await row.locator('p.notice.bad').textContent(),
          /task `charge` has attempts and maps to `collect`, a user task/);
        assert.match(await row.textContent(), /refused/);
        assert.equal(await page.locator('#confirm').count(), 0, 'nothing to confirm when every instance is refused');
        assert.deepEqual(await instanceNow(base, topic.instance), before, 'the refusal changed nothing');
      });

      for (const cell of MATRIX) {
        await st.test(`${cell.kind}: migrate, resume (${cell.budget} budget), complete`, async () => {
          const before = await instanceNow(base, cell.instance);
          assert.equal(before.instance.deployment, cell.source);
          const mapping = await mapOnto(cell, cell.target);
          // Named alike, `collect` is suggested by its name; otherwise the id is kept
          // (`collect` neither is `charge` nor starts with it) and the mapping is set here.
          assert.equal(await mapping.inputValue(), cell.named ? NEW_TASK : '', `${cell.kind}: the suggestion`);
          if (!cell.named) { await mapping.selectOption(NEW_TASK); }

          await page.getByRole('button', { name: 'Dry run' }).click();
          const results = page.locator('#migration-results');
          assert.match(await results.textContent(), /would migrate/);
          assert.equal(await page.locator('#migration-refused').count(), 0, 'no refusal banner');
          const diff = (await results.locator('pre.diff').textContent()).trim().split('\n');
          assert.deepEqual(diff, cell.diff, `${cell.kind}: the dry run's diff`);
          assert.deepEqual(await instanceNow(base, cell.instance), before, 'a dry run writes nothing');

          await page.getByRole('button', { name: /^Confirm: migrate 1 instance/ }).click();
          await page.locator('#migration-summary.ok').waitFor();
          assert.match(await results.textContent(), /migrated/);
          assert.equal(await page.locator('#migration-refused').count(), 0, 'no refusal banner');
          const moved = await instanceNow(base, cell.instance);
          assert.equal(moved.instance.deployment, cell.target);
          assert.equal(moved.instance.status, 'failed', 'a migrated FAILED instance stays FAILED');

          await results.getByRole('link', { name: cell.instance }).click();
          await page.waitForURL(new RegExp(`/console/instances/${cell.instance}$`));
          assert.equal((await page.locator('#failed-node').textContent()).trim(), NEW_TASK);
          await page.getByRole('link', { name: `Resume (${cell.budget} budget)` }).click();
          await page.getByRole('button', { name: /^Confirm: resume/ }).click();
          await page.getByRole('status').waitFor();

          // The work is done under the new name: the worker's next attempt, or the task list.
          if (cell.pull) {
            const task = await lockPullTask(base, cell);
            assert.equal(task.node, NEW_TASK, 'offered under its new name');
            assert.equal(task.retries, cell.left, `${cell.kind}: attempts left after a resume with the ${cell.budget} budget`);
            await WORKERS[cell.pull].complete(base, task);
          } else if (cell.user) {
            await until('the user task offered again under its new name', async () =>
              (await api(base, 'GET', `/v1/user-tasks?deployment=${cell.target}`)).items.some((u) => u.node === NEW_TASK));
            await api(base, 'POST', `/v1/instances/${cell.instance}/user-tasks/${NEW_TASK}/complete`, { variables: { ok: true } });
          }
          const done = await until(`the ${cell.kind}'s instance to complete`, async () => {
            const v = await instanceNow(base, cell.instance);
            return v.instance.status === 'completed' ? v : null;
          });
          if (cell.process === 'matrix_script') { assert.equal(done.snapshot.variables.total, 10, 'the fixed script ran'); }
          await page.reload();
          assert.equal((await page.locator('dl.facts .badge').first().textContent()).trim(), 'COMPLETED');
          // The audit names the console's token for the migration and the resume, with the budget.
          const audit = (await page.locator('#audit tbody tr').evaluateAll((rows) =>
            rows.map((r) => [...r.querySelectorAll('td')].slice(1, 4).map((td) => td.textContent.trim()).join(' '))));
          assert.ok(audit.includes(`console-admin migrate from=${cell.source} to=${cell.target} mapping={"charge": "collect"}`), audit.join(' | '));
          assert.ok(audit.includes(`console-admin resume budget=${cell.budget}`), audit.join(' | '));
          if (cell.pull) {
            // The history keeps the attempts under the name they ran under.
            const failed = page.locator('#attempts tbody tr', { hasText: OLD_TASK });
            if (cell.failure !== 'bpmn-error') {
              assert.equal(await failed.count(), cell.failure === 'exhaust' ? 3 : 1, `${cell.kind}: the failed attempts of charge`);
            }
            const ok = page.locator('#attempts tbody tr', { hasText: NEW_TASK });
            assert.equal(await ok.count(), 1, `${cell.kind}: one attempt of collect`);
            assert.match(await ok.textContent(), /ok/);
          }
        });
      }
    });
  } finally {
    if (browser) { await browser.close(); }
    cleanup();
  }
});
