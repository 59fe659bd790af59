import assert from "node:assert/strict";
import { test } from "node:test";
import { CtxoptClient } from "../src/client.js";
import { chunksOf, mapContents } from "../src/gemini/mapping.js";
import { Chunk } from "../src/generated/ctxopt/v1/ctxopt.js";
import { appendBatches, SessionMirror } from "../src/sessionMirror.js";
import { startServerWith } from "./support/configuredServer.js";
import { model, text, user } from "./support/histories.js";

const chunk = (id: string, length = 10): Chunk => Chunk.fromPartial({ id, text: "x".repeat(length) });

test("appendBatches keeps every batch within the chunk limit, in order", () => {
  const chunks = Array.from({ length: 25 }, (_, i) => chunk(`c${i}`));
  const batches = appendBatches(chunks, 10, 0);
  assert.deepEqual(
    batches.map((b) => b.length),
    [10, 10, 5],
  );
  assert.deepEqual(batches.flat(), chunks);
});

test("appendBatches keeps every batch within the byte limit, and never splits a chunk", () => {
  const big = chunk("big", 10_000);
  const batches = appendBatches([chunk("a"), big, chunk("b")], 0, 20_000);
  assert.deepEqual(
    batches.map((b) => b.map((c) => c.id)),
    [["a"], ["big"], ["b"]],
  );
});

test("appendBatches with no limits sends one batch", () => {
  assert.equal(appendBatches([chunk("a"), chunk("b")], 0, 0).length, 1);
  assert.deepEqual(appendBatches([], 10, 0), []);
});

test("a sync larger than the server's max_chunks_per_request goes in several appends", async () => {
  const server = await startServerWith({ CTXOPT_MAX_CHUNKS_PER_REQUEST: "10" });
  const client = new CtxoptClient(server.address, { deadlineMs: 5000 });
  try {
    const history = Array.from({ length: 25 }, (_, i) => (i % 2 === 0 ? user(text(`question ${i}`)) : model(text(`answer ${i}`))));
    const mirror = new SessionMirror(client, "s-split");
    const report = await mirror.sync(chunksOf(mapContents(history)));
    assert.equal(report.appended, 25);
    assert.equal((await client.getSessionStats({ sessionId: "s-split" })).chunkCount, 25);
  } finally {
    client.close();
    await server.stop();
  }
});

test("a sync of the chunks the last one left the server holding reads none of them; a changed list or an applied plan does", async () => {
  const server = await startServerWith({});
  const client = new CtxoptClient(server.address, { deadlineMs: 5000 });
  try {
    let reads = 0;
    // Chunks that count how often their id is read: the delta's walk reads every one.
    const counted = (c: Chunk): Chunk => {
      const copy = { ...c };
      Object.defineProperty(copy, "id", { enumerable: true, get: () => ((reads += 1), c.id) });
      return copy;
    };
    const history = Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? user(text(`question ${i} ${"word ".repeat(400)}`)) : model(text(`answer ${i}`))));
    const chunks = chunksOf(mapContents(history)).map(counted);
    const mirror = new SessionMirror(client, "s-synced");
    assert.equal((await mirror.sync(chunks)).appended, 12);
    reads = 0;
    assert.deepEqual(await mirror.sync(chunks), { appended: 0, removed: 0, resynced: false });
    assert.deepEqual(await mirror.sync(chunks.slice()), { appended: 0, removed: 0, resynced: false });
    assert.equal(reads, 0);
    const longer = [...chunks, ...chunksOf(mapContents([user(text("one more question"))], { firstTurn: 12 }))];
    assert.equal((await mirror.sync(longer)).appended, 1);
    assert.ok(reads >= chunks.length);
    // An applied plan changes what the server holds: the next sync walks the list again.
    const plan = await mirror.optimize(longer, { budget: { contextLimitTokens: 1_000, thresholdPercent: 10, targetPercent: 5 }, force: true });
    assert.ok(plan.plan.decisions.length > 0);
    reads = 0;
    await mirror.sync(longer);
    assert.ok(reads >= longer.length);
  } finally {
    client.close();
    await server.stop();
  }
});
