import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import type { Content } from "@google/genai";
import { CtxoptClient, ServingStatus } from "../src/client.js";
import { DEFAULT_FLAGS, type Flags } from "../src/flags.js";
import { findViolations } from "../src/gemini/history.js";
import { type BudgetOptions, PromptBuilder, type PromptInput } from "../src/promptBuilder.js";
import { model, text } from "./support/histories.js";
import { exampleHistory } from "./support/paths.js";
import { type RunningServer, startServer } from "./support/server.js";

interface ExampleFile {
  systemInstruction: string;
  memory: string;
  history: Content[];
  message: string;
  activeTask: string;
}
const example = JSON.parse(readFileSync(exampleHistory, "utf8")) as ExampleFile;
// The example holds ~70k tokens: an 80k window passes the 80% threshold.
const CONTEXT_LIMIT = 80_000;

let server: RunningServer;
let client: CtxoptClient;
const builders: PromptBuilder[] = [];

before(async () => {
  server = await startServer();
  client = new CtxoptClient(server.address, { deadlineMs: 5000 });
});
after(async () => {
  builders.forEach((b) => b.close());
  client.close();
  await server.stop();
});

function builder(flags: Partial<Flags>, address = server.address, budget: BudgetOptions = {}): PromptBuilder {
  const built = new PromptBuilder({
    flags: { ...DEFAULT_FLAGS, deadlineMs: 5000, ...flags, address },
    budget: { contextLimitTokens: CONTEXT_LIMIT, ...budget },
  });
  builders.push(built);
  return built;
}

let sessions = 0;
function input(overrides: Partial<PromptInput> = {}): PromptInput {
  sessions += 1;
  return {
    sessionId: `ts-integration-${process.pid}-${sessions}`,
    model: "gemini-2.5-pro",
    systemInstruction: example.systemInstruction,
    memory: example.memory,
    history: example.history,
    message: example.message,
    activeTask: example.activeTask,
    ...overrides,
  };
}

test("the server reports SERVING through grpc.health.v1", async () => {
  assert.equal(await client.health(), ServingStatus.SERVING);
});

test("a build with optimization sends a smaller, valid prompt and keeps the service in step", async () => {
  const request = input();
  const built = await builder({ mode: "true" }).build(request);
  assert.equal(built.summary.outcome, "optimized", built.summaryLine);
  assert.ok(built.summary.tokensAfter < built.summary.tokensBefore);
  assert.deepEqual(findViolations(built.contents), []);
  assert.deepEqual(built.contents.at(-1), { role: "user", parts: [{ text: example.message }] });
  const stats = await client.getSessionStats({ sessionId: request.sessionId });
  const parts = built.contents.reduce((n, c) => n + (c.parts?.length ?? 0), 0);
  assert.equal(stats.chunkCount, parts + 2, "system instruction + memory + one chunk per part");
  // one tokens_after: the summary line, the plan the server logs, the session it now holds
  assert.equal(built.summary.tokensAfter, built.plan?.tokensAfter);
  assert.equal(built.summary.tokensAfter, stats.tokens);
});

test("the next build sends only the new turns", async () => {
  // Threshold = target (the server refuses a target above the threshold): the
  // first build lands at the target, so the second, one long reply later, is past it.
  const optimizer = builder({ mode: "true" }, server.address, { thresholdPercent: 5, targetPercent: 5 });
  const request = input();
  const first = await optimizer.build(request);
  const reply = model(text("Here is the pull request description. ".repeat(80)));
  const second = await optimizer.build({ ...request, history: [...first.history, first.contents.at(-1)!, reply], message: "thanks" });
  assert.ok(second.sync !== undefined, second.summaryLine);
  assert.equal(second.sync.resynced, false);
  assert.ok(second.sync.appended <= 2, `appended ${second.sync.appended}`);
});

test("shadow mode reports the plan and sends the original, leaving the session as it was", async () => {
  const request = input();
  const built = await builder({ mode: "shadow" }).build(request);
  assert.equal(built.summary.outcome, "shadow", built.summaryLine);
  assert.deepEqual(built.contents, [...example.history, { role: "user", parts: [{ text: example.message }] }]);
  assert.ok(built.plan !== undefined && built.plan.decisions.length > 0);
  assert.ok(built.summary.tokensAfter < built.summary.tokensBefore);
  const stats = await client.getSessionStats({ sessionId: request.sessionId });
  assert.equal(stats.stashedCount, 0);
});

test("after the service lost the session, the next build re-sends it and optimizes", async () => {
  const optimizer = builder({ mode: "true" });
  const request = input();
  await optimizer.build(request);
  await client.deleteSession({ sessionId: request.sessionId });
  const again = await optimizer.build(request);
  assert.notEqual(again.summary.outcome, "fallback", again.summaryLine);
  assert.equal(again.sync?.resynced, true);
  assert.ok((await client.getSessionStats({ sessionId: request.sessionId })).chunkCount > 0);
});

test("a deadline too short for the service gives local truncation", async () => {
  const built = await builder({ mode: "true", deadlineMs: 1 }).build(input());
  assert.equal(built.summary.outcome, "fallback");
  assert.match(built.summaryLine, /deadline missed/);
  assert.deepEqual(findViolations(built.contents), []);
});

test("a stopped server gives local truncation, and the client reconnects when it is back", async () => {
  const own = await startServer();
  // No circuit breaker here: the next build must try the service again at once.
  const optimizer = builder({ mode: "true", deadlineMs: 2000, breakerMs: 0 }, own.address);
  const request = input();
  assert.equal((await optimizer.build(request)).summary.outcome, "optimized");
  await own.stop();
  const down = await optimizer.build(request);
  assert.equal(down.summary.outcome, "fallback");
  assert.match(down.summaryLine, /FALLBACK local truncation/);
  const back = await startServer({ addr: own.address });
  try {
    const up = await optimizer.build(request);
    assert.notEqual(up.summary.outcome, "fallback", up.summaryLine);
  } finally {
    await back.stop();
  }
});
