import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { CtxoptClient } from "../src/client.js";
import { DEFAULT_FLAGS, type Flags } from "../src/flags.js";
import { Action, Decision } from "../src/generated/ctxopt/v1/ctxopt.js";
import { findViolations } from "../src/gemini/history.js";
import { mapContents } from "../src/gemini/mapping.js";
import type { Content } from "../src/gemini/types.js";
import { HostHistoryOptimizer, type HostOptimizerOptions, signedCallsToKeep } from "../src/hostOptimizer.js";
import { PromptBuilder } from "../src/promptBuilder.js";
import { estimateContentsTokens } from "../src/tokens.js";
import { call, model, response, text, user } from "./support/histories.js";
import { closedPort } from "./support/network.js";
import { type RunningServer, startServer } from "./support/server.js";

let server: RunningServer;
const optimizers: HostHistoryOptimizer[] = [];
before(async () => {
  server = await startServer();
});
after(async () => {
  optimizers.forEach((o) => o.close());
  await server.stop();
});

let sessions = 0;
function optimizer(flags: Partial<Flags> = {}, options: HostOptimizerOptions = {}): HostHistoryOptimizer {
  sessions += 1;
  const made = new HostHistoryOptimizer({
    flags: { ...DEFAULT_FLAGS, mode: "true", deadlineMs: 5000, address: server.address, ...flags },
    sessionId: `host-test-${process.pid}-${sessions}`,
    windowTokens: 8_000,
    ...options,
  });
  optimizers.push(made);
  return made;
}

const SESSION_CONTEXT = "<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\nToday's date is Monday.\n</session_context>";

/** A tool session: Gemini CLI's environment turn with the task, then `steps` shell calls with ~`outputTokens` of output each. */
function toolSession(steps: number, outputTokens = 400): Content[] {
  const contents: Content[] = [user(text(SESSION_CONTEXT), text("Fix the failing date parser in utils/dates.py."))];
  for (let i = 0; i < steps; i += 1) {
    const id = `c${i}`;
    contents.push(model(text(`Step ${i}: look at part ${i}.`), { ...call("run_shell_command", id, { command: `cat part${i}.txt` }), thoughtSignature: `sig-${i}` }));
    const output = Array.from({ length: outputTokens / 10 }, (_, line) => `part ${i} line ${line}: lorem ipsum`).join("\n");
    contents.push(user(response("run_shell_command", id, output)));
  }
  return contents;
}

test("a request ending with a pending functionCall keeps it (and the history stays valid)", async () => {
  const contents = [...toolSession(30), model({ ...call("run_shell_command", "pending", { command: "pytest" }), thoughtSignature: "sig-p" })];
  const result = await optimizer().optimize(contents);
  assert.ok(estimateContentsTokens(result.contents) < estimateContentsTokens(contents), result.summaryLine);
  assert.deepEqual(result.contents.at(-1), contents.at(-1));
  assert.deepEqual(findViolations(result.contents), []);
});

test("PromptBuilder keeps a history's trailing pending call when the message answers it", async () => {
  const history = [...toolSession(30), model({ ...call("run_shell_command", "pending", { command: "pytest" }), thoughtSignature: "sig-p" })];
  const builder = new PromptBuilder({ flags: { ...DEFAULT_FLAGS, mode: "true", deadlineMs: 5000, address: server.address }, budget: { contextLimitTokens: 8_000 } });
  try {
    const built = await builder.build({ sessionId: `pb-pending-${process.pid}`, model: "gemini-2.5-pro", history, message: [response("run_shell_command", "pending", "3 passed")] });
    assert.equal(built.summary.outcome, "optimized", built.summaryLine);
    assert.deepEqual(built.contents.at(-2), history.at(-1));
    assert.deepEqual(built.history.at(-1), history.at(-1));
  } finally {
    builder.close();
  }
});

test("the local fallback recognises Gemini CLI 0.61's <session_context> turn and keeps it with the user's task", async () => {
  const port = await closedPort();
  const contents = toolSession(30);
  const result = await optimizer({ address: `127.0.0.1:${port}`, deadlineMs: 300 }).optimize(contents);
  assert.equal(result.summary.outcome, "fallback", result.summaryLine);
  assert.ok(result.summary.droppedTurns > 0);
  assert.deepEqual(result.contents[0], contents[0]);
  assert.deepEqual(findViolations(result.contents), []);
});

test("after a failure the circuit breaker skips the service for CTXOPT_BREAKER_MS and the summary says so", async () => {
  const port = await closedPort();
  const host = optimizer({ address: `127.0.0.1:${port}`, deadlineMs: 400, breakerMs: 60_000 });
  const first = await host.optimize(toolSession(30));
  assert.match(first.summary.note, /service unavailable/);
  const started = performance.now();
  const second = await host.optimize(toolSession(31));
  const waited = performance.now() - started;
  assert.equal(second.summary.outcome, "fallback");
  assert.match(second.summaryLine, /service skipped for \d+ s after a failure \(service unavailable in .*; circuit open\)/);
  assert.ok(waited < 200, `the second call waited ${waited.toFixed(0)} ms`);
});

test("an infeasible plan is never sent over the window: it falls back and says so", async () => {
  // Every turn is recent (a root): the service cannot reach the target, and the whole exceeds the window.
  const contents = toolSession(12, 1_000);
  const result = await optimizer({}, { windowTokens: 6_000, recentTurns: 100 }).optimize(contents);
  assert.ok(estimateContentsTokens(contents) > 6_000);
  assert.ok(result.summary.tokensAfter <= 6_000, result.summaryLine);
  assert.ok(estimateContentsTokens(result.contents) <= 6_000, result.summaryLine);
  assert.equal(result.summary.outcome, "fallback");
  assert.match(result.summary.note, /window/);
  assert.deepEqual(findViolations(result.contents), []);
});

test("PromptBuilder never sends an infeasible plan over the window either", async () => {
  const history = [...toolSession(12, 1_000), model(text("I have read every part."))];
  const builder = new PromptBuilder({ flags: { ...DEFAULT_FLAGS, mode: "true", deadlineMs: 5000, address: server.address }, budget: { contextLimitTokens: 6_000, recentTurns: 100 } });
  try {
    const built = await builder.build({ sessionId: `pb-infeasible-${process.pid}`, model: "gemini-2.5-pro", history, message: "Go on." });
    assert.ok(built.summary.tokensAfter <= 6_000, built.summaryLine);
    assert.equal(built.summary.outcome, "fallback", built.summaryLine);
    assert.match(built.summary.note, /window/);
    assert.deepEqual(findViolations(built.contents), []);
  } finally {
    builder.close();
  }
});

test("when the host owns the history, a later call sends only the new chunks and removes none", async () => {
  const host = optimizer({}, { thresholdPercent: 1 });
  const first = await host.optimize(toolSession(30));
  assert.ok(first.sync !== undefined && first.sync.appended > 0, first.summaryLine);
  const second = await host.optimize(toolSession(31));
  // Turn 31 adds a model turn (text + call) and a user turn (response): 3 new parts.
  assert.deepEqual({ appended: second.sync?.appended, removed: second.sync?.removed }, { appended: 3, removed: 0 }, second.summaryLine);
});

test("earlier decisions are re-applied without the service while under the threshold: the prefix is byte-identical", async () => {
  const host = optimizer();
  const first = await host.optimize(toolSession(30));
  assert.equal(first.summary.outcome, "optimized", first.summaryLine);
  const second = await host.optimize(toolSession(31));
  assert.equal(second.plan, undefined, second.summaryLine);
  assert.equal(JSON.stringify(second.contents.slice(0, first.contents.length)), JSON.stringify(first.contents));
});

test("a split parallel step keeps its signed call: removing it is undone while a sibling stays", () => {
  const turns = mapContents([
    user(text("go")),
    model({ ...call("read_file", "a"), thoughtSignature: "sig" }, call("read_file", "b")),
    user(response("read_file", "a", "A"), response("read_file", "b", "B")),
  ]);
  const [signed, sibling] = turns[1]!.parts;
  const [answerA] = turns[2]!.parts;
  const stash = (id: string) => Decision.fromPartial({ chunkId: id, action: Action.ACTION_STASH });
  const split = new Map([[signed!.chunk.id, stash(signed!.chunk.id)], [answerA!.chunk.id, stash(answerA!.chunk.id)]]);
  assert.deepEqual(signedCallsToKeep(turns, split), [signed!.chunk.id, answerA!.chunk.id]);
  const whole = new Map([...split, [sibling!.chunk.id, stash(sibling!.chunk.id)]]);
  assert.deepEqual(signedCallsToKeep(turns, whole), []);
});

test("with the flag off the contents pass through untouched and the service is not asked", async () => {
  const port = await closedPort();
  const contents = toolSession(30);
  const result = await optimizer({ mode: "false", address: `127.0.0.1:${port}` }).optimize(contents);
  assert.equal(result.summary.outcome, "pass-through");
  assert.deepEqual(result.contents, contents);
});

/** 20 shell calls of 300-line logs; one line of log 3 is what the latest question asks about. */
function logSession(): Content[] {
  const contents: Content[] = [user(text("Fix the failing date parser."))];
  for (let i = 0; i < 20; i += 1) {
    const id = `c${i}`;
    contents.push(model(text(`step ${i}`), { ...call("run_shell_command", id, { command: `cat log${i}` }), thoughtSignature: `s${i}` }));
    const lines = Array.from({ length: 300 }, (_, l) => `log ${i} line ${l}: ordinary output number ${l * 7}`);
    if (i === 3) lines[150] = "ERROR ZEBRA_TOKEN_42 failure in parse_date at dates.py:88";
    contents.push(user(response("run_shell_command", id, lines.join("\n"))));
  }
  contents.push(model(text("I looked at all logs.")), user(text("Why does ZEBRA_TOKEN_42 fail in parse_date?")));
  return contents;
}

test("a trimmed tool output is the excerpt itself: no tool-name prefix, name and id kept", async () => {
  const contents = logSession();
  const result = await optimizer({}, { windowTokens: 150_000 }).optimize(contents);
  assert.ok(result.summary.trimmed > 0, result.summaryLine);
  const outputs = result.contents.flatMap((c) => (c.parts ?? []).flatMap((p) => (p.functionResponse ? [p.functionResponse] : [])));
  const trimmed = outputs.filter((r) => String(r.response?.["output"]).startsWith("[ctxopt: trimmed"));
  assert.ok(trimmed.length > 0);
  for (const r of outputs) assert.ok(!String(r.response?.["output"]).startsWith("run_shell_command: "), String(r.response?.["output"]).slice(0, 80));
  for (const r of trimmed) assert.equal(r.name, "run_shell_command");
  assert.ok(trimmed.every((r) => typeof r.id === "string" && r.id.startsWith("c")));
  assert.match(JSON.stringify(result.contents), /ZEBRA_TOKEN_42 failure in parse_date/);
});

test("shadow mode asks for a dry plan, reports what it would save and sends the original", async () => {
  const contents = toolSession(30);
  const result = await optimizer({ mode: "shadow" }).optimize(contents);
  assert.equal(result.summary.outcome, "shadow");
  assert.deepEqual(result.contents, contents);
  assert.ok(result.summary.tokensAfter < result.summary.tokensBefore, result.summaryLine);
  assert.match(result.summaryLine, /would save/);
});

test("a chunk restored (and pinned) on the service comes back into the prompt at the next collection", async () => {
  const client = new CtxoptClient(server.address, { deadlineMs: 5000 });
  try {
    const host = optimizer();
    const first = await host.optimize(toolSession(30));
    const stashed = first.plan!.decisions.find((d) => d.action === Action.ACTION_STASH && /^t\d+\.0-/.test(d.chunkId));
    assert.ok(stashed !== undefined, first.summaryLine);
    const turn = Number(/^t(\d+)\./.exec(stashed.chunkId)![1]);
    const restoredPart = JSON.stringify(toolSession(30)[turn]!.parts![0]);
    await client.restore({ sessionId: host.sessionId, chunkIds: [stashed.chunkId], force: true });
    await client.updateChunks({ sessionId: host.sessionId, updates: [{ id: stashed.chunkId, pinned: true }] });
    let later = await host.optimize(toolSession(31));
    assert.ok(!JSON.stringify(later.contents).includes(restoredPart), "between collections the earlier decision holds");
    for (let steps = 32; later.plan === undefined && steps < 60; steps += 1) later = await host.optimize(toolSession(steps));
    assert.ok(later.plan !== undefined, "a collection ran");
    assert.ok(later.plan.keptIds.includes(stashed.chunkId));
    assert.ok(JSON.stringify(later.contents).includes(restoredPart), later.summaryLine);
  } finally {
    client.close();
  }
});
