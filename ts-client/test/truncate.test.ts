import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { findViolations } from "../src/gemini/history.js";
import { type MappedPart, mapContents, toContents } from "../src/gemini/mapping.js";
import { clipLatest, truncateHistory } from "../src/gemini/truncate.js";
import { call, model, response, text, user, validHistory } from "./support/histories.js";

const long = "x".repeat(4000); // 1,000 tokens
const history = [
  user(text("environment")),
  model(text("Got it.")),
  user(text(`first ${long}`)),
  model(call("run", "1")),
  user(response("run", "1", long)),
  model(text("done")),
  user(text("latest question")),
];

test("a history under the target is left as is", () => {
  const turns = mapContents(history);
  assert.deepEqual(truncateHistory(turns, 1_000_000, 2).turns, turns);
});

test("the oldest exchanges go first (a model turn with the user turn after it); the task opening the conversation stays", () => {
  const result = truncateHistory(mapContents(history), 100, 2);
  assert.deepEqual(toContents(result.turns), [
    user(text("environment")),
    model(text("Got it.")),
    user(text(`first ${long}`)),
    model(text("done")),
    user(text("latest question")),
  ]);
  assert.equal(result.droppedTurns, 2);
});

test("a tool loop with no plain user turn can still be cut, call and response leaving together", () => {
  const loop = [user(text("task")), ...[1, 2, 3, 4].flatMap((i) => [model(call("run", `${i}`)), user(response("run", `${i}`, long))])];
  const result = truncateHistory(mapContents(loop), 2_100, 0);
  assert.deepEqual(toContents(result.turns), [user(text("task")), ...loop.slice(5)]);
  assert.deepEqual(findViolations(toContents(result.turns)), []);
});

test("the locked opening and the latest turn stay even when nothing fits", () => {
  const result = truncateHistory(mapContents(history), 1, 2);
  assert.deepEqual(toContents(result.turns).at(-1), user(text("latest question")));
  assert.deepEqual(toContents(result.turns).slice(0, 2), history.slice(0, 2));
});

test("a call is never separated from its response", () => {
  const withPendingAnswer = [...history.slice(0, 4), user(response("run", "1", long))];
  const result = truncateHistory(mapContents(withPendingAnswer), 10, 2);
  assert.deepEqual(findViolations(toContents(result.turns)), []);
});

test("truncating a valid history at any target keeps it valid", () => {
  fc.assert(
    fc.property(validHistory, fc.integer({ min: 0, max: 200 }), (h, target) => {
      assert.deepEqual(findViolations(toContents(truncateHistory(mapContents(h), target, 0).turns)), []);
    }),
  );
});

test("clipLatest cuts the middle of the latest turn's largest tool output until the excess is gone; head, tail and every other part stay", () => {
  const big = Array.from({ length: 400 }, (_, l) => `row ${l} ${"z".repeat(20)}`).join("\n");
  const turns = mapContents([user(text("task")), model(call("run", "1")), user(response("run", "1", big), text("and a note"))]);
  const bytes = (p: MappedPart) => Math.max(p.chunk.tokens, Buffer.byteLength(p.chunk.text, "utf8"));
  const before = turns.at(-1)!.parts.reduce((sum, p) => sum + bytes(p), 0);
  const { turns: clipped, clipped: count } = clipLatest(turns, 5_000, bytes);
  assert.equal(count, 1);
  const after = clipped.at(-1)!.parts.reduce((sum, p) => sum + bytes(p), 0);
  assert.ok(before - after >= 5_000, `${before} -> ${after}`);
  const output = String(clipped.at(-1)!.parts[0]!.part.functionResponse!.response!["output"]);
  assert.ok(output.startsWith("row 0 ") && output.endsWith(`row 399 ${"z".repeat(20)}`));
  assert.match(output, /\[ctxopt: \d+ characters clipped to fit the window\]/);
  assert.deepEqual(clipped.at(-1)!.parts[1], turns.at(-1)!.parts[1]);
  assert.deepEqual(clipped.slice(0, -1), turns.slice(0, -1));
  assert.deepEqual(findViolations(toContents(clipped)), []);
});

test("clipLatest leaves a history with no excess as it is", () => {
  const turns = mapContents(history);
  assert.deepEqual(clipLatest(turns, 0, (p) => p.chunk.tokens).turns, turns);
});
