import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { ContentGenerator } from "@google/gemini-cli-core";
import { LlmRole } from "@google/gemini-cli-core";
import type { Content } from "../src/gemini/types.js";
import { GEMINI_CLI_COMPRESSION_PERCENT, HOST_TARGET_PERCENT, HOST_THRESHOLD_PERCENT, withContextOptimizer } from "../src/geminiCli.js";
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

test("inside Gemini CLI the adapter's ceiling is the CLI's compression line: it acts and lands below 50% of the window", async () => {
  assert.ok(HOST_TARGET_PERCENT < HOST_THRESHOLD_PERCENT && HOST_THRESHOLD_PERCENT <= GEMINI_CLI_COMPRESSION_PERCENT);
  const summaries: ContextSummary[] = [];
  const { generator } = await fakeModel(1);
  const wrapped = withContextOptimizer(generator, {
    address: server.address,
    windowTokens: 8_000,
    sessionId: "adapter-ceiling",
    defaultMode: "true",
    onSummary: (s) => summaries.push(s),
  });
  await wrapped.generateContentStream({ model: "gemini-2.5-pro", contents: longSession() }, "p1", LlmRole.MAIN);
  assert.equal(summaries[0]!.outcome, "optimized", summaries[0]!.note);
  assert.ok(summaries[0]!.tokensAfter < (8_000 * GEMINI_CLI_COMPRESSION_PERCENT) / 100, `${summaries[0]!.tokensAfter} tokens`);
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
  for (const s of summaries) assert.ok(s.tokensAfter <= (s.windowTokens * GEMINI_CLI_COMPRESSION_PERCENT) / 100, `${s.tokensAfter} of ${s.windowTokens}`);
});
