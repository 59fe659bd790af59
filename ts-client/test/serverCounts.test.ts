import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { CtxoptClient } from "../src/client.js";
import { Action, AppendChunksResponse, Decision } from "../src/generated/ctxopt/v1/ctxopt.js";
import { chunksOf, mapContents } from "../src/gemini/mapping.js";
import { countingClient, ServerCounts, windowTokensOf } from "../src/gemini/serverCounts.js";
import { response, text, user } from "./support/histories.js";
import { type RunningServer, startServer } from "./support/server.js";

let server: RunningServer;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server.stop();
});

test("a text counts the service's count; a media part the larger of that and the host's estimate", () => {
  assert.equal(windowTokensOf(10, "abcd", 14), 14);
  assert.equal(windowTokensOf(10, "abcd", 7), 7, "chars/4 above cl100k: the count stands");
  assert.equal(windowTokensOf(3_000, "[inline image/png, 5000 bytes]", 12, false), 3_000);
  assert.equal(windowTokensOf(3_000, "[inline image/png, 5000 bytes]", 4_000, false), 4_000);
});

test("a text the service has not counted counts its UTF-8 bytes (no cl100k token is shorter than a byte)", () => {
  assert.equal(windowTokensOf(1, "abcdefgh", undefined), 8);
  assert.equal(windowTokensOf(1, "日本", undefined), 6);
  assert.equal(windowTokensOf(100, "abc", undefined), 100);
});

test("counted turns take the service's count of the same id and text; another text under the id is uncounted", () => {
  const [turn] = mapContents([user(text("x".repeat(400)))]);
  const chunk = chunksOf([turn!])[0]!;
  const counts = new ServerCounts();
  assert.equal(counts.counted([turn!])[0]!.parts[0]!.chunk.tokens, 400, "uncounted: its bytes");
  counts.recordAppend([{ id: chunk.id, text: chunk.text }], AppendChunksResponse.fromPartial({ chunks: [{ id: chunk.id, tokens: 150 }] }));
  assert.equal(counts.counted([turn!])[0]!.parts[0]!.chunk.tokens, 150);
  assert.equal(counts.get(chunk.id, "other text"), undefined);
  assert.equal(counts.excess([turn!]), 0, "the service's count is the larger: nothing to add");
  assert.equal(chunk.tokens, 100, "the input is not changed");
});

test("a trim or mask records the service's count of its replacement text", () => {
  const counts = new ServerCounts();
  counts.recordDecisions([Decision.fromPartial({ chunkId: "a", action: Action.ACTION_TRIM, replacementText: "[ctxopt: trimmed a]", tokensAfter: 9 })]);
  counts.recordDecisions([Decision.fromPartial({ chunkId: "b", action: Action.ACTION_STASH, tokensAfter: 0 })]);
  assert.equal(counts.get("a", "[ctxopt: trimmed a]"), 9);
  assert.equal(counts.get("b", ""), undefined);
});

test("the excess is what the host's estimate of media adds over the service's counts", () => {
  const [turn] = mapContents([user(text("a".repeat(400)))]);
  const chunk = chunksOf([turn!])[0]!;
  const counts = new ServerCounts();
  counts.record(chunk.id, chunk.text, 60);
  assert.equal(counts.excess([turn!]), 0, "a text counts what the service counted");
  const [media] = mapContents([user({ inlineData: { mimeType: "image/png", data: "aGVsbG8=" } })]);
  const image = chunksOf([media!])[0]!;
  counts.record(image.id, image.text, 12);
  assert.equal(counts.excess([media!]), image.tokens - 12, "an image counts the host's estimate");
});

test("retain forgets chunks no longer in the history", () => {
  const counts = new ServerCounts();
  counts.record("a", "x", 1);
  counts.record("b", "y", 2);
  counts.retain(new Set(["b"]));
  assert.equal(counts.get("a", "x"), undefined);
  assert.equal(counts.get("b", "y"), 2);
});

test("the counting client records the service's cl100k count of every appended chunk (dense JSON above chars/4)", async () => {
  const client = new CtxoptClient(server.address, { deadlineMs: 5000 });
  try {
    const counts = new ServerCounts();
    const dense = JSON.stringify(Array.from({ length: 200 }, (_, i) => ({ k: i, v: (i * 7919).toString(16) })));
    const turns = mapContents([user(response("read", "r1", dense))]);
    const chunk = chunksOf(turns)[0]!;
    await countingClient(client, counts).appendChunks({ sessionId: `counts-${process.pid}`, chunks: [{ ...chunk, tokens: 0 }] });
    const counted = counts.get(chunk.id, chunk.text);
    assert.ok(counted !== undefined && counted > chunk.tokens, `cl100k ${counted} above the estimate ${chunk.tokens}`);
    assert.equal(counts.counted(turns)[0]!.parts[0]!.chunk.tokens, counted);
    assert.equal(countingClient(client, counts).address, client.address, "everything else is the client's");
  } finally {
    client.close();
  }
});
