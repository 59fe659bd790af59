import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { findViolations } from "../src/gemini/history.js";
import { mapContents, toContents } from "../src/gemini/mapping.js";
import { truncateHistory } from "../src/gemini/truncate.js";
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
  assert.deepEqual(toContents(result.turns), [user(text("environment")), model(text("Got it.")), user(text(`first ${long}`)), model(text("done")), user(text("latest question"))]);
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
