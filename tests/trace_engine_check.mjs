// Load a Chrome trace JSON with Chrome DevTools' own trace engine (@paulirish/trace_engine,
// the Performance panel's model) and print what the engine made of it as one JSON object.
// Used by tests/test_trace_engine.py, which installs the engine and checks the facts.
//
//   node tests/trace_engine_check.mjs ENGINE_PREFIX TRACE.json
//
// ENGINE_PREFIX is the folder `npm install --prefix` installed the engine into. API (the
// package README): TraceModel.Model.createWithAllHandlers(), await model.parse(events),
// model.parsedTrace() -> {traceEvents, data: {Meta, Renderer, Warnings, ...}};
// Handlers.Threads.threadsInTrace(data) lists the threads the Performance panel draws.

import fs from 'node:fs';
import {createRequire} from 'node:module';
import path from 'node:path';
import {pathToFileURL} from 'node:url';

const [prefix, tracePath] = process.argv.slice(2);
if (!prefix || !tracePath) {
  process.stderr.write('usage: node trace_engine_check.mjs ENGINE_PREFIX TRACE.json\n');
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(prefix), 'package.json'));
const engineMain = require.resolve('@paulirish/trace_engine');
const enginePackage = require('@paulirish/trace_engine/package.json');
const Trace = await import(pathToFileURL(engineMain).href);
// The README: "To run in Node, you'll need to polyfill window.DOMRect"; the package ships one.
const {polyfillDOMRect} = await import(
  pathToFileURL(require.resolve('@paulirish/trace_engine/analyze-trace.mjs')).href);
polyfillDOMRect();

const file = JSON.parse(fs.readFileSync(tracePath, 'utf8'));
const traceEvents = Array.isArray(file) ? file : file.traceEvents;

// Whatever the engine logs while parsing (its way of reporting malformed data) is collected;
// stdout carries only the JSON answer.
const logged = [];
for (const level of ['log', 'info', 'warn', 'error', 'debug']) {
  console[level] = (...args) => logged.push({level, message: args.map(String).join(' ')});
}

const model = Trace.TraceModel.Model.createWithAllHandlers();
let parseError = null;
try {
  await model.parse(traceEvents);
} catch (err) {
  parseError = String(err?.stack ?? err);
}
const parsed = parseError ? null : model.parsedTrace();

const facts = {
  engine_version: enginePackage.version,
  parse_error: parseError,
  logged,
};
if (parsed) {
  const {Meta, Renderer, Warnings} = parsed.data;
  const threadNames = {};
  for (const [pid, threads] of Meta.threadsInProcess) {
    for (const [tid, event] of threads) {
      threadNames[`${pid}:${tid}`] = event.args?.name ?? null;
    }
  }
  const phases = {};
  for (const e of parsed.traceEvents) {
    phases[e.ph] = (phases[e.ph] ?? 0) + 1;
  }
  facts.trace_is_generic = Meta.traceIsGeneric;
  facts.trace_bounds = {min: Meta.traceBounds.min, max: Meta.traceBounds.max};
  facts.thread_names = threadNames;
  // The events the engine holds after parsing (counters live only here: no handler models
  // generic "C" events), by phase, and the counter samples themselves.
  facts.event_phases = phases;
  facts.counters = parsed.traceEvents.filter(e => e.ph === 'C').map(
      e => ({pid: e.pid, name: e.name, ts: e.ts, series: Object.keys(e.args ?? {}).sort()}));
  // Per thread the Performance panel draws: every entry, and whether it made it into the
  // thread's tree (the flame chart is drawn from the tree; the engine skips entries that
  // start inside another but end after it).
  facts.threads = Trace.Handlers.Threads.threadsInTrace(parsed.data).map(thread => ({
    pid: thread.pid,
    tid: thread.tid,
    name: thread.name,
    type: thread.type,
    tree_roots: thread.tree.roots.size,
    tree_max_depth: thread.tree.maxDepth,
    entries: thread.entries.map(e => ({
      ph: e.ph, name: e.name, cat: e.cat, ts: e.ts, dur: e.dur ?? null,
      in_tree: Renderer.entryToNode.has(e),
    })),
  }));
  facts.warnings = Object.fromEntries(
      [...Warnings.perWarning].map(([warning, events]) => [warning, events.length]));
  facts.insight_sets = parsed.insights ? parsed.insights.size : null;
}
process.stdout.write(JSON.stringify(facts) + '\n');
