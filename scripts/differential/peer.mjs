// Runs one BPMN model in the peer engine `bpmn-engine` with a qflow scenario file and
// prints, as one JSON object on stdout, what happened: the activities that completed (id →
// count, with their BPMN type), the activities still waiting, and the end state.
//
// Usage: node peer.mjs MODEL.bpmn SCENARIO.json
//
// The scenario is the file `qflow simulate` reads (docs/simulate.md), so both engines get
// the same inputs. Only the control-flow part of it is played here:
//   - `variables` start the instance;
//   - `tasks.<id>`: every service, send and business-rule task gets a scripted service
//     (attempt n uses entry n, the last entry repeats, no entry = `ok` at once). `ok`
//     merges `outputs` into the variables, `bpmn_error` throws an error with that code,
//     `fail`/`panic`/`time_limit` fail the service (the peer has no retries), `hang`
//     never answers. `after_ms` is virtual time;
//   - `events`: `complete_user_task` signals the user task, `message` signals the message
//     with that name, `signal` broadcasts the signal with that name; `cancel` and the
//     operator events are refused (exit 2).
// Time is virtual, as in qflow's simulator: the peer's timers go into the same queue as
// scripted results and events, and the clock jumps to the earliest. Simultaneous
// deliveries go task results first, then scripted events (file order), then timers.
// Conditions on sequence flows are read as the common subset of CEL and JavaScript
// (identifiers, literals, comparisons, &&, ||, !, parentheses) over the variables.
//
// Exit status: 0 the run was played (whatever state it ended in), 2 usage error or a
// scenario this harness cannot play. Nothing here touches the network or the disk
// beyond reading the two files.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { Engine } from 'bpmn-engine';
import * as Elements from 'bpmn-elements';
import BpmnModdle from 'bpmn-moddle';

const here = path.dirname(fileURLToPath(import.meta.url));
const PEER_PACKAGE = path.join(here, 'node_modules', 'bpmn-engine', 'package.json');
const PEER = `bpmn-engine@${JSON.parse(fs.readFileSync(PEER_PACKAGE, 'utf8')).version}`;

/** Deliveries past this many are refused: a model that loops forever stops here. */
const DELIVERIES_MAX = 10_000;
/** Virtual time after which nothing is delivered, as qflow's default horizon (one day). */
const HORIZON_DEFAULT_MS = 86_400_000;
const SERVICE_TYPES = new Set(['bpmn:ServiceTask', 'bpmn:SendTask', 'bpmn:BusinessRuleTask']);

function usage(message) {
  process.stderr.write(`peer.mjs: ${message}\nusage: node peer.mjs MODEL.bpmn SCENARIO.json\n`);
  process.exit(2);
}

// ------------------------------------------------------------------ the virtual clock
// A queue of deliveries ordered by (at_ms, class, seq); class 0 task results, 1 scripted
// events, 2 timers, as in qflow_core::sim.
class Clock {
  constructor(startMs) {
    this.nowMs = startMs;
    this.queue = [];
    this.seq = 0;
  }
  schedule(atMs, cls, run) {
    const entry = { atMs, cls, seq: this.seq++, run, cancelled: false };
    this.queue.push(entry);
    return entry;
  }
  next() {
    let best = -1;
    for (let i = 0; i < this.queue.length; i++) {
      const e = this.queue[i];
      if (e.cancelled) continue;
      if (best < 0 || before(e, this.queue[best])) best = i;
    }
    if (best < 0) return null;
    return this.queue.splice(best, 1)[0];
  }
}

function before(a, b) {
  if (a.atMs !== b.atMs) return a.atMs < b.atMs;
  if (a.cls !== b.cls) return a.cls < b.cls;
  return a.seq < b.seq;
}

// ------------------------------------------------------------------ conditions
// The common subset of CEL and JavaScript. Anything else is refused rather than guessed.
const CONDITION_TOKEN = /\s*(?:(\d+(?:\.\d+)?)|("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(&&|\|\||==|!=|<=|>=|<|>|!|\(|\))|([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*))/y;

function evalCondition(body, variables) {
  const text = body.trim();
  const parts = [];
  let at = 0;
  CONDITION_TOKEN.lastIndex = 0;
  while (at < text.length) {
    CONDITION_TOKEN.lastIndex = at;
    const m = CONDITION_TOKEN.exec(text);
    if (!m) throw new Error(`condition \`${text}\`: cannot read at offset ${at}`);
    at = CONDITION_TOKEN.lastIndex;
    if (m[4] !== undefined) {
      if (m[4] === 'true' || m[4] === 'false' || m[4] === 'null') parts.push(m[4]);
      else parts.push(`v(${JSON.stringify(m[4])})`);
    } else if (m[3] === '==') parts.push('===');
    else if (m[3] === '!=') parts.push('!==');
    else parts.push(m[1] ?? m[2] ?? m[3]);
    while (at < text.length && /\s/.test(text[at])) at++;
  }
  const v = (path) => {
    let value = variables;
    for (const key of path.split('.')) {
      if (value === null || typeof value !== 'object' || !(key in value)) throw new Error(`condition \`${text}\`: no variable \`${path}\``);
      value = value[key];
    }
    return value;
  };
  return Boolean(new Function('v', `return (${parts.join(' ')});`)(v));
}

// ------------------------------------------------------------------ the run
async function main() {
  const [modelPath, scenarioPath] = process.argv.slice(2);
  if (!modelPath || !scenarioPath || process.argv.length !== 4) usage('expected two arguments');
  const source = fs.readFileSync(modelPath, 'utf8');
  const scenario = JSON.parse(fs.readFileSync(scenarioPath, 'utf8'));
  const startMs = scenario.start_at_ms ?? 0;
  const horizonMs = scenario.horizon_ms ?? startMs + HORIZON_DEFAULT_MS;
  const clock = new Clock(startMs);

  const completed = {};
  const calls = {};
  let ended = null;

  // Timers: into the virtual queue, never the real clock.
  const timers = new Elements.Timers({
    setTimeout(fn, ms, ...args) {
      return clock.schedule(clock.nowMs + Math.max(0, Number(ms) || 0), 2, () => fn(...args));
    },
    clearTimeout(entry) {
      if (entry) entry.cancelled = true;
    },
  });

  // Scripted services, one per service-like task.
  function ScriptedService(activity) {
    const id = activity.id;
    let pending = null;
    return {
      type: 'qflow:scripted',
      execute(_executeMessage, callback) {
        const attempt = (calls[id] = (calls[id] ?? 0) + 1);
        const list = scenario.tasks?.[id] ?? [];
        const entry = list[attempt - 1] ?? list[list.length - 1] ?? { outcome: 'ok' };
        if (entry.outcome === 'hang') return;
        pending = clock.schedule(clock.nowMs + (entry.after_ms ?? 0), 0, () => {
          pending = null;
          if (entry.outcome === 'ok') {
            activity.environment.assignVariables(entry.outputs ?? {});
            return callback(null, entry.outputs ?? {});
          }
          const code = entry.code ?? (entry.outcome === 'panic' ? 'HANDLER_PANICKED' : 'HANDLER_TIMEOUT');
          const error = new Error(entry.message || code);
          error.code = code;
          return callback(error);
        });
      },
      discard() {
        if (pending) pending.cancelled = true;
      },
      stop() {
        if (pending) pending.cancelled = true;
      },
    };
  }
  const extensions = {
    qflowDifferential(activity) {
      if (SERVICE_TYPES.has(activity.type)) activity.behaviour.Service = ScriptedService;
    },
  };

  // Conditions without a language, or in CEL, go through evalCondition.
  const scripts = {
    register() {},
    getScript(language, element) {
      if (element?.type !== 'bpmn:SequenceFlow') return undefined;
      if (language && !/cel/i.test(language)) return undefined;
      const body = element.behaviour?.conditionExpression?.body;
      if (body === undefined) return undefined;
      return {
        execute(executionScope, callback) {
          try {
            callback(null, evalCondition(body, executionScope.environment.variables));
          } catch (err) {
            callback(err);
          }
        },
      };
    },
  };

  const noop = () => {};
  const engine = new Engine({
    name: 'differential',
    source,
    timers,
    extensions,
    scripts,
    Logger: () => ({ debug: noop, error: noop, warn: noop }),
  });

  engine.broker.subscribeTmp(
    'event',
    'activity.end',
    (_routingKey, message) => {
      const { id } = message.content;
      completed[id] = (completed[id] ?? 0) + 1;
    },
    { noAck: true }
  );
  engine.once('end', () => (ended ??= { state: 'completed' }));
  engine.once('error', (err) => (ended ??= { state: 'failed', code: err?.code ?? err?.inner?.code ?? null, message: String(err?.message ?? err) }));

  const messages = await idsByName(source, 'bpmn:Message');
  const signals = await idsByName(source, 'bpmn:Signal');
  const settle = async () => {
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
  };

  for (const [i, event] of (scenario.events ?? []).entries()) {
    const at = event.at_ms;
    switch (event.event) {
      case 'complete_user_task':
        clock.schedule(at, 1, () => {
          const waiting = postponed(engine).find((api) => api.id === event.node);
          if (!waiting) return;
          waiting.environment?.assignVariables?.(event.variables ?? {});
          engine.execution.signal({ id: event.node });
        });
        break;
      case 'message': {
        const id = messages.get(event.name);
        if (!id) usage(`events[${i}]: no message named \`${event.name}\` in the model`);
        clock.schedule(at, 1, () => engine.execution.signal({ id }));
        break;
      }
      case 'signal': {
        // A broadcast: the peer delivers a signal by its definition's id to every
        // activity waiting for it.
        const id = signals.get(event.name);
        if (!id) usage(`events[${i}]: no signal named \`${event.name}\` in the model`);
        clock.schedule(at, 1, () => {
          if (event.variables) engine.environment?.assignVariables?.(event.variables);
          engine.execution.signal({ id });
        });
        break;
      }
      default:
        usage(`events[${i}]: event \`${event.event}\` is not played by this harness`);
    }
  }

  await engine.execute({ variables: { ...(scenario.variables ?? {}) } });
  await settle();
  let deliveries = 0;
  let stop = 'idle';
  while (!ended) {
    const entry = clock.next();
    if (!entry) break;
    if (entry.atMs > horizonMs) {
      stop = 'horizon';
      break;
    }
    if (++deliveries > DELIVERIES_MAX) {
      stop = 'max_steps';
      break;
    }
    clock.nowMs = Math.max(clock.nowMs, entry.atMs);
    entry.run();
    await settle();
  }
  if (ended) stop = 'finished';

  const waiting = ended ? [] : postponed(engine).map((api) => api.id).sort();
  const out = {
    peer: PEER,
    state: ended?.state ?? 'running',
    failure_code: ended?.code ?? null,
    failure_message: ended?.message ?? null,
    stop,
    ended_at_ms: clock.nowMs,
    completed: sortKeys(completed),
    waiting,
  };
  process.stdout.write(JSON.stringify(out) + '\n');
  // Pending virtual timers hold nothing real; leave at once.
  process.exit(0);
}

// Every activity that waits, sub-process children included (a sub-process lists itself
// first, then its children).
function postponed(engine) {
  const result = [];
  const seen = new Set();
  const walk = (apis) => {
    for (const api of apis) {
      const key = `${api.id}/${api.executionId}`;
      if (seen.has(key)) continue;
      seen.add(key);
      if (api.type === 'bpmn:SubProcess') walk(api.owner?.execution?.getPostponed?.() ?? []);
      else result.push(api);
    }
  };
  for (const definition of engine.execution?.definitions ?? []) {
    for (const proc of definition.getProcesses?.() ?? []) {
      if (proc.isRunning) walk(proc.getPostponed());
    }
  }
  return result;
}

// Message (or signal) name -> its id, read from the model itself.
async function idsByName(source, type) {
  const { rootElements = [] } = (await new BpmnModdle().fromXML(source)).rootElement;
  const byName = new Map();
  for (const element of rootElements) {
    if (element.$type === type && element.name) byName.set(element.name, element.id);
  }
  return byName;
}

function sortKeys(object) {
  return Object.fromEntries(Object.entries(object).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

main().catch((err) => {
  process.stderr.write(`peer.mjs: ${err?.stack ?? err}\n`);
  process.exit(2);
});
