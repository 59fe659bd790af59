import assert from "node:assert/strict";
import { test } from "node:test";
import { estimatePartTokens, estimateTextTokens } from "../src/tokens.js";

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
