import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { CtxoptCallError, CtxoptClient, GrpcStatus } from "../src/client.js";
import { DEFAULT_FLAGS, type Flags, inRollout } from "../src/flags.js";
import { findViolations } from "../src/gemini/history.js";
import type { Chunk } from "../src/generated/ctxopt/v1/ctxopt.js";
import { type BudgetOptions, PromptBuilder } from "../src/promptBuilder.js";
import { SessionMirror } from "../src/sessionMirror.js";
import { startServerWith } from "./support/configuredServer.js";
import { call, model, response, text, user } from "./support/histories.js";
import { closedPort, silentServer } from "./support/network.js";
import { type RunningServer, startServer } from "./support/server.js";

const long = "log line\n".repeat(2000); // 4,500 tokens
const history = [
  user(text("This is the Gemini CLI. We are setting up the context for our chat.\nMy operating system is: linux")),
  model(text("Got it. Thanks for the context!")),
  user(text("why does the build fail?")),
  model(call("run_shell_command", "c1", { command: "make" })),
  user(response("run_shell_command", "c1", long)),
  model(text("the linker is missing libfoo")),
  user(text("install it")),
  model(call("run_shell_command", "c2", { command: "apt install libfoo" })),
  user(response("run_shell_command", "c2", long)),
  model(text("installed")),
];
const input = { sessionId: "s-1", model: "gemini-2.5-pro", systemInstruction: "You are a CLI agent.", history, message: "build again" };

// One server with the stock defaults, one whose defaults are not the stock ones.
let server: RunningServer;
let lowServer: RunningServer;
const LOW_DEFAULTS = { CTXOPT_GC_THRESHOLD_PERCENT: "5", CTXOPT_GC_TARGET_PERCENT: "4" };
before(async () => {
  [server, lowServer] = await Promise.all([startServer(), startServerWith(LOW_DEFAULTS)]);
});

const builders: PromptBuilder[] = [];
async function builderFor(flags: Partial<Flags>, contextLimitTokens = 10_000, budget: BudgetOptions = {}): Promise<PromptBuilder> {
  const address = flags.address ?? `127.0.0.1:${await closedPort()}`;
  const builder = new PromptBuilder({ flags: { ...DEFAULT_FLAGS, deadlineMs: 300, ...flags, address }, budget: { contextLimitTokens, ...budget } });
  builders.push(builder);
  return builder;
}
after(async () => {
  builders.forEach((b) => b.close());
  await Promise.all([server.stop(), lowServer.stop()]);
});

async function sessionExists(address: string, sessionId: string): Promise<boolean> {
  const client = new CtxoptClient(address);
  try {
    await client.getSessionStats({ sessionId });
    return true;
  } catch (error) {
    if (error instanceof CtxoptCallError && error.code === GrpcStatus.NOT_FOUND) return false;
    throw error;
  } finally {
    client.close();
  }
}

test("mode false passes the history through unchanged", async () => {
  const built = await (await builderFor({ mode: "false" })).build(input);
  assert.equal(built.summary.outcome, "pass-through");
  assert.deepEqual(built.contents, [...history, user(text("build again"))]);
  assert.deepEqual(built.history, history);
});

test("the request carries the model and the system instruction with the memory", async () => {
  const built = await (await builderFor({ mode: "false" })).build({ ...input, memory: "# GEMINI.md" });
  assert.equal(built.request.model, "gemini-2.5-pro");
  assert.deepEqual(built.request.config?.systemInstruction, "You are a CLI agent.\n\n# GEMINI.md");
});

test("a session outside the rollout passes through and says why", async () => {
  const sessionId = Array.from({ length: 100 }, (_, i) => `s-${i}`).find((id) => !inRollout(id, 10))!;
  const built = await (await builderFor({ mode: "true", rolloutPercent: 10 })).build({ ...input, sessionId });
  assert.equal(built.summary.outcome, "pass-through");
  assert.match(built.summaryLine, /outside the 10% rollout/);
});

test("under the threshold the service is not asked for a plan", async () => {
  const sessionId = "s-below";
  const built = await (await builderFor({ mode: "true", address: server.address, deadlineMs: 5000 }, 1_000_000)).build({ ...input, sessionId });
  assert.equal(built.summary.outcome, "below-threshold");
  assert.deepEqual(built.contents, [...history, user(text("build again"))]);
  assert.equal(await sessionExists(server.address, sessionId), false, "nothing was appended");
});

test("once the server's defaults are known, a build under the threshold makes no call", async () => {
  const own = await startServer();
  const builder = await builderFor({ mode: "true", address: own.address, deadlineMs: 2000 }, 1_000_000);
  assert.equal((await builder.build({ ...input, sessionId: "s-known" })).summary.outcome, "below-threshold");
  await own.stop();
  const built = await builder.build({ ...input, sessionId: "s-known" });
  assert.equal(built.summary.outcome, "below-threshold", built.summaryLine);
});

test("a threshold given to the builder decides without the service", async () => {
  const built = await (await builderFor({ mode: "true", thresholdPercent: 50 }, 1_000_000)).build(input);
  assert.equal(built.summary.outcome, "below-threshold", built.summaryLine);
});

test("more chunks than GEMINI_CONTEXT_MAX_CHUNKS engages the hook even under the threshold", async () => {
  const built = await (await builderFor({ mode: "true", maxChunks: 3 }, 1_000_000)).build(input);
  assert.equal(built.summary.outcome, "fallback");
});

test("an unreachable service gives local truncation that keeps the history rules, and the summary says so", async () => {
  const built = await (await builderFor({ mode: "true" })).build(input);
  assert.equal(built.summary.outcome, "fallback");
  assert.match(built.summaryLine, /FALLBACK local truncation: (service unavailable|deadline missed) in Health.Check/);
  assert.ok(built.summary.tokensAfter < built.summary.tokensBefore);
  assert.deepEqual(findViolations(built.contents), []);
  assert.deepEqual(built.contents.at(-1), user(text("build again")));
  assert.deepEqual(built.history, history);
});

test("a service that misses the deadline gives local truncation", async () => {
  const silent = await silentServer();
  try {
    const built = await (await builderFor({ mode: "true", address: silent.address, deadlineMs: 100 })).build(input);
    assert.equal(built.summary.outcome, "fallback");
    assert.ok(built.summary.tokensAfter < built.summary.tokensBefore);
  } finally {
    await silent.close();
  }
});

test("shadow mode with an unreachable service sends the original and says why", async () => {
  const built = await (await builderFor({ mode: "shadow" })).build(input);
  assert.equal(built.summary.outcome, "shadow");
  assert.match(built.summaryLine, /no plan: (service unavailable|deadline missed) in Health.Check/);
  assert.deepEqual(built.contents, [...history, user(text("build again"))]);
});

test("the summary line shows the window share, the token counts and the latency", async () => {
  const built = await (await builderFor({ mode: "false" })).build(input);
  assert.match(built.summaryLine, /^ctxopt\[false\] gemini-2\.5-pro: \d+\.\d% of 10,000 tokens used \([\d,]+ -> [\d,]+, saved 0\), [\d.]+ ms, pass-through$/);
});

test("GEMINI_CONTEXT_THRESHOLD_PERCENT moves PromptBuilder's trigger (the history is ~10k tokens of a 100k window)", async () => {
  const flags = { mode: "true" as const, address: server.address, deadlineMs: 5000 };
  const below = await (await builderFor(flags, 100_000)).build({ ...input, sessionId: "s-threshold-default" });
  assert.equal(below.summary.outcome, "below-threshold");
  const early = await (await builderFor({ ...flags, thresholdPercent: 5 }, 100_000, { recentTurns: 1 })).build({ ...input, sessionId: "s-threshold" });
  assert.equal(early.summary.outcome, "optimized", early.summaryLine);
});

test("the server's default budget engages the builder and sets its landing point, with no client setting", async () => {
  // The server's defaults are 5% / 4%: of a 100k window, the ~10k history is past the threshold.
  const builder = await builderFor({ mode: "true", address: lowServer.address, deadlineMs: 5000 }, 100_000, { recentTurns: 1 });
  const built = await builder.build({ ...input, sessionId: "s-server-defaults" });
  assert.equal(built.summary.outcome, "optimized", built.summaryLine);
  assert.equal(built.plan?.targetTokens, 4_000);
  assert.ok(built.summary.tokensAfter <= 4_000, built.summaryLine);
});

test("a budget option beats the flag, and the flag beats the server's default", async () => {
  const flags = { mode: "true" as const, address: lowServer.address, deadlineMs: 5000 };
  const byFlag = await (await builderFor({ ...flags, thresholdPercent: 50 }, 100_000)).build({ ...input, sessionId: "s-flag-wins" });
  assert.equal(byFlag.summary.outcome, "below-threshold", byFlag.summaryLine);
  const byOption = await (
    await builderFor({ ...flags, thresholdPercent: 50 }, 100_000, { thresholdPercent: 5 })
  ).build({ ...input, sessionId: "s-option-wins" });
  assert.notEqual(byOption.summary.outcome, "below-threshold", byOption.summaryLine);
  const target = await (await builderFor({ ...flags, targetPercent: 3 }, 100_000, { recentTurns: 1 })).build({ ...input, sessionId: "s-target-flag" });
  assert.equal(target.plan?.targetTokens, 3_000, target.summaryLine);
});

test("with the service unreachable and no default known, the fallback only makes the prompt fit the window", async () => {
  // ~10.1k tokens in a 12k window: nothing has to go, whatever target a server might have.
  const built = await (await builderFor({ mode: "true" }, 12_000)).build(input);
  assert.equal(built.summary.outcome, "fallback", built.summaryLine);
  assert.equal(built.summary.tokensAfter, built.summary.tokensBefore);
  assert.deepEqual(built.contents, [...history, user(text("build again"))]);
});

test("a fallback after the server went away lands at the target the server reported", async () => {
  const own = await startServerWith(LOW_DEFAULTS);
  const builder = await builderFor({ mode: "true", address: own.address, deadlineMs: 2000, breakerMs: 0 }, 100_000, { recentTurns: 1 });
  assert.notEqual((await builder.build({ ...input, sessionId: "s-gone" })).summary.outcome, "fallback");
  await own.stop();
  const built = await builder.build({ ...input, sessionId: "s-gone-2" });
  assert.equal(built.summary.outcome, "fallback", built.summaryLine);
  assert.ok(built.summary.tokensAfter <= 4_000, built.summaryLine);
});

test("GEMINI_CONTEXT_WINDOW_TOKENS sets the window when the budget names none", async () => {
  const address = `127.0.0.1:${await closedPort()}`;
  const builder = new PromptBuilder({ flags: { ...DEFAULT_FLAGS, mode: "true", deadlineMs: 300, address, windowTokens: 12_345 } });
  builders.push(builder);
  assert.equal((await builder.build(input)).summary.windowTokens, 12_345);
});

test("after a failure PromptBuilder skips the service for CTXOPT_BREAKER_MS and says so", async () => {
  const builder = await builderFor({ mode: "true", breakerMs: 60_000 });
  const first = await builder.build({ ...input, sessionId: "s-breaker" });
  assert.equal(first.summary.outcome, "fallback");
  const second = await builder.build({ ...input, sessionId: "s-breaker" });
  assert.match(second.summaryLine, /service skipped for \d+ s after a failure .*circuit open/);
});

test("plans come lean (no score breakdowns) unless the builder is asked to explain", async () => {
  const flags = { ...DEFAULT_FLAGS, mode: "shadow" as const, address: server.address, deadlineMs: 5000, thresholdPercent: 5 };
  const plans = [];
  for (const explain of [false, true]) {
    const builder = new PromptBuilder({ flags, budget: { contextLimitTokens: 100_000, recentTurns: 1 }, explain });
    builders.push(builder);
    const built = await builder.build({ ...input, sessionId: `s-explain-${explain}` });
    assert.ok(built.plan !== undefined && built.plan.decisions.length > 0, built.summaryLine);
    plans.push(built.plan);
  }
  const [lean, explained] = plans;
  assert.ok(lean!.decisions.every((d) => d.breakdown === undefined && d.reasons.length > 0));
  assert.ok(explained!.decisions.every((d) => d.breakdown !== undefined));
  assert.deepEqual(lean!.keptIds, explained!.keptIds);
});

test("a repeated build hands the service the chunk list it sent last; a new system instruction or turn makes a new one", async (t) => {
  const sent: (readonly Chunk[])[] = [];
  const optimize = SessionMirror.prototype.optimize;
  t.mock.method(SessionMirror.prototype, "optimize", function (this: SessionMirror, chunks: readonly Chunk[], ...rest: [never, never]) {
    sent.push(chunks);
    return optimize.call(this, chunks, ...rest);
  });
  const flags = { ...DEFAULT_FLAGS, mode: "shadow" as const, address: server.address, deadlineMs: 5000, thresholdPercent: 5 };
  const builder = new PromptBuilder({ flags, budget: { contextLimitTokens: 100_000 } });
  builders.push(builder);
  const same = { ...input, sessionId: "s-chunk-list" };
  await builder.build(same);
  await builder.build({ ...same, history: [...history] });
  await builder.build({ ...same, systemInstruction: "You are a careful CLI agent." });
  await builder.build({ ...same, message: "build once more" });
  const [first, repeated, newSystem, newTurn] = sent;
  assert.equal(repeated, first);
  assert.notEqual(newSystem, first);
  assert.equal(newSystem![0]!.text, "You are a careful CLI agent.");
  assert.deepEqual(newSystem!.slice(1), first!.slice(1));
  assert.notEqual(newTurn, newSystem);
  assert.equal(newTurn![0]!.text, input.systemInstruction);
  assert.equal(newTurn!.at(-1)!.text, "build once more");
});
