import assert from "node:assert/strict";
import { test } from "node:test";
import type { Content } from "@google/genai";
import { mapContents } from "../src/gemini/mapping.js";
import { unchangedPrefix } from "../src/gemini/prefix.js";
import { call, model, response, text, user } from "./support/histories.js";

const history: Content[] = [
  user(text("fix the test")),
  model(call("run_shell_command", "c1", { command: "npm test" })),
  user(response("run_shell_command", "c1", "FAIL\n".repeat(20))),
  model(text("the date parser is off by one")),
];
const mapped = mapContents(history);

test("the same Content objects are an unchanged prefix", () => {
  assert.equal(unchangedPrefix(history, history, mapped), 4);
});

test("a deep copy (as Gemini CLI's getHistory gives) is an unchanged prefix, however long the new history", () => {
  assert.equal(unchangedPrefix([...structuredClone(history), user(text("go on"))], history, mapped), 4);
});

test("parts listing their keys in another order are the same turn", () => {
  const reordered = history.map((c) => ({ parts: (c.parts ?? []).map((p) => Object.fromEntries(Object.entries(p).reverse())), role: c.role! }));
  assert.equal(unchangedPrefix(reordered, [], mapped), 4);
});

test("a turn changed inside a copy ends the prefix there", () => {
  const copy = structuredClone(history);
  copy[2]!.parts![0]!.functionResponse!.response = { output: "PASS" };
  assert.equal(unchangedPrefix(copy, history, mapped), 2);
});

test("a turn of another role ends the prefix there", () => {
  assert.equal(unchangedPrefix([history[0]!, user(text("the date parser is off by one"))], [], mapped), 1);
});
