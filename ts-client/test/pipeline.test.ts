import assert from "node:assert/strict";
import { test } from "node:test";
import { CtxoptClient } from "../src/client.js";
import { Action, Decision, type OptimizeResponse } from "../src/generated/ctxopt/v1/ctxopt.js";
import { mapContents } from "../src/gemini/mapping.js";
import { knownTargetPercent, resolvePercents } from "../src/pipeline/budget.js";
import { PlanMemory } from "../src/pipeline/planMemory.js";
import { mandatoryRoots, relevanceQuery } from "../src/pipeline/roots.js";
import { ServiceGate } from "../src/pipeline/serviceGate.js";
import { call, model, response, text, user } from "./support/histories.js";
import { closedPort } from "./support/network.js";

const DEFAULTS = { threshold: 80, target: 60, pressure: 90 };

test("resolvePercents: a set percentage wins; the target never above the threshold, the pressure never below it", () => {
  assert.deepEqual(resolvePercents({}, DEFAULTS), DEFAULTS);
  assert.deepEqual(resolvePercents({ target: 70 }, DEFAULTS), { threshold: 80, target: 70, pressure: 90 });
  assert.deepEqual(resolvePercents({ threshold: 50 }, DEFAULTS), { threshold: 50, target: 50, pressure: 90 });
  assert.deepEqual(resolvePercents({ threshold: 95 }, DEFAULTS), { threshold: 95, target: 60, pressure: 95 });
});

test("knownTargetPercent: undefined until a target is known, then never above the known threshold", () => {
  assert.equal(knownTargetPercent({}, undefined), undefined);
  assert.equal(knownTargetPercent({ target: 70 }, undefined), 70);
  assert.equal(knownTargetPercent({ threshold: 40 }, DEFAULTS), 40);
  assert.equal(knownTargetPercent({}, DEFAULTS), 60);
});

const session = mapContents([
  user(text("Fix the parser."), text("<task>")),
  model(text("Looking."), call("run", "c1")),
  user(response("run", "c1", "output one")),
  model(call("run", "c2")),
]);

test("mandatoryRoots: the latest turn and its partner; the task only when asked", () => {
  const ids = (index: number) => session[index]!.parts.map((p) => p.chunk.id);
  assert.deepEqual(mandatoryRoots(session), [...ids(3), ...ids(2)], "a pending call keeps the turn before it");
  assert.deepEqual(mandatoryRoots(session.slice(0, 3)), [...ids(2), ...ids(1)], "a response keeps the call it answers");
  assert.deepEqual(mandatoryRoots(session, { keepTask: true }), [...ids(0), ...ids(3), ...ids(2)]);
});

test("relevanceQuery: the latest user turn with text, not a response-only turn", () => {
  assert.equal(relevanceQuery(session), "Fix the parser.\n<task>");
  const later = mapContents([user(text("first")), model(text("ok")), user(text(`x${"y".repeat(5000)}`))]);
  assert.equal(relevanceQuery(later).length, 4000, "only the tail of a huge message");
});

function stash(chunkId: string): Decision {
  return Decision.fromPartial({ chunkId, action: Action.ACTION_STASH });
}

test("PlanMemory: reading a plan or its counts leaves the memory as it was", () => {
  const turns = mapContents([
    user(text("go")),
    model({ ...call("read_file", "a"), thoughtSignature: "sig" }, call("read_file", "b")),
    user(response("read_file", "a", "A"), response("read_file", "b", "B")),
    user(text("next")),
  ]);
  const signed = turns[1]!.parts[0]!.chunk.id;
  const memory = new PlanMemory();
  memory.adopt({ keptIds: [], decisions: [stash(signed)] } as unknown as OptimizeResponse);
  const first = memory.planFor(turns);
  assert.deepEqual(memory.countsFor(turns), { stashed: 1, trimmed: 0, masked: 0, deleted: 0 });
  assert.deepEqual(memory.planFor(turns), first, "a read changes nothing");
  memory.keepSignedCalls(turns);
  assert.deepEqual(memory.planFor(turns).decisions, [], "the explicit step gives the signed call back");
});

test("ServiceGate: a failure opens the circuit for breakerMs and says why", async () => {
  const client = new CtxoptClient(`127.0.0.1:${await closedPort()}`, { deadlineMs: 500 });
  try {
    const gate = new ServiceGate(client, { deadlineMs: 500, breakerMs: 60_000 });
    assert.equal(gate.skipReason(), undefined);
    const failure = await gate.ensureHealthy(gate.callSettings()).then(
      () => undefined,
      (error: unknown) => error,
    );
    assert.ok(failure !== undefined, "a closed port is not healthy");
    const reason = gate.failed(failure);
    assert.match(
      gate.skipReason() ?? "",
      new RegExp(`service skipped for \\d+ s after a failure \\(${reason.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}; circuit open\\)`),
    );
    const closed = new ServiceGate(client, { deadlineMs: 500, breakerMs: 0 });
    closed.failed(failure);
    assert.equal(closed.skipReason(), undefined, "breakerMs 0: never skipped");
  } finally {
    client.close();
  }
});
