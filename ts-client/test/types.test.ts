import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { ContentGenerator, GeminiClient } from "@google/gemini-cli-core";
import type { Content as CurrentGenaiContent } from "@google/genai";
import { DEFAULT_FLAGS } from "../src/flags.js";
import { closeContentOptimizers, optimizeContents } from "../src/genai.js";
import { PromptBuilder } from "../src/promptBuilder.js";
import { closedPort } from "./support/network.js";

/** `@google/genai` 1.30's Content, as Gemini CLI 0.61 types its history. */
type GeminiCliContent = ReturnType<GeminiClient["getHistory"]>[number];
type GeminiCliRequest = Parameters<ContentGenerator["generateContentStream"]>[0];

after(closeContentOptimizers);

// These tests are checked by tsc (a cast-free assignment that does not type-check fails the build) and run.

test("Content[] of @google/genai 1.30 (Gemini CLI 0.61) goes into optimizeContents and comes out assignable, without casts", async () => {
  const port = await closedPort();
  const history: GeminiCliContent[] = [{ role: "user", parts: [{ text: "hello", mediaResolution: undefined }] }];
  const result = await optimizeContents(history, { address: `127.0.0.1:${port}`, sessionId: "types-130" });
  const back: GeminiCliContent[] = result.contents;
  const request: GeminiCliRequest = { model: "gemini-2.5-pro", contents: result.contents };
  assert.deepEqual(back, history);
  assert.deepEqual(request.contents, history);
});

test("Content[] of the current @google/genai (3.x) goes in and comes out assignable, without casts", async () => {
  const port = await closedPort();
  const history: CurrentGenaiContent[] = [{ role: "user", parts: [{ text: "hello" }] }];
  const result = await optimizeContents(history, { address: `127.0.0.1:${port}`, sessionId: "types-3" });
  const back: CurrentGenaiContent[] = result.contents;
  assert.deepEqual(back, history);
});

test("PromptBuilder's history and request type-check against Gemini CLI's setHistory and generateContentStream", async () => {
  const port = await closedPort();
  const builder = new PromptBuilder({ flags: { ...DEFAULT_FLAGS, address: `127.0.0.1:${port}` } });
  try {
    const history: GeminiCliContent[] = [
      { role: "user", parts: [{ text: "hi" }] },
      { role: "model", parts: [{ text: "hello" }] },
    ];
    const built = await builder.build({ sessionId: "types-pb", model: "gemini-2.5-pro", history, message: "next" });
    const kept: GeminiCliContent[] = built.history;
    const request: GeminiCliRequest = built.request;
    const current: CurrentGenaiContent[] = built.contents;
    assert.equal(kept.length, 2);
    assert.equal(request.model, "gemini-2.5-pro");
    assert.equal(current.length, 3);
  } finally {
    builder.close();
  }
});
