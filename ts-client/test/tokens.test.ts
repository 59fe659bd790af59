import assert from "node:assert/strict";
import { test } from "node:test";
import { estimatePartTokens, estimateTextTokens } from "../src/gemini/tokens.js";

test("an ASCII character costs a quarter of a token", () => {
  assert.equal(estimateTextTokens("abcdefgh"), 2);
});

test("a non-ASCII character costs 1.5 tokens", () => {
  assert.equal(estimateTextTokens("日本"), 3);
});

test("mixed text rounds the sum up", () => {
  assert.equal(estimateTextTokens("ab日"), 2);
});

test("a non-text part is estimated from its JSON form", () => {
  const part = { functionCall: { name: "read_file", args: { path: "a.ts" } } };
  assert.equal(estimatePartTokens(part), estimateTextTokens(JSON.stringify(part)));
});

test("an image counts 3,000 tokens whatever its size, as in Gemini CLI", () => {
  const png = { inlineData: { mimeType: "image/png", data: "A".repeat(400_000) } };
  assert.equal(estimatePartTokens(png), 3_000);
  assert.equal(estimatePartTokens({ fileData: { mimeType: "image/jpeg", fileUri: "gs://b/x.jpg" } }), 3_000);
});

test("a PDF counts 25,800 tokens", () => {
  assert.equal(estimatePartTokens({ inlineData: { mimeType: "application/pdf", data: "AAAA" } }), 25_800);
});

test("a functionResponse counts its name and JSON payload at four characters a token", () => {
  const part = { functionResponse: { name: "run_shell_command", id: "x", response: { output: "a".repeat(400) } } };
  assert.equal(estimatePartTokens(part), Math.floor(("run_shell_command".length + JSON.stringify({ output: "a".repeat(400) }).length) / 4));
});

test("text past 100,000 characters counts length / 4", () => {
  assert.equal(estimateTextTokens("日".repeat(100_001)), Math.floor(100_001 / 4));
});
