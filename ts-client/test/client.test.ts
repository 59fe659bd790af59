import assert from "node:assert/strict";
import { test } from "node:test";
import { CtxoptCallError, CtxoptClient, GrpcStatus } from "../src/client.js";
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
    await assert.rejects(client.health("", { deadlineMs: 100 }), (error: unknown) => error instanceof CtxoptCallError && error.code === GrpcStatus.DEADLINE_EXCEEDED);
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
