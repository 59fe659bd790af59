import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { Action, Decision } from "../src/generated/ctxopt/v1/ctxopt.js";
import { applyPlan } from "../src/gemini/applyPlan.js";
import { judgePlan, PlanJudge } from "../src/gemini/judgePlan.js";
import { chunksOf, mapContents, toContents } from "../src/gemini/mapping.js";
import { call, model, response, text, user, validHistory } from "./support/histories.js";

const history = [
  user(text("read the config")),
  model(text("reading"), call("read_file", "r1", { absolute_path: "/etc/app.json" })),
  user(response("read_file", "r1", "line\n".repeat(400))),
  model(text("it sets port 80")),
  user(text("what port?")),
];
const turns = mapContents(history);
const ids = chunksOf(turns).map((c) => c.id);
const [askId, readingId, callId, resultId, answerId, questionId] = ids as [string, string, string, string, string, string];
const decision = (chunkId: string, action: Action, replacementText = "") => Decision.fromPartial({ chunkId, action, replacementText });

test("a plan that keeps everything gives back the same history", () => {
  fc.assert(
    fc.property(validHistory, (h) => {
      const mapped = mapContents(h);
      assert.deepEqual(toContents(applyPlan(mapped, { keptIds: chunksOf(mapped).map((c) => c.id), decisions: [] }).turns), h);
    }),
  );
});

test("MASK replaces a functionResponse payload and keeps its name and id", () => {
  const plan = { keptIds: ids, decisions: [decision(resultId, Action.ACTION_MASK, "[masked: stash s1]")] };
  const part = toContents(applyPlan(turns, plan).turns)[2]!.parts![0]!;
  assert.deepEqual(part, { functionResponse: { id: "r1", name: "read_file", response: { output: "[masked: stash s1]" } } });
});

test("TRIM replaces a text part with the excerpt", () => {
  const plan = { keptIds: ids, decisions: [decision(answerId, Action.ACTION_TRIM, "port 80")] };
  assert.deepEqual(toContents(applyPlan(turns, plan).turns)[3], model(text("port 80")));
});

test("a rewritten part keeps its chunk id and carries the replacement as its chunk text", () => {
  const plan = { keptIds: ids, decisions: [decision(resultId, Action.ACTION_MASK, "[masked]")] };
  const chunk = chunksOf(applyPlan(turns, plan).turns)[3]!;
  assert.equal(chunk.id, resultId);
  assert.equal(chunk.text, "[masked]");
});

test("STASH and DELETE take parts out of the history", () => {
  const plan = {
    keptIds: ids.filter((id) => id !== readingId && id !== answerId),
    decisions: [decision(readingId, Action.ACTION_STASH), decision(answerId, Action.ACTION_DELETE)],
  };
  const applied = applyPlan(turns, plan);
  assert.deepEqual(applied.removedIds, [readingId, answerId]);
  assert.deepEqual(toContents(applied.turns)[1], model(call("read_file", "r1", { absolute_path: "/etc/app.json" })));
});

test("a thought-signed part is never rewritten, and is reported for re-sync", () => {
  const signed = mapContents([user(text("q")), model({ ...call("ls", "1"), thoughtSignature: "c2ln" }), user(response("ls", "1", "x"))]);
  const [, signedCall] = chunksOf(signed);
  const applied = applyPlan(signed, { keptIds: chunksOf(signed).map((c) => c.id), decisions: [decision(signedCall!.id, Action.ACTION_MASK, "[m]")] });
  assert.deepEqual(toContents(applied.turns), toContents(signed));
  assert.deepEqual(applied.keptVerbatimIds, [signedCall!.id]);
});

test("never worse: stashing a whole call group gives a valid, smaller history that is accepted", () => {
  const plan = {
    keptIds: [askId, readingId, answerId, questionId],
    decisions: [decision(callId, Action.ACTION_STASH), decision(resultId, Action.ACTION_STASH)],
  };
  const verdict = judgePlan(turns, plan);
  assert.equal(verdict.accepted, true, verdict.reason);
  assert.deepEqual(toContents(verdict.turns), [user(text("read the config")), model(text("reading"), text("it sets port 80")), user(text("what port?"))]);
});

test("never worse: a plan removing the latest turn is refused", () => {
  const plan = { keptIds: ids.slice(0, -1), decisions: [decision(questionId, Action.ACTION_STASH)] };
  const verdict = judgePlan(turns, plan);
  assert.equal(verdict.accepted, false);
  assert.ok(verdict.broken.includes("latest_turn_intact"));
});

test("never worse: a plan that saves nothing is refused", () => {
  const verdict = judgePlan(turns, { keptIds: ids, decisions: [] });
  assert.equal(verdict.accepted, false);
  assert.equal(verdict.reason, "plan is not smaller");
});

test("never worse: stashing only a call's response drops the unanswered call too", () => {
  const plan = { keptIds: ids.filter((id) => id !== resultId), decisions: [decision(resultId, Action.ACTION_STASH)] };
  const verdict = judgePlan(turns, plan);
  assert.equal(verdict.accepted, true, verdict.reason);
  assert.ok(verdict.repairs.some((r) => r.rule === "calls_answered"));
  assert.ok(toContents(verdict.turns).every((c) => c.parts!.every((p) => p.functionCall === undefined)));
});

test("a turn the plan does not touch is kept as the same object; a changed one is new and the input is untouched", () => {
  const before = structuredClone(toContents(turns));
  const applied = applyPlan(turns, { keptIds: ids, decisions: [decision(resultId, Action.ACTION_MASK, "[masked]")] });
  assert.equal(applied.turns[1], turns[1]);
  assert.equal(applied.turns[3], turns[3]);
  assert.notEqual(applied.turns[2], turns[2]);
  assert.deepEqual(toContents(turns), before);
});

test("the same rewrite of the same part gives back the same part and turn; another replacement does not", () => {
  const plan = (replacement: string) => ({ keptIds: ids, decisions: [decision(resultId, Action.ACTION_MASK, replacement)] });
  const first = applyPlan(turns, plan("[masked]")).turns[2]!;
  assert.equal(applyPlan(turns, plan("[masked]")).turns[2], first);
  const other = applyPlan(turns, plan("[masked again]")).turns[2]!;
  assert.notEqual(other, first);
  assert.equal(other.parts[0]!.chunk.text, "[masked again]");
  assert.deepEqual(other.parts[0]!.part, { functionResponse: { id: "r1", name: "read_file", response: { output: "[masked again]" } } });
});

test("judging a plan keeps the turns it does not touch as the same objects", () => {
  const verdict = judgePlan(turns, { keptIds: ids, decisions: [decision(resultId, Action.ACTION_MASK, "[masked]")] });
  assert.equal(verdict.accepted, true, verdict.reason);
  assert.deepEqual(verdict.repairs, []);
  assert.deepEqual(
    verdict.turns.map((t, i) => t === turns[i]),
    [true, true, false, true, true],
  );
});

test("toContents gives back the same Content for a turn it has seen, a new one for a new turn", () => {
  const first = toContents(turns);
  const again = toContents(turns);
  assert.notEqual(again, first); // a new list each time: the caller may change it
  first.forEach((content, i) => assert.equal(again[i], content));
  const masked = applyPlan(turns, { keptIds: ids, decisions: [decision(resultId, Action.ACTION_MASK, "[masked]")] }).turns;
  const contents = toContents(masked);
  assert.equal(contents[1], first[1]);
  assert.notEqual(contents[2], first[2]);
  assert.deepEqual(contents[2], user(response("read_file", "r1", "[masked]")));
});

test("PlanJudge gives the last verdict again for the same turns and decisions, and judges anew when either changes", () => {
  const judge = new PlanJudge();
  const decisions = [decision(callId, Action.ACTION_STASH), decision(resultId, Action.ACTION_STASH)];
  const verdict = judge.judge(turns, { keptIds: ids, decisions });
  assert.deepEqual(verdict, judgePlan(turns, { keptIds: ids, decisions }));
  // a repeated plan: the same decision objects in a new list (another kept-id list does not enter the verdict)
  assert.equal(judge.judge(turns, { keptIds: [], decisions: [...decisions] }), verdict);
  // the caller's list changed in place since: judged again
  decisions[1] = decision(resultId, Action.ACTION_MASK, "[masked]");
  const masked = judge.judge(turns, { keptIds: ids, decisions });
  assert.notEqual(masked, verdict);
  assert.deepEqual(masked, judgePlan(turns, { keptIds: ids, decisions }));
  // other turns (an equal copy): judged again
  const copy = mapContents(history);
  const anew = judge.judge(copy, { keptIds: ids, decisions });
  assert.notEqual(anew, masked);
  assert.deepEqual(anew, masked);
});
