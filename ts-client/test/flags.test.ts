import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { DEFAULT_FLAGS, inRollout, readFlags, rolloutBucket } from "../src/flags.js";

test("with no variables set every flag takes its default", () => {
  assert.deepEqual(readFlags({}), DEFAULT_FLAGS);
  assert.equal(DEFAULT_FLAGS.mode, "false");
  assert.equal(DEFAULT_FLAGS.address, "127.0.0.1:50051");
});

for (const mode of ["false", "true", "shadow"] as const) {
  test(`GEMINI_CONTEXT_OPTIMIZATION=${mode} selects ${mode} mode`, () => {
    assert.equal(readFlags({ GEMINI_CONTEXT_OPTIMIZATION: mode }).mode, mode);
  });
}

test("GEMINI_CONTEXT_OPTIMIZATION is case-insensitive", () => {
  assert.equal(readFlags({ GEMINI_CONTEXT_OPTIMIZATION: "Shadow" }).mode, "shadow");
});

test("an unknown GEMINI_CONTEXT_OPTIMIZATION value is refused, naming the variable and value", () => {
  assert.throws(() => readFlags({ GEMINI_CONTEXT_OPTIMIZATION: "maybe" }), /GEMINI_CONTEXT_OPTIMIZATION.*"maybe"/);
});

test("GEMINI_CONTEXT_ROLLOUT_PERCENT reads a percentage", () => {
  assert.equal(readFlags({ GEMINI_CONTEXT_ROLLOUT_PERCENT: "25" }).rolloutPercent, 25);
});

test("GEMINI_CONTEXT_ROLLOUT_PERCENT above 100 is refused", () => {
  assert.throws(() => readFlags({ GEMINI_CONTEXT_ROLLOUT_PERCENT: "101" }), /GEMINI_CONTEXT_ROLLOUT_PERCENT/);
});

test("GEMINI_CONTEXT_MAX_CHUNKS reads a chunk count", () => {
  assert.equal(readFlags({ GEMINI_CONTEXT_MAX_CHUNKS: "200" }).maxChunks, 200);
});

test("GEMINI_CONTEXT_MAX_CHUNKS must be an integer", () => {
  assert.throws(() => readFlags({ GEMINI_CONTEXT_MAX_CHUNKS: "2.5" }), /GEMINI_CONTEXT_MAX_CHUNKS/);
});

test("GEMINI_EMBEDDING_ENABLED accepts true/false spellings", () => {
  assert.equal(readFlags({ GEMINI_EMBEDDING_ENABLED: "1" }).embeddingEnabled, true);
  assert.equal(readFlags({ GEMINI_EMBEDDING_ENABLED: "off" }).embeddingEnabled, false);
});

test("GEMINI_PRUNING_AGGRESSIVE=true turns aggressive pruning on", () => {
  assert.equal(readFlags({ GEMINI_PRUNING_AGGRESSIVE: "true" }).aggressive, true);
});

test("a boolean flag with another value is refused", () => {
  assert.throws(() => readFlags({ GEMINI_PRUNING_AGGRESSIVE: "very" }), /GEMINI_PRUNING_AGGRESSIVE/);
});

test("CTXOPT_ADDR sets the service address", () => {
  assert.equal(readFlags({ CTXOPT_ADDR: "localhost:6000" }).address, "localhost:6000");
});

test("CTXOPT_ADDR without a port is refused", () => {
  assert.throws(() => readFlags({ CTXOPT_ADDR: "localhost" }), /CTXOPT_ADDR/);
});

test("CTXOPT_DEADLINE_MS sets the service deadline", () => {
  assert.equal(readFlags({ CTXOPT_DEADLINE_MS: "250" }).deadlineMs, 250);
});

test("CTXOPT_DEADLINE_MS of zero is refused", () => {
  assert.throws(() => readFlags({ CTXOPT_DEADLINE_MS: "0" }), /CTXOPT_DEADLINE_MS/);
});

test("a session's rollout bucket is stable and in 0-99", () => {
  fc.assert(
    fc.property(fc.string(), (id) => {
      const bucket = rolloutBucket(id);
      return bucket === rolloutBucket(id) && bucket >= 0 && bucket < 100;
    }),
  );
});

test("rollout 0% admits no session and 100% admits every session", () => {
  fc.assert(fc.property(fc.string(), (id) => !inRollout(id, 0) && inRollout(id, 100)));
});

test("a session inside a rollout stays inside when the rollout grows", () => {
  fc.assert(
    fc.property(fc.string(), fc.integer({ min: 0, max: 100 }), fc.integer({ min: 0, max: 100 }), (id, a, b) => {
      const [low, high] = a <= b ? [a, b] : [b, a];
      return !inRollout(id, low) || inRollout(id, high);
    }),
  );
});

test("a 30% rollout admits roughly 30% of sessions", () => {
  const admitted = Array.from({ length: 2000 }, (_, i) => inRollout(`session-${i}`, 30)).filter(Boolean).length;
  assert.ok(admitted > 500 && admitted < 700, `admitted ${admitted} of 2000`);
});

for (const [word, mode] of [
  ["1", "true"],
  ["on", "true"],
  ["yes", "true"],
  ["0", "false"],
  ["off", "false"],
  ["no", "false"],
] as const) {
  test(`GEMINI_CONTEXT_OPTIMIZATION=${word} reads as ${mode}, like the other boolean flags`, () => {
    assert.equal(readFlags({ GEMINI_CONTEXT_OPTIMIZATION: word }).mode, mode);
  });
}

test("CTXOPT_BREAKER_MS defaults to 30 s and reads an integer", () => {
  assert.equal(readFlags({}).breakerMs, 30_000);
  assert.equal(readFlags({ CTXOPT_BREAKER_MS: "0" }).breakerMs, 0);
  assert.throws(() => readFlags({ CTXOPT_BREAKER_MS: "soon" }), /CTXOPT_BREAKER_MS.*"soon"/);
});

test("threshold and target percentages are unset by default and read when given", () => {
  assert.equal(readFlags({}).thresholdPercent, undefined);
  const flags = readFlags({ GEMINI_CONTEXT_THRESHOLD_PERCENT: "45", GEMINI_CONTEXT_TARGET_PERCENT: "30" });
  assert.equal(flags.thresholdPercent, 45);
  assert.equal(flags.targetPercent, 30);
  assert.throws(() => readFlags({ GEMINI_CONTEXT_TARGET_PERCENT: "120" }), /GEMINI_CONTEXT_TARGET_PERCENT/);
});
