import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { ContentGenerator } from "@google/gemini-cli-core";
import { LlmRole } from "@google/gemini-cli-core";
import type { Content } from "../src/gemini/types.js";
import {
  ceilingPercent,
  type ContextOptimizerOptions,
  GEMINI_CLI_COMPRESSION_PERCENT,
  geminiCliCompactionLine,
  geminiCliTokenLimit,
  TARGET_SHARE,
  withContextOptimizer,
} from "../src/geminiCli.js";
import type { ContextSummary } from "../src/summary.js";
import { call, model, response, text, user } from "./support/histories.js";
import { closedPort } from "./support/network.js";
import { type RunningServer, startServer } from "./support/server.js";

const core = await import("@google/gemini-cli-core");
const scratch = mkdtempSync(join(tmpdir(), "ctxopt-adapter-"));
let server: RunningServer;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server.stop();
  rmSync(scratch, { recursive: true, force: true });
});

/** Gemini CLI's fake generator with `count` text replies, and the requests it saw. */
async function fakeModel(count: number): Promise<{ generator: ContentGenerator; seen: unknown[] }> {
  const file = join(mkdtempSync(join(scratch, "fake-")), "responses.jsonl");
  const reply = { candidates: [{ content: { role: "model", parts: [{ text: "ok" }] }, finishReason: "STOP", index: 0 }] };
  const lines = Array.from({ length: count }, (_, i) =>
    JSON.stringify(i % 2 === 0 ? { method: "generateContentStream", response: [reply] } : { method: "generateContent", response: reply }),
  );
  writeFileSync(file, lines.join("\n"));
  const fake = await core.FakeContentGenerator.fromFile(file);
  fake.userTierName = "standard-tier";
  const seen: unknown[] = [];
  const generator: ContentGenerator = {
    generateContent: (request, id, role) => {
      seen.push(request.contents);
      return fake.generateContent(request, id, role);
    },
    generateContentStream: (request, id, role) => {
      seen.push(request.contents);
      return fake.generateContentStream(request, id, role);
    },
    countTokens: (request) => fake.countTokens(request),
    embedContent: (request) => fake.embedContent(request),
    get userTierName() {
      return fake.userTierName;
    },
  };
  return { generator, seen };
}

function longSession(): Content[] {
  const contents: Content[] = [user(text("Fix the date parser."))];
  for (let i = 0; i < 20; i += 1) {
    contents.push(model({ ...call("run_shell_command", `c${i}`, { command: `cat f${i}` }), thoughtSignature: `s${i}` }));
    contents.push(user(response("run_shell_command", `c${i}`, `file ${i}\n`.repeat(200))));
  }
  return contents;
}

test("options win over the environment: address, window and session reach the service", async () => {
  const previous = { ...process.env };
  process.env["CTXOPT_ADDR"] = `127.0.0.1:${await closedPort()}`;
  process.env["GEMINI_CONTEXT_WINDOW_TOKENS"] = "1000000";
  process.env["GEMINI_CONTEXT_OPTIMIZATION"] = "true";
  try {
    const summaries: ContextSummary[] = [];
    const { generator, seen } = await fakeModel(2);
    const wrapped = withContextOptimizer(generator, {
      address: server.address,
      windowTokens: 8_000,
      sessionId: "adapter-options",
      onSummary: (s) => summaries.push(s),
    });
    await wrapped.generateContentStream({ model: "gemini-2.5-pro", contents: longSession() }, "p1", LlmRole.MAIN);
    assert.equal(summaries[0]!.windowTokens, 8_000);
    assert.ok(summaries[0]!.serverMs > 0, "the service at options.address answered");
    assert.equal(summaries[0]!.outcome, "optimized");
    const sent = seen[0];
    assert.ok(Array.isArray(sent) && sent.length < longSession().length);
  } finally {
    process.env = previous;
  }
});

/** One main-chat request of `longSession()` through the adapter with `options`; its summary. */
async function ceilingRun(sessionId: string, options: Partial<ContextOptimizerOptions>): Promise<ContextSummary> {
  const summaries: ContextSummary[] = [];
  const { generator } = await fakeModel(1);
  const wrapped = withContextOptimizer(generator, {
    address: server.address,
    windowTokens: 8_000,
    sessionId,
    defaultMode: "true",
    onSummary: (s) => summaries.push(s),
    ...options,
  });
  await wrapped.generateContentStream({ model: "gemini-2.5-pro", contents: longSession() }, "p1", LlmRole.MAIN);
  assert.equal(summaries[0]!.outcome, "optimized", summaries[0]!.note);
  return summaries[0]!;
}

test("a window far below Gemini CLI's model limit is the ceiling: a collection lands near TARGET_SHARE of it, not under half", async () => {
  // gemini-2.5-pro: Gemini CLI compresses at 0.5 x 1,048,576 tokens, far above an 8,000-token window.
  assert.equal(geminiCliCompactionLine("gemini-2.5-pro"), 524_288);
  const summary = await ceilingRun("adapter-ceiling", {});
  assert.ok(summary.tokensAfter > 8_000 * (TARGET_SHARE - 0.1), `${summary.tokensAfter} tokens: the window is not halved`);
  assert.ok(summary.tokensAfter <= 8_000 * TARGET_SHARE, `${summary.tokensAfter} tokens`);
});

test("Gemini CLI's compression line below the window is the ceiling: the user's compressionThreshold, given or read from its config", async () => {
  const line = geminiCliCompactionLine("gemini-2.5-pro", 0.005);
  assert.ok(line < 8_000);
  const given = await ceilingRun("adapter-threshold-given", { compressionThreshold: 0.005 });
  assert.ok(given.tokensAfter <= line * TARGET_SHARE && given.tokensAfter > line * 0.7, `${given.tokensAfter} tokens`);
  const read = await ceilingRun("adapter-threshold-read", { geminiConfig: { getCompressionThreshold: () => Promise.resolve(0.005) } });
  assert.equal(read.tokensAfter, given.tokensAfter);
  const overridden = await ceilingRun("adapter-ceiling-override", { ceilingPercent: GEMINI_CLI_COMPRESSION_PERCENT });
  assert.ok(overridden.tokensAfter <= 8_000 * 0.5 * TARGET_SHARE, `ceilingPercent overrides the rule: ${overridden.tokensAfter} tokens`);
  assert.throws(
    () => withContextOptimizer({} as ContentGenerator, { compressionThreshold: 1.5 }),
    /compressionThreshold: expected a fraction in \(0, 1\] \(got 1\.5\)/,
  );
});

test("the ceiling rule reads Gemini CLI's own limits: tokenLimit(model) of gemini-cli-core, the lower of the window and its line", () => {
  for (const name of ["gemini-2.5-pro", "gemini-2.5-flash", "gemini-3-pro-preview", "gemma-4-31b-it", "gemma-4-26b-a4b-it", "a-model-it-does-not-know"]) {
    assert.equal(geminiCliTokenLimit(name), core.tokenLimit(name), name);
  }
  assert.equal(ceilingPercent(60_000, geminiCliCompactionLine("gemini-2.5-pro")), 100);
  assert.equal(ceilingPercent(1_048_576, geminiCliCompactionLine("gemini-2.5-pro")), GEMINI_CLI_COMPRESSION_PERCENT);
  assert.equal(ceilingPercent(200_000, geminiCliCompactionLine("gemma-4-31b-it", 0.5)), 64);
  assert.equal(ceilingPercent(200_000, undefined), 100);
});

test("only the main chat is rewritten: utility calls, countTokens and the generator's properties pass through", async () => {
  const summaries: ContextSummary[] = [];
  const { generator, seen } = await fakeModel(2);
  const wrapped = withContextOptimizer(generator, { address: server.address, windowTokens: 8_000, defaultMode: "true", onSummary: (s) => summaries.push(s) });
  const contents = longSession();
  await wrapped.generateContentStream({ model: "gemini-2.5-pro", contents }, "p1", LlmRole.UTILITY_ROUTER);
  await wrapped.generateContent({ model: "gemini-2.5-pro", contents: "a plain string prompt" }, "p2", LlmRole.MAIN);
  assert.equal(seen[0], contents, "a utility call gets the very same contents");
  assert.equal(seen[1], "a plain string prompt", "contents that are not a Content[] pass through");
  assert.equal(summaries.length, 0);
  assert.equal(wrapped.userTierName, "standard-tier");
  assert.ok("userTierName" in wrapped);
});

test("with GEMINI_CONTEXT_OPTIMIZATION unset the adapter passes requests through without calling the service", async () => {
  const previous = process.env["GEMINI_CONTEXT_OPTIMIZATION"];
  delete process.env["GEMINI_CONTEXT_OPTIMIZATION"];
  try {
    const { generator, seen } = await fakeModel(1);
    const wrapped = withContextOptimizer(generator, { address: `127.0.0.1:${await closedPort()}` });
    const contents = longSession();
    await wrapped.generateContentStream({ model: "gemini-2.5-pro", contents }, "p1", LlmRole.MAIN);
    assert.equal(seen[0], contents);
  } finally {
    if (previous !== undefined) process.env["GEMINI_CONTEXT_OPTIMIZATION"] = previous;
  }
});

test("the model's reported prompt size calibrates the next calls: a tokenizer counting more shrinks the window by as much", async () => {
  const summaries: ContextSummary[] = [];
  const { generator } = await fakeModel(3);
  const ratios = [1.5, 1.2, 1];
  const reported = () => Math.round(summaries.at(-1)!.tokensAfter * ratios[summaries.length - 1]!);
  const reporting: ContentGenerator = {
    ...generator,
    generateContent: async (request, id, role) => {
      const answer = await generator.generateContent(request, id, role);
      answer.usageMetadata = { promptTokenCount: reported() };
      return answer;
    },
    generateContentStream: async (request, id, role) => {
      const stream = await generator.generateContentStream(request, id, role);
      return (async function* () {
        for await (const chunk of stream) {
          chunk.usageMetadata = { promptTokenCount: reported() };
          yield chunk;
        }
      })();
    },
  };
  const wrapped = withContextOptimizer(reporting, {
    address: server.address,
    windowTokens: 8_000,
    sessionId: "adapter-usage",
    defaultMode: "true",
    onSummary: (s) => summaries.push(s),
  });
  for await (const _ of await wrapped.generateContentStream({ model: "gemini-2.5-pro", contents: longSession() }, "p1", LlmRole.MAIN));
  await wrapped.generateContent({ model: "gemini-2.5-pro", contents: longSession() }, "p2", LlmRole.MAIN);
  for await (const _ of await wrapped.generateContentStream({ model: "gemini-2.5-pro", contents: longSession() }, "p3", LlmRole.MAIN));
  const expected = [8_000, 8_000 / 1.5, 8_000 / 1.2];
  summaries.forEach((s, i) => assert.ok(Math.abs(s.windowTokens - expected[i]!) <= 1, `call ${i}: window ${s.windowTokens}`));
  // The ceiling is the (calibrated) window: Gemini CLI's line, 524,288 tokens, is far above it.
  for (const s of summaries) assert.ok(s.tokensAfter <= s.windowTokens, `${s.tokensAfter} of ${s.windowTokens}`);
});
