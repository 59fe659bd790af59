import assert from "node:assert/strict";
import { test } from "node:test";
import type { Content } from "@google/genai";
import fc from "fast-check";
import { findViolations, OMITTED_START_TEXT, preservationViolations, repairHistory } from "../src/gemini/history.js";
import { mapContents, toContents } from "../src/gemini/mapping.js";
import { call, model, response, text, user, validHistory } from "./support/histories.js";

const rules = (history: Content[]) => findViolations(history).map((v) => v.rule);
const repair = (history: Content[]) => {
  const outcome = repairHistory(mapContents(history));
  return { ...outcome, history: toContents(outcome.turns), rules: outcome.violations.map((v) => v.rule) };
};

test("a valid history has no violations and repair leaves it untouched", () => {
  fc.assert(
    fc.property(validHistory, (history) => {
      assert.deepEqual(findViolations(history), []);
      const outcome = repair(history);
      assert.deepEqual(outcome.history, history);
      assert.deepEqual(outcome.repairs, []);
    }),
  );
});

test("known_role: a turn of another role is reported, and mapping refuses it", () => {
  const history = [user(text("a")), { role: "tool", parts: [text("b")] }];
  assert.ok(rules(history).includes("known_role"));
  assert.throws(() => mapContents(history), /history\[1\]\.role/);
});

test("no_empty_parts: a turn without parts is dropped and its neighbours merged", () => {
  const history = [user(text("a")), model(text("b")), { role: "user", parts: [] }, model(text("c")), user(text("d"))];
  assert.ok(rules(history).includes("no_empty_parts"));
  const outcome = repair(history);
  assert.deepEqual(outcome.history, [user(text("a")), model(text("b"), text("c")), user(text("d"))]);
  assert.deepEqual(outcome.rules, []);
});

test("no_empty_parts: an empty part is dropped", () => {
  const history = [user(text("a"), {}), model(text("b")), user(text("c"))];
  assert.ok(rules(history).includes("no_empty_parts"));
  assert.deepEqual(repair(history).history, [user(text("a")), model(text("b")), user(text("c"))]);
});

test("first_turn_user: a history opening with a model turn gets a placeholder user turn", () => {
  const history = [model(text("b")), user(text("c"))];
  assert.ok(rules(history).includes("first_turn_user"));
  const outcome = repair(history);
  assert.deepEqual(outcome.history, [user(text(OMITTED_START_TEXT)), model(text("b")), user(text("c"))]);
  assert.deepEqual(outcome.rules, []);
});

test("alternating_roles: adjacent turns of one role merge, keeping every part in order", () => {
  const history = [user(text("a")), user(text("b")), model(text("c")), model(text("d")), user(text("e"))];
  assert.ok(rules(history).includes("alternating_roles"));
  const outcome = repair(history);
  assert.deepEqual(outcome.history, [user(text("a"), text("b")), model(text("c"), text("d")), user(text("e"))]);
});

test("calls_answered: responses in another order than their calls are put in call order", () => {
  const history = [
    user(text("go")),
    model(call("a", "1"), call("b", "2")),
    user(response("b", "2", "B"), response("a", "1", "A")),
    model(text("done")),
    user(text("next")),
  ];
  assert.ok(rules(history).includes("calls_answered"));
  const outcome = repair(history);
  assert.deepEqual(outcome.history[2], user(response("a", "1", "A"), response("b", "2", "B")));
  assert.deepEqual(outcome.rules, []);
});

test("calls_answered: a call the next turn does not answer is dropped", () => {
  const history = [user(text("go")), model(text("let me look"), call("a", "1")), user(text("stop")), model(text("ok")), user(text("next"))];
  assert.ok(rules(history).includes("calls_answered"));
  const outcome = repair(history);
  assert.deepEqual(outcome.history[1], model(text("let me look")));
  assert.deepEqual(outcome.rules, []);
});

test("calls_answered: a response whose id differs from the call's does not answer it", () => {
  const history = [user(text("go")), model(call("a", "1")), user(response("a", "9", "A")), model(text("ok")), user(text("next"))];
  assert.ok(rules(history).includes("calls_answered"));
  const outcome = repair(history);
  assert.deepEqual(outcome.history, [user(text("go")), model(text("ok")), user(text("next"))]);
  assert.deepEqual(outcome.rules, []);
});

test("calls_answered: a call in the last turn is pending and valid", () => {
  assert.deepEqual(rules([user(text("go")), model(call("a", "1"))]), []);
});

test("no_orphan_response: a response to no call is dropped", () => {
  const history = [user(text("go")), model(text("hm")), user(text("look"), response("a", "1", "A")), model(text("ok")), user(text("next"))];
  assert.ok(rules(history).includes("no_orphan_response"));
  const outcome = repair(history);
  assert.deepEqual(outcome.history[2], user(text("look")));
  assert.deepEqual(outcome.rules, []);
});

test("latest_turn_intact: a repair that would change the latest turn is refused", () => {
  const history = [user(text("go")), model(text("hm")), user(response("a", "1", "orphan in the latest turn"))];
  const outcome = repair(history);
  assert.ok(outcome.rules.includes("latest_turn_intact"));
});

test("pending_call_intact: changing the call the latest turn answers is a violation", () => {
  const before = [user(text("go")), model(call("a", "1", { x: 1 })), user(response("a", "1", "A"))];
  const after = [user(text("go")), model(call("a", "1", { x: 2 })), user(response("a", "1", "A"))];
  assert.deepEqual(
    preservationViolations(before, after).map((v) => v.rule),
    ["pending_call_intact"],
  );
});

test("verbatim_parts_intact: a thought signature that changed is a violation", () => {
  const before = [user(text("go")), model({ ...call("a", "1"), thoughtSignature: "c2ln" }), user(response("a", "1", "A")), model(text("ok")), user(text("n"))];
  const after = structuredClone(before);
  after[1]!.parts![0]!.thoughtSignature = "b3RoZXI=";
  assert.deepEqual(
    preservationViolations(before, after).map((v) => v.rule),
    ["verbatim_parts_intact"],
  );
});

test("verbatim_parts_intact: dropping a thought part is allowed, rewriting it is not", () => {
  const before = [user(text("go")), model({ text: "plan", thought: true }, text("answer")), user(text("n"))];
  assert.deepEqual(preservationViolations(before, [user(text("go")), model(text("answer")), user(text("n"))]), []);
  const rewritten = [user(text("go")), model({ text: "pl", thought: true }, text("answer")), user(text("n"))];
  assert.deepEqual(
    preservationViolations(before, rewritten).map((v) => v.rule),
    ["verbatim_parts_intact"],
  );
});

test("removing any parts but the latest turn's leaves a history repair makes valid, or refuses", () => {
  const damaged = validHistory.chain((history) =>
    fc.tuple(fc.constant(history), fc.array(fc.boolean(), { minLength: history.length * 4, maxLength: history.length * 4 })),
  );
  fc.assert(
    fc.property(damaged, ([history, drops]) => {
      let k = 0;
      const broken = history.map((content, i) =>
        i === history.length - 1 ? content : { ...content, parts: content.parts!.filter(() => !drops[k++ % drops.length]) },
      );
      const outcome = repair(broken);
      const refused = outcome.rules.some((r) => r === "latest_turn_intact" || r === "pending_call_intact");
      assert.ok(refused || findViolations(outcome.history).length === 0, JSON.stringify(outcome.violations));
      if (!refused) assert.deepEqual(outcome.history.at(-1)!.parts!.slice(-broken.at(-1)!.parts!.length), broken.at(-1)!.parts);
    }),
  );
});
