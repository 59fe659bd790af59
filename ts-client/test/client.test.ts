import assert from "node:assert/strict";
import { test } from "node:test";
import { CtxoptCallError, CtxoptClient, GrpcStatus } from "../src/client.js";
import { startServerWith } from "./support/configuredServer.js";
import { closedPort, silentServer } from "./support/network.js";

test("a call to a stopped server keeps retrying until its deadline, then fails with its status", async () => {
  const client = new CtxoptClient(`127.0.0.1:${await closedPort()}`);
  try {
    await assert.rejects(client.getSessionStats({ sessionId: "s" }, { deadlineMs: 200 }), (error: unknown) => {
      assert.ok(error instanceof CtxoptCallError);
      assert.equal(error.method, "GetSessionStats");
      assert.ok([GrpcStatus.UNAVAILABLE, GrpcStatus.DEADLINE_EXCEEDED].includes(error.code), GrpcStatus[error.code]);
      return true;
    });
  } finally {
    client.close();
  }
});

test("a server that never answers fails the call with DEADLINE_EXCEEDED", async () => {
  const silent = await silentServer();
  const client = new CtxoptClient(silent.address);
  try {
    await assert.rejects(
      client.health("", { deadlineMs: 100 }),
      (error: unknown) => error instanceof CtxoptCallError && error.code === GrpcStatus.DEADLINE_EXCEEDED,
    );
  } finally {
    client.close();
    await silent.close();
  }
});

test("isServing is false, not an error, when the server is down", async () => {
  const client = new CtxoptClient(`127.0.0.1:${await closedPort()}`);
  try {
    assert.equal(await client.isServing({ deadlineMs: 100 }), false);
  } finally {
    client.close();
  }
});

test("serverInfo reports the server's defaults and limits, asked once per connection", async () => {
  const server = await startServerWith({ CTXOPT_GC_THRESHOLD_PERCENT: "70", CTXOPT_MAX_CHUNKS_PER_REQUEST: "123" });
  const client = new CtxoptClient(server.address);
  try {
    assert.equal(client.lastServerInfo, undefined);
    const info = await client.serverInfo();
    assert.equal(info.defaultBudget?.thresholdPercent, 70);
    assert.equal(info.maxChunksPerRequest, 123);
    assert.ok(info.version !== "");
    assert.equal(await client.serverInfo(), info, "answered from the cache");
    assert.equal(client.lastServerInfo, info);
  } finally {
    client.close();
    await server.stop();
  }
});

test("after the connection is lost, serverInfo asks the server that came back", async () => {
  const first = await startServerWith({ CTXOPT_GC_THRESHOLD_PERCENT: "70" });
  const client = new CtxoptClient(first.address, { deadlineMs: 5000 });
  try {
    assert.equal((await client.serverInfo()).defaultBudget?.thresholdPercent, 70);
    await first.stop();
    await assert.rejects(client.getSessionStats({ sessionId: "s" }, { deadlineMs: 200 }));
    const second = await startServerWith({ CTXOPT_GC_THRESHOLD_PERCENT: "75" }, { addr: first.address });
    try {
      assert.equal((await client.serverInfo()).defaultBudget?.thresholdPercent, 75);
    } finally {
      await second.stop();
    }
  } finally {
    client.close();
  }
});
